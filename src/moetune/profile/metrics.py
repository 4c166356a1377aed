"""Per-rank, per-iteration figures from one ``RankTrace``: busy/idle, class breakdown, exposure.

Windows: each ``ProfilerStep#N`` annotation (CPU side, as ``prof.step()`` marks it) is one
iteration; a GPU op counts toward a window for the part of its duration inside it. In steady state
the GPU trails the CPU by a constant lag, so each window holds one iteration's worth of GPU work.
A trace without ProfilerStep markers is one window from its first to its last GPU op.

Idle gaps (no GPU op on any stream) are attributed by the op that ends them (docs/diagnose.md):
- ``rank_wait``: the op is a communication kernel; the GPU sat idle until a collective could start
  (e.g. the host sync on receive counts before an all-to-all-v or a DeepEP dispatch, which returns
  only when the slowest peer has routed its tokens).
- ``host_bound``: a compute/copy op whose launch call started after the GPU went idle: the CPU was
  late (Python, launch overhead, GC, data loading). Same test as HTA's IdleTimeType.HOST_WAIT.
- ``graph_replay``: the op is a kernel of a CUDA graph launched before the gap began: the replayed graph's own
  dependencies (or an event it waits on) held it; CUPTI gives replayed kernels their cudaGraphLaunch's correlation.
- ``dependency``: the op was launched before the gap began, so work sat queued while the GPU idled:
  a cross-stream event wait held it (typically on a collective whose stream is not in the trace, or
  a host-side event). Kineto does not record which event, so it is reported, not assigned a wall.
- ``unattributed``: the op has no launch record (e.g. kernels replayed by a CUDA graph) or the gap
  runs to the end of the trace.
``comm_wait`` is busy time: the part of each communication kernel beyond the fastest instance of the
same transfer (same kernel, message size, group) seen on any rank, i.e. time spent spinning on peers.
"""

from bisect import bisect_left
from dataclasses import dataclass, field

import numpy as np

from moetune.profile import intervals as iv
from moetune.profile.kernels import COMMUNICATION, COMPUTE, class_ids, class_kind, ids_of_kind
from moetune.profile.rank_trace import GpuOp, RankTrace, Step, sized

US = 1e-6  # Kineto timestamps are microseconds
IDLE_KEYS = ("host_bound", "rank_wait", "graph_replay", "dependency", "unattributed")


@dataclass(kw_only=True, slots=True)
class StepMetrics:
    name: str
    seconds: float
    busy_seconds: float
    breakdown: dict[str, float]  # class id -> summed op seconds inside the window
    exposed_comm_seconds: float
    exposed_by_class: dict[str, float]
    idle: dict[str, float]  # IDLE_KEYS -> seconds; they sum to seconds - busy_seconds
    comm_wait_seconds: float

    @property
    def idle_seconds(self) -> float:
        return sum(self.idle.values())


@dataclass(kw_only=True, slots=True)
class RankMetrics:
    rank: int
    trace: RankTrace
    steps: list[StepMetrics]
    mean: StepMetrics  # over the steady steps (all but the first when there are 3 or more)
    notes: list[str] = field(default_factory=list)


def comm_floor(traces: list[RankTrace]) -> dict[tuple, float]:
    """Fastest duration (us) of each communication signature over all ranks and iterations."""
    floor: dict[tuple, float] = {}
    for trace in traces:
        for op in trace.ops:
            if op.signature is not None and sized(op.signature):
                dur = op.end - op.start
                floor[op.signature] = min(dur, floor.get(op.signature, dur))
    return floor


def _windows(trace: RankTrace) -> tuple[list[Step], list[str]]:
    if trace.steps:
        return trace.steps, []
    lo, hi = trace.ops[0].start, max(op.end for op in trace.ops)
    note = "no ProfilerStep markers: the whole trace is treated as one iteration"
    return [Step(name="whole trace", start=lo, end=hi)], [note]


def _assign(ops: list[GpuOp], windows: list[Step]) -> list[list[GpuOp]]:
    """Ops overlapping each window (an op spanning a boundary goes to both)."""
    ends = [w.end for w in windows]
    buckets: list[list[GpuOp]] = [[] for _ in windows]
    for op in ops:
        i = bisect_left(ends, op.start)
        while i < len(windows) and windows[i].start < op.end:
            if ends[i] > op.start:
                buckets[i].append(op)
            i += 1
    return buckets


def _gap_cause(gap: iv.Interval, trace: RankTrace, starts: list[float]) -> str:
    i = bisect_left(starts, gap[1])
    if i >= len(trace.ops):
        return "unattributed"
    nxt = trace.ops[i]
    if class_kind(nxt.cls) == COMMUNICATION:
        return "rank_wait"
    launch = trace.launches.get(nxt.correlation) if nxt.correlation is not None else None
    if launch is None:
        return "unattributed"
    if launch >= gap[0]:
        return "host_bound"
    return "graph_replay" if nxt.correlation in trace.graph_launches else "dependency"


def idle_gaps(trace: RankTrace, lo: float, hi: float) -> list[tuple[float, float, str]]:
    """Every GPU-idle gap in [lo, hi] with its cause, judged on the whole timeline (not per window,
    so a gap straddling a step boundary keeps its true start for the launch-time test)."""
    starts = [op.start for op in trace.ops]
    busy = iv.union((op.start, op.end) for op in trace.ops)
    return [(s, e, _gap_cause((s, e), trace, starts)) for s, e in iv.gaps(busy, lo, hi)]


