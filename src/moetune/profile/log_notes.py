"""What a training log's figures rest on, said in its notes (profile/megatron_log.py parse_log): a batch that ramps
up, one timed interval alone, a loss that is not finite."""

from __future__ import annotations

import math
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
    if bad := [it.iteration for it in log.iterations if _not_finite_loss(it)]:
        log.notes.append(f"--log {path}: the loss is not finite at {len(bad)} logged iteration(s) (first {bad[0]}): "
                         "the run diverged or skipped steps, and its times may not be a healthy step's")
    return log


def _not_finite_loss(it: LogIteration) -> bool:
    """An iteration line whose 'lm loss' is nan/inf, or that counts NaN iterations (Megatron's training_log)."""
    loss, nans = it.fields.get("lm loss"), it.fields.get("number of nan iterations")
    return (isinstance(loss, str) and loss.lower().lstrip("+-") in ("nan", "inf")) or \
        (isinstance(loss, float) and not math.isfinite(loss)) or (isinstance(nans, float) and nans > 0)
