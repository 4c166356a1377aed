"""What one candidate's benchmark measured: its training log (the newest in its folder), timed past the warm-up.

The step time is the median of the logged iterations after `skip` (the first ones hold compilation, CUDA-graph
capture and the allocator's growth); tokens/s/GPU is the global batch's tokens over that time and the world size, as
published_runs.csv counts them. A log that ran out of memory, logged no iteration yet, logged too few, ran another
global batch, sequence length or GPU count than planned (its argument dump, where Megatron-LM printed one), or cannot be
read is said so, not timed; what the log reader passed over (a relaunch, a first launch that failed) is in `notes`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from moetune.errors import MoetuneError
from moetune.profile.megatron_log import TrainingLog, int_or_none, parse_log
from moetune.sweep.submit import LOG_PREFIX

MEASURED = "measured"


@dataclass(kw_only=True, slots=True)
class Measured:
    # MEASURED, or why not: "out of memory", "no folder", "no log", "no iteration", "unreadable log", "too short",
    # "other run" (another global batch, sequence length or world size than planned)
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


def measure(folder: Path, workload: dict, world: int, skip: int) -> Measured:
    """The candidate in FOLDER, planned at WORKLOAD (a result's "workload") on WORLD GPUs."""
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
    return _timed(found, log, workload, world, skip)


def _other_run(log: TrainingLog, gbs: int, seq: int, world: int) -> str | None:
    """What the log ran that the plan did not: its global batch (every iteration line), sequence length and world
    size (Megatron-LM's argument dump; Bridge prints none)."""
    logged = next((it.global_batch_size for it in reversed(log.iterations) if it.global_batch_size), None)
    ran = {"global batch": (logged, gbs), "sequence length": (int_or_none(log.args.get("seq_length")), seq),
           "GPUs": (int_or_none(log.args.get("world_size")), world)}
    off = [f"{name} {got} (planned {planned})" for name, (got, planned) in ran.items()
           if got is not None and got != planned]
    return "ran " + ", ".join(off) if off else None


def _timed(found: Measured, log: TrainingLog, workload: dict, world: int, skip: int) -> Measured:
    gbs, seq = int(workload["global_batch_size"]), int(workload["seq_length"])
    # a line averages the iterations since the line before it (log_interval): timed where all of them are past SKIP
    starts = [0, *(it.iteration for it in log.iterations)][:len(log.iterations)]
    timed = [it for it, start in zip(log.iterations, starts, strict=True)
             if start >= skip and it.elapsed_ms is not None]
    if other := _other_run(log, gbs, seq, world):  # first: another run's memory or time says nothing of the plan's
        found.status, found.detail, found.peak_reserved_bytes = "other run", found.detail + other, None
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
    else:
        seconds = [it.elapsed_ms / 1000 for it in timed]
        found.status, found.timed, found.spread = MEASURED, len(timed), _spread(seconds)
        found.step_seconds = statistics.median(seconds)
        found.tokens_per_s_per_gpu = gbs * seq / found.step_seconds / world
        flops = [it.tflops_per_gpu for it in timed if it.tflops_per_gpu is not None]
        found.tflops_per_gpu = statistics.median(flops) if flops else None
        found.detail += f"iterations {timed[0].iteration}-{timed[-1].iteration}"
    return found