def _step(window: Step, ops: list[GpuOp], gaps: list[tuple[float, float, str]], floor: dict) -> StepMetrics:
    lo, hi = window.start, window.end
    clipped = [(op, max(op.start, lo), min(op.end, hi)) for op in ops]
    breakdown = dict.fromkeys(class_ids(), 0.0)
    by_class: dict[str, list[iv.Interval]] = {}
    comm_wait = 0.0
    for op, s, e in clipped:
        breakdown[op.cls] += (e - s) * US
        by_class.setdefault(op.cls, []).append((s, e))
        dur = op.end - op.start
        if op.signature is not None and dur > 0 and sized(op.signature):
            comm_wait += (dur - floor.get(op.signature, dur)) * (e - s) / dur * US
    busy = iv.union(iv.clip(((op.start, op.end) for op in ops), lo, hi))
    compute = iv.union(x for c in ids_of_kind(COMPUTE) for x in by_class.get(c, ()))
    comm = iv.union(x for c in ids_of_kind(COMMUNICATION) for x in by_class.get(c, ()))
    exposed_by_class = {}
    for c in ids_of_kind(COMMUNICATION):
        u = iv.union(by_class.get(c, ()))
        exposed_by_class[c] = (iv.length(u) - iv.intersection_length(u, compute)) * US
    idle = dict.fromkeys(IDLE_KEYS, 0.0)
    for s, e, cause in gaps[max(0, bisect_left(gaps, (lo,)) - 1):]:
        if s >= hi:
            break
        idle[cause] += max(0.0, min(e, hi) - max(s, lo)) * US
    return StepMetrics(
        name=window.name, seconds=(hi - lo) * US, busy_seconds=iv.length(busy) * US,
        breakdown=breakdown, exposed_comm_seconds=(iv.length(comm) - iv.intersection_length(comm, compute)) * US,
        exposed_by_class=exposed_by_class, idle=idle, comm_wait_seconds=comm_wait,
    )


def mean_steps(steps: list[StepMetrics]) -> StepMetrics:
    n = len(steps)

    def avg(get) -> float:
        return sum(get(s) for s in steps) / n

    def avg_dict(get) -> dict[str, float]:
        return {k: avg(lambda s, k=k: get(s)[k]) for k in get(steps[0])}

    return StepMetrics(
        name=f"mean of {n} step(s)", seconds=avg(lambda s: s.seconds), busy_seconds=avg(lambda s: s.busy_seconds),
        breakdown=avg_dict(lambda s: s.breakdown), exposed_comm_seconds=avg(lambda s: s.exposed_comm_seconds),
        exposed_by_class=avg_dict(lambda s: s.exposed_by_class), idle=avg_dict(lambda s: s.idle),
        comm_wait_seconds=avg(lambda s: s.comm_wait_seconds),
    )


# A leading step this much shorter than the median step is still warm-up: the CPU marks steps ahead of the GPU until
# the launch queue fills, so its first windows are short (the V100 trace: 35, 72, then 95.7 ms steps)
WARMUP_SHORT = 0.9


def steady(steps: list[StepMetrics]) -> list[StepMetrics]:
    """Drop the first profiled step when there are 3 or more (the CPU runs ahead of an empty queue), and any leading
    step after it still shorter than WARMUP_SHORT x the median step, keeping at least two."""
    if len(steps) < 3:
        return steps
    median = float(np.median([s.seconds for s in steps]))
    start = 1
    while start < len(steps) - 2 and steps[start].seconds < WARMUP_SHORT * median:
        start += 1
    return steps[start:]


def rank_metrics(trace: RankTrace, rank: int, floor: dict[tuple, float]) -> RankMetrics:
    windows, notes = _windows(trace)
    lo = min(windows[0].start, trace.ops[0].start)
    hi = max(windows[-1].end, max(op.end for op in trace.ops))
    gaps = idle_gaps(trace, lo, hi)
    buckets = _assign(trace.ops, windows)
    steps = [_step(w, b, gaps, floor) for w, b in zip(windows, buckets)]
    kept = steady(steps)
    return RankMetrics(rank=rank, trace=trace, steps=steps, mean=mean_steps(kept),
                       notes=trace.notes + notes + _warmup_notes(steps, kept, rank))


def _warmup_notes(steps: list[StepMetrics], kept: list[StepMetrics], rank: int) -> list[str]:
    """Say when the averaged steps may still be warm-up: fewer than three profiled, or one kept (at least two are)
    that is still short of the median step."""
    if len(steps) < 3:
        return [f"rank {rank}: only {len(steps)} profiled step(s), none known to be past warm-up (the first runs "
                "while the CPU fills an empty launch queue, which reads as host-bound idle); profile 3 or more steps"]
    median = float(np.median([s.seconds for s in steps]))
    warm = [s for s in kept if s.seconds < WARMUP_SHORT * median]
    if warm:
        return [f"rank {rank}: {warm[0].name} ({warm[0].seconds * 1e3:.1f} ms) is still shorter than the median step "
                f"({median * 1e3:.1f} ms) but kept, as at least two steps are; profile more steps"]
    return []
