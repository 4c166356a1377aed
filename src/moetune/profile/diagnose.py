"""``diagnose``: traces and/or a training log in, the dominant wall and the next changes out.

Top-level figures are per training iteration (seconds), averaged over each rank's steady steps and
then over ranks; ``per_rank`` keeps every rank's own figures and ``imbalance`` their spread.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moetune.errors import MoetuneError
from moetune.profile.device import gpu_notes
from moetune.profile.megatron_log import TrainingLog, read_log
from moetune.profile.metrics import RankMetrics, StepMetrics, comm_floor, mean_steps, rank_metrics
from moetune.profile.rank_trace import RankTrace
from moetune.profile.reader import read_trace
from moetune.profile.remedies import Recommendation, recommend
from moetune.profile.trace_json import expand_paths
from moetune.profile.walls import Measurement, decide, evidence, facts, imbalance
from moetune.specs.hardware import GpuSpec


@dataclass(kw_only=True, slots=True)
class DiagnoseResult:
    ranks: int
    world_size: int | None
    step_seconds: float | None
    breakdown: dict[str, float]
    idle: dict[str, float]
    exposed_communication_seconds: float | None
    dominant_wall: str
    wall_reason: str
    evidence: list[str]
    recommendations: list[Recommendation]
    per_rank: list[dict[str, Any]] = field(default_factory=list)
    imbalance: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    log: dict[str, Any] | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__slots__ if k != "recommendations"}
        out["recommendations"] = [r.to_dict() for r in self.recommendations]
        return out

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str)


def _same_run(traces: list[RankTrace]) -> None:
    """Traces of one run agree on the world size and the GPU and were recorded at the same time; the first that does
    not is one error line (what differs in the traces themselves before when they were recorded)."""
    for field_name, what in (("world_size", "world size"), ("device_name", "GPU")):
        first = next((t for t in traces if getattr(t, field_name) is not None), None)
        if first is None:
            continue
        other = next((t for t in traces if getattr(t, field_name) not in (None, getattr(first, field_name))), None)
        if other is not None:
            raise MoetuneError(f"traces {first.path} and {other.path} record different {what}s "
                               f"({getattr(first, field_name)} vs {getattr(other, field_name)}); "
                               "pass the traces of one run")
    _same_time(traces)


def _same_time(traces: list[RankTrace]) -> None:
    """Ranks of one run profile the same iterations, so traces on the wall clock overlap in time."""
    timed = [t for t in traces if t.epoch_span is not None]
    for t in timed[1:]:
        (a0, a1), (b0, b1) = timed[0].epoch_span, t.epoch_span
        if b0 > a1 or a0 > b1:
            gap = max(b0 - a1, a0 - b1) * 1e-6
            raise MoetuneError(f"traces {timed[0].path} and {t.path} were recorded {gap:,.0f} s apart and never "
                               "overlap; pass the traces of one profiling window of one run")


def _whole(text: str, what: str) -> int:
    """A positive whole number from a log's text, or one error line naming it."""
    if not (text.isascii() and text.isdigit() and len(text) <= 9 and int(text) > 0):
        raise MoetuneError(f"{what} is {text[:40]!r}, not a GPU count; pass the log Megatron wrote")
    return int(text)


def _same_world(traces: list[RankTrace], log: TrainingLog | None, config: dict[str, Any]) -> int | None:
    """The run's world size where traces, log and --gpus say it; two that disagree are one error line."""
    said = [(t.world_size, f"trace {t.path}") for t in traces if t.world_size is not None][:1]
    if log is not None and log.args.get("world_size") not in (None, ""):
        said.append((_whole(log.args["world_size"], f"--log {log.path}: its argument dump's world_size"),
                     f"log {log.path}"))
    if config.get("cluster.num_gpus") is not None:
        said.append((int(config["cluster.num_gpus"]), "--gpus/the config"))
    for world, where in said[1:]:
        if world != said[0][0]:
            raise MoetuneError(f"{said[0][1]} says world size {said[0][0]} but {where} says {world}; pass the "
                               "inputs of one run")
    return said[0][0] if said else None


