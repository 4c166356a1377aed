"""What a sweep's measurements say, in lines for the terminal and the report: each false fit with the --headroom
that leaves it out, what the log reader passed over, the measured order against the predicted one, and the candidate
to run (only one measured apart from the pick, with `emit --rank` while the plan file still holds its result)."""

from moetune.sweep.compare import Row, apart, fastest, pairs, plan_unchanged
from moetune.sweep.manifest import Sweep
from moetune.units import GIB


def conclusions(sweep: Sweep, found: list[Row]) -> list[str]:
    """What the measurements say, in lines: each false fit with the --headroom that leaves it out, what the log reader
    passed over, the measured order against the predicted one and the candidate to run."""
    lines = []
    for r in found:
        if r.false_fit:
            mem = r.candidate.result["memory"]
            free = (mem["capacity_bytes"] - mem["peak_bytes"]) / GIB
            lines.append(f"false fit: {r.candidate.folder} ran out of memory where moetune predicted "
                         f"{mem['peak_bytes'] / GIB:.1f} of {mem['capacity_bytes'] / GIB:.1f} GiB; plan again with "
                         f"--headroom above {free:.1f} GiB to leave it out")
        lines += [f"{r.candidate.folder}: {note}" for note in r.measured.notes]
    return lines + _order_lines(found, sweep)


def _order_lines(found: list[Row], sweep: Sweep) -> list[str]:
    found_pairs, best = pairs(found), fastest(found)
    if best is None:
        return []
    counted = [p for p in found_pairs if not p.level]
    wrong = [f"{p.faster.candidate.folder} > {p.slower.candidate.folder} (measured {p.measured_gap:+.1%}, predicted "
             f"{-p.predicted_gap:.1%} the other way)" for p in counted if not p.agrees]
    level = len(found_pairs) - len(counted)
    judged = (f"{len(counted) - len(wrong)}/{len(counted)} pairs as predicted" if counted else "no pair to judge")
    lines = [f"measured order: {judged} (pairs measured apart by more than 2% and their own iteration spread)"
             + (f"; the other way: {', '.join(wrong)}" if wrong else "")
             + (f"; {level} pair(s) predicted within 1%, which plan ranks by the seeds' order" if level else "")]
    pick = next((r for r in found if r.candidate.rank == 1), None)
    if best.candidate.rank == 1:
        lines.append("the pick (r01) measured fastest" + _stopped(best))
    elif pick is not None and pick.measured.ok and not apart(best, pick):
        lines.append(f"the pick (r01) and {best.candidate.folder} measured within the noise of each other: keep the "
                     "pick")
    elif pick is not None and pick.measured.ok:
        gain = best.measured.tokens_per_s_per_gpu / pick.measured.tokens_per_s_per_gpu - 1
        lines.append(f"{best.candidate.folder} measured fastest, {gain:+.1%} over the pick: " + _run_it(sweep, best)
                     + _stopped(best))
    else:
        tied = [r.candidate.folder for r in found if r is not best and r.measured.ok and not apart(best, r)]
        lines.append(f"{best.candidate.folder} measured fastest of those timed (the pick was not)"
                     + (f", within the noise of {', '.join(tied)}" if tied else "") + _stopped(best))
    return lines


def _stopped(best: Row) -> str:
    """A caveat where the measured fastest stopped with an error after its timed iterations: its speed was measured,
    but a full run of it may stop the same way."""
    if best.measured.stopped is None:
        return ""
    return (f"; but its job stopped with an error after the timed iterations ({best.measured.stopped}): find why, and "
            "run it again, before a full run")


def _run_it(sweep: Sweep, best: Row) -> str:
    """How to launch the measured fastest for a full run: emit of its plan result, where the plan file still holds
    it; else plan again (the folder's files are set to the benchmark's length)."""
    rank = best.candidate.rank
    if best.candidate.result["knobs"].get("routing") == "force-balance":  # emit refuses it without --benchmark
        return ("it ran force-balanced routing (random router logits, a benchmark setting): for a training run, plan "
                "again with --routing dropless and its layout pinned (--fix)")
    if plan_unchanged(sweep, rank):
        return f"run it with `moetune emit {sweep.plan} --rank {rank}`"
    return (f"{sweep.plan} no longer holds the result it ran (planned again, moved or deleted): plan again, or run "
            f"{best.candidate.folder}'s files with a full run's train_iters")
