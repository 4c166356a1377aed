"""What a training log's figures rest on, said in its notes (profile/megatron_log.py parse_log): a batch that ramps
up, one timed interval alone, a loss that is not finite."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # megatron_log builds the log and imports these notes: the types only, no cycle at run time
    from moetune.profile.megatron_log import LogIteration, TrainingLog


def timing_notes(log: TrainingLog, path: str) -> TrainingLog:
    """log with what its figures rest on said in its notes: a batch that ramps up (the figures time the last size), one
    timed interval only (warm-up included), iterations whose loss is not finite."""
    timed = [it for it in log.iterations if it.elapsed_ms is not None]
    sizes = list(dict.fromkeys(it.global_batch_size for it in timed if it.global_batch_size))
    if len(sizes) > 1:
        log.notes.append(f"--log {path}: the global batch changes ({' -> '.join(map(str, sizes))}): the figures time "
                         f"the {len(log.steady_iterations())} iteration(s) at {log.final_batch} only")
    if log.timed_once:
        log.notes.append(f"--log {path} times one iteration ({timed[0].iteration}), which includes warm-up and "
                         "compilation: its figures read slow; log more iterations (--log-interval 1, --train-iters)")
    log.notes += _unsteady(log, path)
    if bad := [it.iteration for it in log.iterations if _not_finite_loss(it)]:
        log.notes.append(f"--log {path}: the loss is not finite at {len(bad)} logged iteration(s) (first {bad[0]}): "
                         "the run diverged or skipped steps, and its times may not be a healthy step's")
    return log


def _not_finite_loss(it: LogIteration) -> bool:
    """An iteration line whose 'lm loss' is nan/inf, or that counts NaN iterations (Megatron's training_log)."""
    loss, nans = it.fields.get("lm loss"), it.fields.get("number of nan iterations")
    return (isinstance(loss, str) and loss.lower().lstrip("+-") in ("nan", "inf")) or \
        (isinstance(loss, float) and not math.isfinite(loss)) or (isinstance(nans, float) and nans > 0)


# A step whose time drifts or stalls is not one steady step: the median the figures take then reads it faster than its
# mean. Past these the notes say so: the later half's median DRIFT x the earlier's (a slowing run: thermal throttling,
# a straggler node, memory fragmentation, a growing data-loader lag), or iterations past STALL x the median that lift
# the mean MEAN_OVER x the median (periodic stalls: Python's garbage collector, which --manual-gc times, checkpoint
# saves, data loading); a tenth of the iterations had been the bar, which a 4x stall every 15th (the mean 18% up) missed
DRIFT, STALL, MEAN_OVER, LEAST_TIMED = 1.10, 1.25, 1.05, 6


def _unsteady(log: TrainingLog, path: str) -> list[str]:
    """Notes where the steady iterations' time drifts or stalls (DRIFT, STALL), with the mean they then read at."""
    times = [it.elapsed_ms / 1000 for it in log.steady_iterations()]
    if len(times) < LEAST_TIMED:
        return []
    median, mean = statistics.median(times), statistics.fmean(times)
    early, late = statistics.median(times[:len(times) // 2]), statistics.median(times[len(times) // 2:])
    out = []
    if late > early * DRIFT:
        out.append(f"--log {path}: the step slows over the run, {early:.3f} s (median, first half) to {late:.3f} s "
                   f"(second half): a throttled GPU, a straggler node, fragmentation or a data-loader lag; the figures "
                   f"take the median, {median:.3f} s, where the mean is {mean:.3f} s")
    slow = [t for t in times if t > median * STALL]
    if slow and mean > median * MEAN_OVER and not out:
        gc = " (this run's --manual-gc is off)" if log.args.get("manual_gc") == "False" else ""
        out.append(f"--log {path}: {len(slow)} of {len(times)} iterations stall past {STALL:.2f}x the median "
                   f"(up to {max(slow):.3f} s): periodic stalls such as Python's garbage collector{gc}, checkpoint "
                   f"saves or data loading; the figures take the median, {median:.3f} s, where the mean is "
                   f"{mean:.3f} s")
    return out
