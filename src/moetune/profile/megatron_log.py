"""Read Megatron-LM / Megatron Bridge training logs: iteration time, TFLOP/s/GPU, memory reports.

Formats mirrored (each a `` | ``-separated list of ``key: value`` pairs):
- iteration lines, Megatron-LM megatron/training/training.py ``training_log`` and Megatron Bridge
  src/megatron/bridge/training/utils/train_utils.py ``training_log``:
  `` [2025-..] iteration      100/    1000 | consumed samples: ... | elapsed time per iteration (ms):
  41250.3 | throughput per GPU (TFLOP/s/GPU): 244.0 | ... | global batch size:  1024 | ...``
- memory reports, Megatron-LM's ``memory (MB)`` and Megatron Bridge's ``memory (GB)`` (profile/log_memory.py).
- the argument dump Megatron-LM prints at start-up (``  seq_length ........ 4096``), for
  seq_length / world_size / micro_batch_size.
- CUDA OOM messages from PyTorch (``torch.OutOfMemoryError: CUDA out of memory``), and the GPU's total memory one
  states (log_stops.stated_capacity).
- lines printed once per launch (profile/log_runs.py STARTUP), which tell a job restarted from a checkpoint from one
  run.

Which rank prints what (Megatron-LM megatron/training @ core_v0.18.2; Megatron Bridge training/ @067f987 alike): the
iteration lines come from the last rank (training.py training_log, print_rank_last), the start-up lines and the
argument dump from rank 0 (arguments.py validate_args and _print_args, initialize.py, training.py pretrain:
print_rank_0 / is_rank0), the memory reports from every rank whose data-parallel rank is 0 (utils/common_utils.py
report_memory; the last rank's is DP - 1, so it prints them only at DP 1), an OOM from the rank that ran out. So the log
to read is the job's whole stdout (every rank's, as srun gathers it; torchrun gathers one node's); one without rank 0's
lines is flagged (TrainingLog.rank0_lines).
"""

import gzip
import math
import re
import statistics
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from moetune.errors import MoetuneError
from moetune.layout.validate import tokens_per_gpu
from moetune.profile.log_memory import MEM, MemoryReport, memory_report, pairs
from moetune.profile.log_nodes import joined_nodes
from moetune.profile.log_notes import timing_notes
from moetune.profile.log_runs import (
    STARTUP,
    is_iteration,
    last_run,
    miscount,
    miscount_note,
    run_notes,
    stray_note,
    strays,
)
from moetune.profile.log_stops import FAILURE, HANG, OOM, RANK_PREFIX, hang_words, stated_capacity

_ARG = re.compile(r"(?:^|\s)([a-z_][a-z0-9_]*) \.{2,} (\S.*?)\s*$")  # "  name ..... value"
# Iteration fields moetune reads: a value that is not a number is an error, not a silent gap
_NUMERIC = _ELAPSED, _TFLOPS, _GBS = ("elapsed time per iteration (ms)", "throughput per GPU (TFLOP/s/GPU)",
                                      "global batch size")


@dataclass(kw_only=True, slots=True)
class LogIteration:
    iteration: int
    elapsed_ms: float | None
    tflops_per_gpu: float | None
    global_batch_size: int | None
    fields: dict[str, float | str]


