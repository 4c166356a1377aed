"""The notes `plan` prints under its table, each also in its JSON: the global batch ruling out DP sizes, the
optimizer-offload alternative to a full-recompute pick, a faster CP layout the short-context weight ranked off, and a
faster candidate the seeds' order ranked below the pick in its 1% band."""

from moetune.layout.validate import LONG_CONTEXT
from moetune.planner.defaults import default_dispatcher
from moetune.planner.moves import TIGHT_SHARE
from moetune.planner.ranking import CP_SHORT_MARGIN
from moetune.planner.search import PlanResult


def gbs_allowing(excluded: list[int], gbs: int) -> int:
    """The nearest larger GBS that allows the widest excluded DP (its next multiple, at MBS 1)."""
    widest = max(excluded)
    return (gbs + widest - 1) // widest * widest


def gbs_note(excluded: list[int], gbs: int) -> str:
    """Which data-parallel sizes the global batch ruled out, and the nearest larger GBS that allows the widest."""
    widest, allowing = max(excluded), gbs_allowing(excluded, gbs)
    return (f"GBS {gbs} is not a multiple of DP x MBS for DP {', '.join(map(str, excluded))}: those layouts were not "
            f"searched (the seeds maximize DP); GBS {allowing} would allow DP {widest}")


def gain_over_pick(result: PlanResult, alt) -> float:
    """An alternative's predicted tokens/s/GPU over the pick's, minus 1."""
    return alt.time["tokens_per_s_per_gpu"] / result.results[0].time["tokens_per_s_per_gpu"] - 1


def offload_note(result: PlanResult) -> str:
    """The optimizer-offload alternative to a full-recompute pick (search.offload_instead), with its numbers: the
    offload is added, not put in recompute's place, so the note says what the memory it frees buys."""
    alt = result.offload_alternative
    host = f" and {alt.host_peak_bytes / 2**30:.0f} GiB of host memory a GPU" if alt.host_peak_bytes else ""
    return (f"#1 recomputes whole layers; offloading the optimizer to the CPU frees the memory for "
            f"{_offload_buys(result.results[0], alt)}: it predicts {gain_over_pick(result, alt):+.0%}, "
            f"{alt.time['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU at {alt.peak_bytes / 2**30:.1f} GiB{host}. The "
            "seeds add offloading only after recompute (seeds/000 Phase 1), so it is not the pick; their own "
            "long-context DeepSeek-V3 pattern uses it (seeds/002): --fix optimizer_offload_fraction=1 searches it")


def _offload_buys(pick, alt) -> str:
    """What the offload alternative changes from the pick besides the offload: layout, micro-batch, recompute."""
    changes = [f"the layout {alt.layout.short()}"] if alt.layout.short() != pick.layout.short() else []
    if alt.workload.micro_batch_size != pick.workload.micro_batch_size:
        changes.append(f"mbs {alt.workload.micro_batch_size}")
    if alt.knobs.recompute != "full":
        lighter = "no recompute" if alt.knobs.recompute == "none" else f"recompute {recompute_text(alt.knobs)}"
        return ", ".join([*changes, f"{lighter} instead of full"])
    # the gain is from the layout (or other knobs) the freed memory allows: whole layers are still recomputed
    return f"{', '.join(changes) or 'other knobs on the layout and mbs of #1'}, still recomputing whole layers"


def short_cp_note(result: PlanResult) -> str:
    """The faster CP layout the ranking's short-context CP weight kept off the list (search._short_cp_alternative)."""
    alt = result.short_cp_alternative
    gain = gain_over_pick(result, alt)
    return (f"{alt.layout.short()} (mbs {alt.workload.micro_batch_size}) predicts "
            f"{alt.time['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, {gain:+.1%} over #1, and fits, but below "
            f"{LONG_CONTEXT // 1024}k tokens a layout with CP > 1 ranks as {CP_SHORT_MARGIN - 1:.0%} slower (the seeds "
            f"add CP for long context, seeds/000 Phase 2; within the step model's own error); `--fix "
            f"cp={alt.layout.cp}` lists it")


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
    alt, (does, first, source) = tie.alternative, NEAR_TIE_WORDS[tie.preference]
    # the dispatcher named where it differs: why a pick runs other than the platform's default is what a user asks
    other = f" ({alt.knobs.dispatcher})" if alt.knobs.dispatcher != pick.knobs.dispatcher \
        and tie.preference != "default_dispatcher" else ""
    name = f"#{tie.row}{other}" if tie.row else (f"{alt.layout.short()} mbs {alt.workload.micro_batch_size} "
                                                 f"{alt.knobs.dispatcher}, recompute {recompute_text(alt.knobs)},")
    return (f"{name} predicts {tie.gain:+.1%} over #1 but {does(pick, alt)}; within 1% the seeds rank {first} first "
            f"({source}; planner/ranking.py preference)")


def near_tie_json(result: PlanResult) -> dict:
    """The near-tie's candidate as a row has it, with its gain, its row (None: not shown) and what decided it."""
    tie = result.near_tie
    return {**tie.alternative.to_json(), "predicted_gain": tie.gain, "row": tie.row, "decided_by": tie.preference,
            "why": near_tie_note(result)}