# The config's names for what a log's argument dump may lack (tokens/s/GPU needs seq_length and world_size)
_LOG_ARGS = {"seq_length": "model.seq_length", "world_size": "cluster.num_gpus"}
# A log's iteration time this far from the traces' step (either way) is worth a note: profiling slows a step a
# little, another run or another configuration moves it far more; past LOG_TRACE_MISMATCH they are not one run's
# (the same 3x at which a prediction first asks "same run?", planner/compare.py)
LOG_TRACE_RATIO = 1.5
LOG_TRACE_MISMATCH = 3.0


# PyTorch's OOM message states the device's whole memory (79.11 GiB on an 80 GB H100) and the catalog the part a
# job can use (78 GiB); past this apart the two are not one GPU model, or the device is partitioned (MIG)
CAPACITY_APART = 1.05


def _capacity_note(log: TrainingLog | None, m: Measurement) -> list[str]:
    """Where the log's OOM message states a capacity far from the one diagnosed against (--gpu's or a trace's)."""
    if log is None or not log.oom_capacity_bytes or not m.gpu_memory_bytes or m.capacity_source:
        return []
    stated, used = log.oom_capacity_bytes, m.gpu_memory_bytes
    if max(stated, used) <= CAPACITY_APART * min(stated, used):
        return []
    return [f"--log {log.path}: its OOM message (line {log.oom_capacity_line}) states {stated / 2**30:.1f} GiB of "
            f"GPU memory where the memory figures are read against {used / 2**30:.1f} GiB: the run was on another GPU "
            "than the one given, or a partitioned one (MIG); pass --gpu for the GPU it ran on"]


def _fill_args(log: TrainingLog, config: dict[str, Any]) -> None:
    """The config's seq_length and GPU count where the log's argument dump is silent (Megatron Bridge logs print
    none)."""
    for arg, key in _LOG_ARGS.items():
        if arg not in log.args and config.get(key) is not None:
            log.args[arg] = str(config[key])


def _stopped_note(log: TrainingLog) -> list[str]:
    """A run that stopped with an error after its last iteration line (TrainingLog.failure_lines): its figures are
    what ran before, and the job failed (sweep/measure.py says the same of a candidate)."""
    if not (log.failure_lines and log.iterations):
        return []
    hang = ("; a collective timed out: a rank stalled or died and the watchdog aborted the job (a hang, not a slow "
            "step): find the first rank that failed in its own output") if log.hung else ""
    return [f"--log {log.path}: the run stopped after iteration {log.iterations[-1].iteration}: "
            f"{log.stop_cause}{hang}; the figures are the iterations before it"]


def _rank0_note(log: TrainingLog) -> list[str]:
    """What a log without rank 0's start-up lines costs (TrainingLog.rank0_lines: Megatron prints them, and
    Megatron-LM's argument dump, from rank 0 alone; the iteration lines come from the last rank)."""
    if log.rank0_lines or not log.iterations:
        return []
    tokens = "" if _LOG_ARGS.keys() <= log.args.keys() else \
        "tokens/s/GPU needs seq_length and the GPU count from --config/--gpus, "
    return [f"--log {log.path} has none of the lines Megatron prints from rank 0 at start-up (Megatron-LM's argument "
            "dump among them), as the last rank's stdout alone: a relaunch shows only where iteration numbers go "
            f"back, and a Megatron-LM run's own arguments are missing ({tokens}the log's world size is not checked "
            "against the traces, and the advice and the check against a prediction have --config alone); pass the "
            "job's whole stdout, rank 0's lines with the last rank's"]


def _check_memory(m: Measurement) -> None:
    """A peak reserved above the GPU's memory cannot be one run's: the log or traces (or --gpu) are another's."""
    if m.peak_reserved_bytes and m.gpu_memory_bytes and m.peak_reserved_bytes > m.gpu_memory_bytes:
        said = f" ({m.capacity_source})" if m.capacity_source else ""
        raise MoetuneError(f"peak reserved memory {m.peak_reserved_bytes / 2**30:.1f} GiB ({m.peak_source}) exceeds "
                           f"the GPU's {m.gpu_memory_bytes / 2**30:.1f} GiB{said}: pass the log and traces of one run")


