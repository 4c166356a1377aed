"""The notes `plan` prints beside its table, worded from the plan's JSON (cli/plan_output.py plan_json), so that plan's
text and `report` of the saved plan say the same: the DP sizes the global batch rules out, the rows within the memory
estimate's own error of the GPU, the optimizer-offload alternative to a full-recompute pick, a faster CP layout the
short-context weight ranked off, the near-tie, the seeds' order within 1%, the moves the search leaves out, and why
a BF16 pick where FP8/FP4 was searched (planner/shape_note.py)."""

from moetune.layout.cp_sizing import LONG_CONTEXT
from moetune.planner.from_json import saved_results
from moetune.planner.moves import TIGHT_SHARE, headroom_for
from moetune.planner.ranking import CP_SHORT_MARGIN
from moetune.planner.result_text import layout_label, recompute_label

UNSEARCHED = "Not searched (the seeds' starting choice stays the pick's)"
# Where the notes' reasons are written down: kept in plan's JSON (`source`), out of the terminal's text
RANKING_SOURCE = "planner/ranking.py preference"
OFFLOAD_SOURCE = ("seeds/000 Phase 1: offloading only after recompute; seeds/002: DeepSeek-V3's long-context pattern "
                  "with optimizer offload")
SHORT_CP_SOURCE = "seeds/000 Phase 2: CP for long context; planner/ranking.py CP_SHORT_MARGIN"


def gbs_allowing(excluded: list[int], gbs: int) -> int:
    """The nearest larger GBS that allows the widest excluded DP (its next multiple, at MBS 1)."""
    widest = max(excluded)
    return (gbs + widest - 1) // widest * widest


def gbs_note(excluded: list[int], gbs: int) -> str:
    """Which data-parallel sizes the global batch ruled out, and the nearest larger GBS that allows the widest."""
    widest, allowing = max(excluded), gbs_allowing(excluded, gbs)
    return (f"GBS {gbs} is not a multiple of DP x MBS for DP {', '.join(map(str, excluded))}: those layouts were not "
            f"searched (the seeds maximize DP); GBS {allowing} would allow DP {widest}")


def _short(r: dict) -> str:
    """A saved row's layout as Layout.short() writes it: TP2 CP1 PP8v4 EP64 ETP1 (DP64 EDP2)."""
    return f"{layout_label(r)} (DP{r['layout']['dp']} EDP{r['layout']['edp']})"


def _speed(r: dict) -> float:
    return r["time"]["tokens_per_s_per_gpu"]


def _mbs(r: dict) -> int:
    return r["workload"]["micro_batch_size"]


def tight_note(rows: list[dict]) -> str | None:
    """The rows that leave under TIGHT_SHARE of the GPU free (plan_json's `tight`), and the --headroom that keeps it."""
    close = [str(rank) for rank, r in enumerate(rows, 1) if r.get("tight")]
    if not close:
        return None
    return (f"#{', #'.join(close)} leave{'s' if len(close) == 1 else ''} under {TIGHT_SHARE:.0%} of the GPU's memory "
            f"free, within the memory estimate's own error: pass --headroom "
            f"{headroom_for(rows[0]['memory']['capacity_bytes'])} to keep that margin")


def twin_note(rows: list[dict]) -> str | None:
    """The dispatchers folded into a row for predicting its step time too (plan_json's `same_prediction`,
    planner/twins.py), with the peak each needs: their buffers differ."""
    named = [(rank, t) for rank, r in enumerate(rows, 1) for t in r.get("same_prediction", [])]
    if not named:
        return None
    peaks = ", ".join(f"#{rank} {t['dispatcher']} {t['peak_bytes'] / 2**30:.1f} GiB" for rank, t in named)
    return f"a dispatcher in brackets, (=...), predicts its row's step time too, so the two take one row; its own " \
        f"peak: {peaks}"


def offload_note(pick: dict, alt: dict) -> str:
    """The optimizer-offload alternative to a full-recompute pick (search.offload_instead), with its numbers: the
    offload is added, not put in recompute's place, so the note says what the memory it frees buys."""
    host_bytes = alt["memory"]["host_peak_bytes"]
    host = f" and {host_bytes / 2**30:.0f} GiB of host memory a GPU" if host_bytes else ""
    return (f"#1 recomputes whole layers; offloading the optimizer to the CPU frees the memory for "
            f"{_offload_buys(pick, alt)}: it predicts {_speed(alt) / _speed(pick) - 1:+.0%}, {_speed(alt):,.0f} "
            f"tokens/s/GPU at {alt['memory']['peak_bytes'] / 2**30:.1f} GiB{host}. The seeds add offloading only after "
            "recompute, so it is not the pick; their own long-context DeepSeek-V3 pattern uses it: --fix "
            "optimizer_offload_fraction=1 searches it")


