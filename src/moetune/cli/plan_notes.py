"""The words of plan's near-tie (a faster candidate the seeds' order ranked below the pick in its 1% band), which its
JSON holds as `why`; plan's other notes are worded from its JSON (planner/plan_notes.py)."""

from moetune.layout.cp_sizing import LONG_CONTEXT
from moetune.planner.defaults import default_dispatcher
from moetune.planner.moves import TIGHT_SHARE
from moetune.planner.plan_notes import RANKING_SOURCE
from moetune.planner.search import PlanResult


def gain_over_pick(result: PlanResult, alt) -> float:
    """An alternative's predicted tokens/s/GPU over the pick's, minus 1."""
    return alt.time["tokens_per_s_per_gpu"] / result.results[0].time["tokens_per_s_per_gpu"] - 1


def recompute_text(k) -> str:
    return k.recompute + (f" ({','.join(sorted(k.effective_modules))})" if k.recompute == "selective" else "")


def _free_gib(e) -> float:
    return (e.gpu.capacity_bytes - e.peak_bytes) / 2**30


def _sizes(name: str, size) -> object:
    """What a faster candidate runs where the pick runs another size of `name` (`size`: an estimate's size of it)."""
    return lambda p, a: f"runs {name} {size(a)} where #1 runs {size(p)}"


# For each of ranking.PREFERENCES: what the faster candidate does that the pick does not, what the seeds rank first
# instead, and where they say so
NEAR_TIE_WORDS = {
    "memory_margin": (lambda p, a: f"leaves {_free_gib(a):.1f} GiB free, under {TIGHT_SHARE:.0%} of the GPU's "
                      f"{a.gpu.capacity_bytes / 2**30:g} GiB, the memory estimate's own error (#1 leaves "
                      f"{_free_gib(p):.1f})", "what fits reliably", "seeds/001"),
    "model_parallelism": (_sizes("TP x CP x PP", lambda e: e.layout.tp * e.layout.cp * e.layout.pp),
                          "less model parallelism", "seeds/000 Phase 1"),
    "recompute": (lambda p, a: f"recomputes {recompute_text(a.knobs)} where #1 recomputes {recompute_text(p.knobs)}",
                  "lighter recompute", "seeds/000 Phase 1"),
    "activation_offload": (lambda p, a: f"offloads activations ({','.join(sorted(a.knobs.offload_modules))})",
                           "no offload", "seeds/000 Phase 1: offloading last"),
    "optimizer_offload": (_sizes("optimizer offload", lambda e: f"{e.knobs.optimizer_offload_fraction:g}"),
                          "no offload", "seeds/000 Phase 1: offloading last"),
    "default_dispatcher": (lambda p, a: f"runs {a.knobs.dispatcher}, not its layout's default "
                           f"{default_dispatcher(a.gpu, a.layout)}", "the layout's default dispatcher",
                           "seeds/000, seeds/004 mappings"),
    "data_parallel": (_sizes("DP", lambda e: e.layout.dp), "more DP", "seeds/000: maximize DP"),
    "short_context_cp": (_sizes("CP", lambda e: e.layout.cp), f"less CP below {LONG_CONTEXT // 1024}k tokens",
                         "seeds/000 Phase 2"),
    "tp": (_sizes("TP", lambda e: e.layout.tp), "less TP", "seeds/000"),
    "expert_tp": (_sizes("expert TP", lambda e: e.layout.etp), "less expert TP",
                  "seeds/000: EP before extra TP for the experts"),
    "ep": (_sizes("EP", lambda e: e.layout.ep), "more EP", "seeds/000: EP before extra TP for the experts"),
}


def near_tie_note(result: PlanResult) -> str:
    """Why a candidate predicting more than the pick stands below it (search.PlanResult.near_tie): the first of the
    seeds' preferences on which the two differ (planner/ranking.py preference)."""
    tie, pick = result.near_tie, result.results[0]
    alt, (does, first, _) = tie.alternative, NEAR_TIE_WORDS[tie.preference]
    # the dispatcher named where it differs: why a pick runs other than the platform's default is what a user asks
    other = f" ({alt.knobs.dispatcher})" if alt.knobs.dispatcher != pick.knobs.dispatcher \
        and tie.preference != "default_dispatcher" else ""
    name = f"#{tie.row}{other}" if tie.row else (f"{alt.layout.short()} mbs {alt.workload.micro_batch_size} "
                                                 f"{alt.knobs.dispatcher}, recompute {recompute_text(alt.knobs)},")
    return f"{name} predicts {tie.gain:+.1%} over #1 but {does(pick, alt)}; within 1% the seeds rank {first} first"


def near_tie_json(result: PlanResult) -> dict:
    """The near-tie's candidate as a row has it, with its gain, its row (None: not shown), what decided it, the note
    plan prints (`why`) and where the seeds and the ranking say so (`source`: JSON only, the terminal keeps the
    note short)."""
    tie = result.near_tie
    return {**tie.alternative.to_json(), "predicted_gain": tie.gain, "row": tie.row, "decided_by": tie.preference,
            "why": near_tie_note(result), "source": f"{NEAR_TIE_WORDS[tie.preference][2]}; {RANKING_SOURCE}"}