def _log_versus_traces(log: TrainingLog | None, s: StepMetrics | None) -> list[str]:
    if log is None or s is None or not log.iteration_seconds or s.seconds <= 0:
        return []
    ratio = log.iteration_seconds / s.seconds
    if 1 / LOG_TRACE_RATIO <= ratio <= LOG_TRACE_RATIO:
        return []
    if not 1 / LOG_TRACE_MISMATCH <= ratio <= LOG_TRACE_MISMATCH:
        raise MoetuneError(f"--log {log.path}: its {log.iteration_seconds:.3f} s per iteration is {ratio:.2f}x the "
                           f"traces' {s.seconds:.3f} s step, more than profiling changes a step: pass the log and "
                           "traces of one run")
    return [f"the log's {log.iteration_seconds:.3f} s per iteration is {ratio:.2f}x the traces' {s.seconds:.3f} s "
            "step: are they from the same run and configuration?"]


def _assign_ranks(traces: list[RankTrace]) -> list[int]:
    seen: dict[int, str] = {}
    for t in traces:
        if t.rank is not None:
            if t.rank in seen:
                raise MoetuneError(f"traces {seen[t.rank]} and {t.path} both record rank {t.rank}; "
                                   "pass one trace per rank of a single run")
            seen[t.rank] = t.path
    free = (r for r in range(len(traces) + len(seen)) if r not in seen)
    return [t.rank if t.rank is not None else next(free) for t in traces]


def _idle_dict(s: StepMetrics) -> dict[str, float]:
    # comm_kernel_wait is busy time inside communication kernels (peers late), not part of "seconds".
    return {"seconds": s.idle_seconds, **s.idle, "comm_kernel_wait": s.comm_wait_seconds}


def _step_dict(s: StepMetrics) -> dict[str, Any]:
    return {"name": s.name, "seconds": s.seconds, "busy_seconds": s.busy_seconds, "idle": _idle_dict(s),
            "exposed_communication_seconds": s.exposed_comm_seconds, "breakdown": s.breakdown}


def _rank_dict(r: RankMetrics) -> dict[str, Any]:
    t = r.trace
    return {"rank": r.rank, "path": t.path, "device": t.device_name, **_step_dict(r.mean),
            "steps": [_step_dict(s) for s in r.steps]}


def _log_dict(log: TrainingLog) -> dict[str, Any]:
    return {"path": log.path, "iterations_logged": len(log.iterations), "iteration_seconds": log.iteration_seconds,
            "launcher": "megatron-lm" if log.argument_dump else None,
            "tflops_per_gpu": log.tflops_per_gpu, "tokens_per_second_per_gpu": log.tokens_per_second_per_gpu,
            "peak_reserved_bytes": log.peak_reserved_bytes, "alloc_retries": log.alloc_retries,
            "oom": bool(log.oom_lines)}


def _measure(traces: list[RankTrace], log: TrainingLog | None, gpu_memory_bytes: float | None,
             gpu: GpuSpec | None = None) -> Measurement:
    ranks_ids = _assign_ranks(traces)
    floor = comm_floor(traces)
    ranks = sorted((rank_metrics(t, r, floor) for t, r in zip(traces, ranks_ids)), key=lambda m: m.rank)
    first = traces[0] if traces else None
    trace_peaks = [t.peak_reserved_bytes for t in traces if t.peak_reserved_bytes is not None]
    peak, source = None, None
    if log is not None and log.peak_reserved_bytes is not None:
        peak, source = log.peak_reserved_bytes, f"log {log.path}"
    elif trace_peaks:
        peak, source = max(trace_peaks), "trace [memory] events"
    capacity, said = gpu_memory_bytes or (first.device_memory_bytes if first else None), None
    if not capacity and log is not None and log.oom_capacity_bytes:  # no --gpu, no trace's: PyTorch's OOM states it
        capacity, said = log.oom_capacity_bytes, f"capacity from the log's OOM message, line {log.oom_capacity_line}"
    return Measurement(
        ranks=ranks, combined=mean_steps([r.mean for r in ranks]) if ranks else None, log=log,
        gpu_name=first.device_name if first else None, gpu_memory_bytes=capacity, capacity_source=said,
        compute_capability=first.compute_capability if first else None,
        peak_reserved_bytes=peak, peak_source=source, gpu=gpu,
    )