def _offload_buys(pick: dict, alt: dict) -> str:
    """What the offload alternative changes from the pick besides the offload: layout, micro-batch, recompute."""
    changes = [f"the layout {_short(alt)}"] if _short(alt) != _short(pick) else []
    if _mbs(alt) != _mbs(pick):
        changes.append(f"mbs {_mbs(alt)}")
    if alt["knobs"]["recompute"] != "full":
        lighter = "no recompute" if alt["knobs"]["recompute"] == "none" else f"recompute {recompute_label(alt)}"
        return ", ".join([*changes, f"{lighter} instead of full"])
    # the gain is from the layout (or other knobs) the freed memory allows: whole layers are still recomputed
    return f"{', '.join(changes) or 'other knobs on the layout and mbs of #1'}, still recomputing whole layers"


def short_cp_note(pick: dict, alt: dict) -> str:
    """The faster CP layout the ranking's short-context CP weight kept off the list (search._short_cp_alternative)."""
    return (f"{_short(alt)} (mbs {_mbs(alt)}) predicts {_speed(alt):,.0f} tokens/s/GPU, "
            f"{_speed(alt) / _speed(pick) - 1:+.1%} over #1, and fits, but below {LONG_CONTEXT // 1024}k tokens a "
            f"layout with CP > 1 ranks as {CP_SHORT_MARGIN - 1:.0%} slower (the seeds add CP for long context; within "
            f"the step model's own error); `--fix cp={alt['layout']['cp']}` lists it")


def order_note(rows: list[dict]) -> str | None:
    """Where a row predicts more than the one above it: within 1% the seeds' order ranks, not the last digits."""
    speeds = [_speed(r) for r in rows]
    if not any(a < b for a, b in zip(speeds, speeds[1:])):
        return None
    short_cp = any(r["layout"]["cp"] > 1 and r["workload"]["seq_length"] < LONG_CONTEXT for r in rows)
    cp = (f"; below {LONG_CONTEXT // 1024}k tokens a layout with CP > 1 ranks as {CP_SHORT_MARGIN - 1:.0%} slower "
          "than it predicts (the seeds add CP for long context)") if short_cp else ""
    return ("candidates within 1% of each other are ranked by the seeds' order, not by the last digits: 3% of memory "
            "free, less model parallelism, lighter recompute, no offload, the layout's default dispatcher, more DP, "
            "below 16k tokens less CP, then less TP, less expert TP, more EP" + cp)


def unsearched_text(m: dict) -> str:
    """A move the search leaves to the user (explain.unsearched_gains), after UNSEARCHED."""
    return (f"{m['rule']} predicts {m['predicted_gain']:+.1%} on #1 ({m['new_tokens_per_s_per_gpu']:,.0f} "
            f"tokens/s/GPU): {m['why']}; `explain --plan` lists it with its settings")


def shape_note(refusal: dict) -> str:
    """Why a BF16 pick where FP8/FP4 was searched: the GEMM shapes refused it (planner/shape_note.py), and the nearest
    sequence length (or the least micro-batch) at which they accept it on #1's layout."""
    p = refusal["precision"]
    allow = [f"--seq {refusal['seq_allowing']}"] * bool(refusal["seq_allowing"]) \
        + [f"--fix mbs={refusal['mbs_allowing']}"] * bool(refusal["mbs_allowing"])
    return (f"no {p} candidate runs at sequence {refusal['seq_length']:,}, so the pick runs bf16: the GEMM shapes "
            f"refuse every {p} candidate that fits in memory; on #1's layout, {refusal['refusal']}"
            + (f"; {' or '.join(allow)} lets {p} run there" if allow else ""))


def table_notes(data: dict) -> list[str]:
    """The notes plan prints under its table, in its order, from its JSON."""
    rows = saved_results(data)
    pick = rows[0]
    notes = [shape_note(data["shape_refusal"]) if data.get("shape_refusal") else None, tight_note(rows),
             twin_note(rows)]
    if alt := data.get("offload_alternative"):
        notes.append(offload_note(pick, alt))
    if alt := data.get("short_cp_alternative"):
        notes.append(short_cp_note(pick, alt))
    if tie := data.get("near_tie"):
        notes.append(tie["why"])
    return [n for n in [*notes, order_note(rows)] if n]


def saved_notes(data: dict) -> list[str]:
    """Every note above, as a saved plan holds them (report's page): the global batch's, the table's and the moves
    left out of the search, each as plan says it."""
    rows = saved_results(data)
    gbs = [gbs_note(data["gbs_excluded_dp"], rows[0]["workload"]["global_batch_size"])] \
        if data.get("gbs_excluded_dp") else []
    return gbs + table_notes(data) + [f"{UNSEARCHED}: {unsearched_text(m)}" for m in data.get("unsearched_moves", [])]