@dataclass(kw_only=True, slots=True)
class TrainingLog:
    path: str
    iterations: list[LogIteration]
    memory: list[MemoryReport]
    args: dict[str, str] = field(default_factory=dict)
    oom_lines: list[str] = field(default_factory=list)
    failure_lines: list[str] = field(default_factory=list)  # how a crash said so (FAILURE), after its last iteration
    # Megatron-LM's rank 0 prints its arguments at start-up (training/arguments.py _print_args); Bridge prints none
    argument_dump: bool = False
    # any line rank 0 prints at start-up (log_runs.STARTUP, the argument dump): without one, the log is the last rank's
    # stdout alone (or was cut after start-up), so a relaunch shows only where iteration numbers go back
    rank0_lines: bool = True
    notes: list[str] = field(default_factory=list)  # what a reader of the figures should know: runs passed over
    # the GPU's total memory as an OOM message states it (log_stops.stated_capacity), and the line (from 1) that does
    oom_capacity_bytes: float | None = None
    oom_capacity_line: int | None = None

    def steady_iterations(self) -> list[LogIteration]:
        """Logged intervals after the first (it includes warm-up and compilation), at the last global batch size
        logged: where the batch ramps up (Megatron-LM's --rampup-batch-size) an earlier size times another step."""
        timed = [it for it in self.iterations if it.elapsed_ms is not None]
        steady = timed[1:] if len(timed) > 1 else timed
        final = self.final_batch
        return [it for it in steady if it.global_batch_size in (None, final)]

    @property
    def stop_cause(self) -> str | None:
        """The line that says why the run stopped after its last iteration: a collective's timeout (HANG) where one
        was printed, the root of the aborts after it, else the last failure line; None where it did not stop."""
        return next((x for x in self.failure_lines if HANG.search(x)), None) or \
            (self.failure_lines[-1] if self.failure_lines else None)

    @property
    def hung(self) -> bool:
        return any(HANG.search(x) for x in self.failure_lines)

    @property
    def timed_once(self) -> bool:
        """Whether the log times one interval alone: the first, warm-up and compilation included."""
        return sum(it.elapsed_ms is not None for it in self.iterations) == 1

    @property
    def final_batch(self) -> int | None:
        """The global batch size of the last iteration that logged one (tokens_per_second_per_gpu's)."""
        return next((it.global_batch_size for it in reversed(self.iterations) if it.global_batch_size), None)

    @property
    def iteration_seconds(self) -> float | None:
        values = [it.elapsed_ms / 1000 for it in self.steady_iterations()]
        return statistics.median(values) if values else None

    @property
    def tflops_per_gpu(self) -> float | None:
        values = [it.tflops_per_gpu for it in self.steady_iterations() if it.tflops_per_gpu is not None]
        return statistics.median(values) if values else None

    @property
    def tokens_per_second_per_gpu(self) -> float | None:
        """global batch x seq_length / iteration time / world size (needs the argument dump)."""
        seq, world = int_or_none(self.args.get("seq_length")), int_or_none(self.args.get("world_size"))
        t, gbs = self.iteration_seconds, self.final_batch
        if not (seq and world and t and gbs):
            return None
        return tokens_per_gpu(gbs, seq, t, world)

    @property
    def peak_reserved_bytes(self) -> float | None:
        values = [m.max_reserved_bytes for m in self.memory if m.max_reserved_bytes is not None]
        return max(values) if values else None

    @property
    def alloc_retries(self) -> int:
        return max((m.alloc_retries or 0 for m in self.memory), default=0)


def int_or_none(text: str | None) -> int | None:
    """A whole number from a log's text (an argument dump's value), None where it is not one."""
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _iteration(m: re.Match) -> LogIteration:
    f = pairs(m.group(3))

    def num(key: str) -> float | None:
        v = f.get(key)
        return float(v) if isinstance(v, float) else None

    gbs = num(_GBS)
    return LogIteration(
        iteration=int(m.group(1)), elapsed_ms=num(_ELAPSED), tflops_per_gpu=num(_TFLOPS),
        global_batch_size=int(gbs) if gbs is not None and 0 < gbs < 1e12 else None, fields=f,
    )


def _numeric(it: LogIteration, where: str) -> LogIteration:
    bad = next((k for k in _NUMERIC if isinstance(it.fields.get(k), str)), None)
    if bad:
        raise MoetuneError(f"{where}: {bad} {it.fields[bad]!r} is not a number; pass the log as Megatron wrote it")
    bad = next((k for k in _NUMERIC if isinstance(v := it.fields.get(k), float) and not 0 < v < math.inf), None)
    if bad:
        raise MoetuneError(f"{where}: {bad} ({it.fields[bad]:g}) must be a positive, finite number; pass the log as "
                           "Megatron wrote it")
    return it


def parse_log(text: str, path: str = "<log>") -> TrainingLog:
    """The log's last run (log_runs.last_run): its iterations, memory reports, OOM messages and argument dump; an
    iteration logged twice in a row (two ranks' output in one file) counts once, one out of sequence (log_runs.strays)
    or whose count does not read (log_runs.miscount) not at all. What was passed over is said in log.notes. A log that
    is rank 0's node's log followed by another node's (log_nodes.joined_nodes) is read at its latest launch's lines."""
    lines = text.splitlines()
    if (joined := joined_nodes(lines)) is None:
        return _parse(lines, path)
    log = _parse([line if keep else "" for line, keep in zip(lines, joined.kept(len(lines)))], path)
    log.notes[:0] = joined.notes(path, lines, log.iterations[0].iteration if log.iterations else None)
    if log.oom_capacity_bytes is None:  # a launch passed over ran on the job's GPUs too (log_stops.stated_capacity)
        log.oom_capacity_line, log.oom_capacity_bytes = stated_capacity(lines, 0, None)
    return log