def diagnose(
    traces: Sequence[str | Path] | str | Path = (),
    log: str | Path | TrainingLog | None = None,
    config: dict[str, Any] | None = None,
    gpu_memory_bytes: float | None = None,
    gpu: GpuSpec | None = None,
    priced_on: GpuSpec | None = None,
    force_gpu: bool = False,
) -> DiagnoseResult:
    """Diagnose a run from Kineto traces (files or directories, one file per rank) and/or a log.

    ``config``: Megatron Bridge dotted names -> values; it drops advice the config makes moot and
    lets config facts (e.g. full recompute) count as evidence. ``gpu`` (--gpu) is the run's GPU: it must be the
    traces' architecture, and gives the capacity and the platform the advice reads, a trace's device name aside
    (``gpu_memory_bytes`` overrides the capacity alone). It and ``priced_on`` (the GPU a compared prediction is
    priced on) must be the traces' GPU: another part of its architecture (an H20 as --gpu h100) is one error line, a
    note with ``force_gpu``.
    """
    found = expand_paths([traces] if isinstance(traces, (str, Path)) else list(traces))
    paths = found.paths
    if not paths and log is None:
        raise MoetuneError("diagnose: give at least one trace (file or directory) or --log FILE")
    loaded = [read_trace(p) for p in paths]
    _same_run(loaded)
    part = gpu_notes(loaded, gpu, priced_on, force_gpu)
    if gpu is not None:
        gpu_memory_bytes = gpu_memory_bytes or gpu.capacity_bytes
    training_log = read_log(log) if isinstance(log, (str, Path)) else log
    run_world = _same_world(loaded, training_log, config or {})
    if training_log is not None:
        _fill_args(training_log, config or {})
    m = _measure(loaded, training_log, gpu_memory_bytes, gpu)
    _check_memory(m)
    f = facts(m, config)
    wall, reason = decide(f)
    s = m.combined
    notes = found.note() + part + sorted({n for r in m.ranks for n in r.notes}) + _log_versus_traces(training_log, s)
    notes += (training_log.notes + _rank0_note(training_log) + _stopped_note(training_log)) \
        if training_log is not None else []
    notes += _capacity_note(training_log, m)
    if m.ranks and run_world and len(m.ranks) < run_world:
        notes.append(f"{len(m.ranks)} of {run_world} ranks profiled: the figures are theirs; imbalance across ranks "
                     "shows only as rank waits here (profile every rank, or one per pipeline stage, to compare them)")
    return DiagnoseResult(
        ranks=len(m.ranks), world_size=run_world,
        step_seconds=s.seconds if s else (training_log.iteration_seconds if training_log else None),
        breakdown=dict(s.breakdown) if s else {}, idle=_idle_dict(s) if s else {},
        exposed_communication_seconds=s.exposed_comm_seconds if s else None,
        dominant_wall=wall, wall_reason=reason, evidence=evidence(m, f),
        recommendations=recommend(wall, f, config), per_rank=[_rank_dict(r) for r in m.ranks],
        imbalance=imbalance(m.ranks) if len(m.ranks) > 1 else {},
        memory={"peak_reserved_bytes": m.peak_reserved_bytes, "capacity_bytes": m.gpu_memory_bytes,
                "fraction": f.get("memory_fraction"), "source": m.peak_source, "capacity_source": m.capacity_source},
        log=_log_dict(training_log) if training_log else None, facts=f, notes=notes,
    )
