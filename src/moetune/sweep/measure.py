"""What one candidate's benchmark measured: its training log (the newest in its folder), timed past the warm-up.

The step time is the median of the logged iterations after `skip` (the first ones hold compilation, CUDA-graph
capture and the allocator's growth); tokens/s/GPU is the global batch's tokens over that time and the world size, as
published_runs.csv counts them. A log that ran out of memory, logged no iteration yet, logged too few, ran another
job than planned (its global batch; where Megatron-LM dumped its arguments, the sequence length, GPUs, layout,
micro-batch or model shape: planner/compare.py log_differences), or cannot be read is said so, not timed; what the
log reader passed over (a relaunch, a first launch that failed) is in `notes`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from moetune.errors import MoetuneError
from moetune.layout.validate import tokens_per_gpu
from moetune.planner.compare import log_differences
from moetune.profile.megatron_log import TrainingLog, int_or_none, parse_log
from moetune.sweep.submit import LOG_PREFIX

MEASURED = "measured"


@dataclass(kw_only=True, slots=True)
class Measured:
    # MEASURED, or why not: "out of memory", "no folder", "no log", "no iteration", "unreadable log", "too short",
    # "failed" (too short, and the log says why it stopped), "other run" (another job than planned: log_differences)
    status: str
    detail: str = ""  # the reason in words, for the table
    log: str | None = None
    step_seconds: float | None = None
    tokens_per_s_per_gpu: float | None = None
    tflops_per_gpu: float | None = None  # as the log printed it (Megatron's own count), where it did
    spread: float = 0.0  # half the interquartile range of the timed iterations, over their median
    timed: int = 0  # iterations in the median
    peak_reserved_bytes: float | None = None  # the largest `max reserved` any rank reported
    notes: list[str] = field(default_factory=list)  # the log reader's: runs passed over in the file
    stopped: str | None = None  # measured, then stopped with an error: the log's last error line

    @property
    def ok(self) -> bool:
        return self.status == MEASURED


def _job_id(path: Path) -> int:
    """The Slurm job id in a log's name (train-<id>.log, slurm-<id>.out), -1 where it holds none."""
    digits = path.stem.rpartition("-")[2]
    return int(digits) if digits.isdigit() else -1


def find_log(folder: Path) -> tuple[Path | None, int]:
    """(the newest log in FOLDER, how many there are): submit.sh's train-<job id>.log, else Slurm's default
    slurm-<job id>.out (a job submitted by hand); the newest is the last attempt, by job id (Slurm numbers jobs in
    submission order; a copy may not keep the files' times), then by time."""
    logs = [p for p in (*folder.glob(f"{LOG_PREFIX}*.log"), *folder.glob("slurm-*.out")) if p.is_file()]
    return (max(logs, key=lambda p: (_job_id(p), p.stat().st_mtime)) if logs else None), len(logs)


def _spread(values: list[float]) -> float:
    if len(values) < 4:
        return 0.0
    q1, _, q3 = statistics.quantiles(values, n=4)
    return (q3 - q1) / 2 / statistics.median(values)


def measure(folder: Path, planned, skip: int) -> Measured:
    """The candidate in FOLDER, as PLANNED (its saved result's estimate: planner/estimate.py Estimate)."""
    if not folder.is_dir():
        return Measured(status="no folder", detail=f"{folder} is missing: write the sweep again, or restore it")
    path, count = find_log(folder)
    if path is None:
        return Measured(status="no log", detail=f"no {LOG_PREFIX}*.log or slurm-*.out in {folder}: not run yet")
    try:
        log = parse_log(path.read_text(errors="replace"), str(path))
    except MoetuneError as err:  # one bad file is that candidate's, not the sweep's
        return Measured(status="unreadable log", log=str(path), detail=str(err).removeprefix("--log "))
    found = Measured(status="", log=str(path), peak_reserved_bytes=log.peak_reserved_bytes,
                     notes=[n.removeprefix("--log ") for n in log.notes])
    if count > 1:
        found.detail = f"the newest of {count} logs; "
    return _timed(found, log, planned, skip)


def _run_start(log: TrainingLog) -> int:
    """The iteration the run started after: the first line's, less the iterations it averages (log_interval: the gap
    to the next line, or the argument dump's where one line is all; 1 where neither says)."""
    if not log.iterations:
        return 0
    first = log.iterations[0].iteration
    interval = (log.iterations[1].iteration - first if len(log.iterations) > 1
                else int_or_none(log.args.get("log_interval")) or 1)
    return max(first - interval, 0)


def _timed(found: Measured, log: TrainingLog, planned, skip: int) -> Measured:
    wl, world = planned.workload, planned.layout.world_size
    gbs, seq = wl.gbs(planned.layout), wl.seq_length
    # a line averages the iterations since the line before it (log_interval): timed where all of them are past SKIP,
    # counted from where the run started (a run resumed from a checkpoint logs iteration 1001 first)
    starts = [_run_start(log), *(it.iteration for it in log.iterations)][:len(log.iterations)]
    timed = [it for it, start in zip(log.iterations, starts, strict=True)
             if start - starts[0] >= skip and it.elapsed_ms is not None]
    if other := log_differences(planned, log):  # first: another run's memory or time says nothing of the plan's
        found.status, found.peak_reserved_bytes = "other run", None
        found.detail += "ran " + ", ".join(other)
    elif log.oom_lines:
        found.status, found.detail = "out of memory", found.detail + log.oom_lines[0]
    elif not log.iterations:
        found.status = "no iteration"
        # rank 0's start-up lines or a memory report: Megatron began (megatron_log.py TrainingLog.rank0_lines)
        found.detail += ("started, no iteration logged yet (or it failed before the first)"
                         if log.rank0_lines or log.memory else "no Megatron line in it: still queued, or not a log")
    elif not timed:
        found.status = "too short"
        found.detail += (f"logged to iteration {log.iterations[-1].iteration}; the timing starts after {skip}, and a "
                         "line averages the iterations since the one before it (log_interval)")
        if log.failure_lines:  # it stopped, and said why: the job failed, not ran short
            found.status, found.detail = "failed", found.detail + f"; it stopped there: {log.stop_cause}"
    else:
        seconds = [it.elapsed_ms / 1000 for it in timed]
        found.status, found.timed, found.spread = MEASURED, len(timed), _spread(seconds)
        found.step_seconds = statistics.median(seconds)
        found.tokens_per_s_per_gpu = tokens_per_gpu(gbs, seq, found.step_seconds, world)
        flops = [it.tflops_per_gpu for it in timed if it.tflops_per_gpu is not None]
        found.tflops_per_gpu = statistics.median(flops) if flops else None
        found.detail += f"iterations {timed[0].iteration}-{timed[-1].iteration}"
        if log.failure_lines:  # timed before it stopped: the figures stand, the crash is said
            found.notes.append(f"it stopped after iteration {log.iterations[-1].iteration}: {log.stop_cause}")
            found.stopped = log.failure_lines[-1]
    return found