def _parse(lines: list[str], path: str) -> TrainingLog:
    """parse_log's reading of the log's lines (blank where they are not the figures' launch's)."""
    passed = strays(lines)
    start, runs, failed = last_run(lines, passed)
    log, repeats, unread, miscounted = TrainingLog(path=path, iterations=[], memory=[]), [], [], []
    for n, line in enumerate(lines[start:failed], start + 1):
        if n - 1 in passed:
            continue
        if m := is_iteration(line):
            try:
                it = _numeric(_iteration(m), f"--log {path} line {n}")
            except MoetuneError as err:  # one line garbled (two ranks' output interleaved) spoils only itself
                unread.append(err)
                continue
            if log.iterations and it.iteration == log.iterations[-1].iteration:
                repeats.append(n)
            else:
                log.iterations.append(it)
                log.failure_lines.clear()  # an error the run went on past is no stop: only those after the last
        elif (count := miscount(line)) is not None:
            miscounted.append((n, count))
        elif m := MEM.search(line):
            log.memory.append(memory_report(m, f"--log {path} line {n}"))
        elif OOM.search(line):
            log.oom_lines.append(line.strip()[:200])
            if log.iterations:  # after an iteration: the run stopped on it (the note says so, beside the OOM)
                log.failure_lines.append(line.strip()[:200])
        elif FAILURE.search(RANK_PREFIX.sub("", line.strip())) and log.iterations:
            log.failure_lines.append(hang_words(line) or line.strip()[:200])
        elif m := _ARG.search(line):
            log.args.setdefault(m.group(1), m.group(2))
            log.argument_dump = True
    log.rank0_lines = log.argument_dump or any(STARTUP.search(x) for x in lines)
    log.oom_capacity_line, log.oom_capacity_bytes = stated_capacity(lines, start, failed)
    log.notes += run_notes(path, lines, start, runs, failed, log.iterations[0].iteration if log.iterations else None)
    if (unread or miscounted) and not log.iterations:  # nothing else to read the run by
        raise unread[0] if unread else MoetuneError(miscount_note(path, miscounted, alone=True))
    if unread:
        log.notes.append(f"--log {path}: {len(unread)} iteration line(s) passed over, a value not a number (first: "
                         f"{unread[0]}; another rank's output written into the line?)")
    if skipped := sorted((s for i, s in passed.items() if i >= start), key=lambda s: s.line):  # earlier runs' unsaid
        log.notes.append(stray_note(path, skipped))
    if miscounted:
        log.notes.append(miscount_note(path, miscounted))
    if repeats:
        log.notes.append(f"--log {path} logs {len(repeats)} iteration(s) twice in a row (first at line {repeats[0]}; "
                         "two ranks' output in one file?): each is counted once")
    return timing_notes(log, path)


def read_log(path: str | Path) -> TrainingLog:
    path = Path(path)
    if not path.exists():
        raise MoetuneError(f"--log {path}: no such file; pass a Megatron-LM / Megatron Bridge training log")
    if not path.is_file():
        raise MoetuneError(f"--log {path}: not a regular file; pass a Megatron-LM / Megatron Bridge training log")
    text = _log_text(path)
    if not text.strip():
        raise MoetuneError(f"--log {path}: is empty; pass the job's stdout (the last rank prints the iteration lines)")
    log = parse_log(text, str(path))
    if not log.iterations and (hang := next((hang_words(x) for x in text.splitlines() if HANG.search(x)), None)):
        raise MoetuneError(f"--log {path}: the job hung before its first iteration ({hang}): a rank stalled or died "
                           "at start-up; find the first rank that failed in its own output")
    if not (log.iterations or log.memory or log.oom_lines):
        raise MoetuneError(
            f"--log {path}: no Megatron iteration lines ('iteration N/M | ... elapsed time per iteration (ms)'), "
            "memory reports or OOM messages found; pass the job's stdout (the last rank prints the iteration lines)"
        )
    return log


def _log_text(path: Path) -> str:
    """The log's text; a .gz log (a gzipped copy of the job's stdout) decompressed, one line where it is not gzip."""
    if not path.name.endswith(".gz"):
        return path.read_text(errors="replace")
    try:
        with gzip.open(path, "rt", errors="replace") as fh:
            return fh.read()
    except (OSError, EOFError, zlib.error) as err:
        raise MoetuneError(f"--log {path}: named .gz but not a readable gzip file ({err.__class__.__name__}); "
                           "pass the log as written, or gunzip a whole copy") from None
