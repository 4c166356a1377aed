"""Stream one PyTorch profiler (Kineto) trace into the few facts ``diagnose`` needs.

Why not Holistic Trace Analysis (HTA) as the reader: HTA (hta.trace_analysis.TraceAnalysis) parses a
whole trace into a pandas DataFrame per rank (memory several times the file size, and pandas,
plotly and psutil as dependencies), its kernel typing has three classes (a ``^nccl.*Kernel`` regex,
Memcpy/Memset, everything else) so DeepEP/HybridEP and the per-collective split are invisible to it,
and it needs a directory whose file names carry ranks. We keep its host-wait test (a gap is
host-bound when the next kernel's launch call started after the GPU went idle;
hta/analyzers/breakdown_analysis.py, IdleTimeType.HOST_WAIT). We do not keep its iteration rule (an op
belongs to the step that launched it, hta/common/trace.py add_iteration): we cut the GPU timeline at
ProfilerStep boundaries so that busy + idle = step time. tests/profile/test_hta_crosscheck.py
compares our figures with HTA's where HTA is installed.

Reading: ``ijson`` (yajl2 C backend) streams ``traceEvents`` one event at a time, so a 100 MB
trace never sits in memory as one object; without ijson we fall back to ``json.load``. Kineto writes
``deviceProperties`` and ``distributedInfo`` before ``traceEvents`` (libkineto ChromeTraceLogger
handleTraceStart), so the header pass stops at ``traceEvents``.
"""

import gzip
import re
import zlib
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from moetune.errors import MoetuneError
from moetune.profile.collectives import attribute
from moetune.profile.kernels import classify
from moetune.profile.trace_json import (
    BAD_JSON,
    EVENTS_NOT_A_LIST,
    fail,
    first_char,
    json_problem,
    misnamed_gzip,
    stream,
)

_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_RANK_IN_NAME = re.compile(r"rank[_\-.]?(\d+)", re.IGNORECASE)
# Kineto category names across PyTorch versions (1.x wrote "Kernel", "Memcpy", "Runtime").
_GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "gpu_memcpy", "memcpy": "gpu_memcpy",
             "gpu_memset": "gpu_memset", "memset": "gpu_memset"}
_LAUNCH_CATS = {"cuda_runtime", "runtime", "cuda_driver"}
_COLLECTIVE_OP = re.compile(r"^(?:c10d::|nccl:)_*([a-z_]+?)_*$")  # c10d::alltoall_base_, nccl:all_to_all
# Message-size fields PyTorch's record_param_comms attaches to NCCL kernels; they make a collective's
# signature, so a slow instance can be compared with the fastest instance of the same transfer.
_SIG_ARGS = ("Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size",
             "Process Group Name", "grid", "block")
# where the message sizes sit in a signature (the kernel name first, then _SIG_ARGS)
_SIZES = slice(1 + _SIG_ARGS.index("In msg nelems"), 2 + _SIG_ARGS.index("Out msg nelems"))


def sized(signature: tuple) -> bool:
    """Whether a communication signature records its message sizes ("In/Out msg nelems"): without them two transfers
    of one kernel are not the same transfer, and their durations say nothing of waiting."""
    return signature[_SIZES] != ("None", "None")

EPOCH_2001_US = 1e15  # 2001-09-09 in epoch microseconds: a ts above it is wall-clock time
# No op of a profiled training step lasts an hour (Kineto's dur is microseconds): a longer one is a corrupt record
MAX_OP_US = 3.6e9
# Nor does a clock write a ts past 1e17 us (the year 5138 in epoch microseconds; Kineto's are ~1.7e15): a corrupt record
MAX_TS_US = 1e17


class BadEvent(ValueError):
    """An event whose fields parse but cannot be true (its message is the whole reason)."""


def duration(e: dict, what: str) -> float:
    """An event's dur in microseconds: finite, non-negative and under MAX_OP_US, else the event is named."""
    try:
        dur = float(e.get("dur", -1))
    except (OverflowError, ValueError, TypeError):
        dur = -1.0
    if not 0 <= dur <= MAX_OP_US:
        raise BadEvent(f"{what} at ts {e.get('ts')} has dur {e.get('dur', 'missing')!s:.24}: not a duration "
                       "between 0 and an hour (in us); re-export the trace")
    return dur


@dataclass(kw_only=True, slots=True)
class GpuOp:
    start: float  # microseconds since RankTrace.origin_us (Kineto ts/dur are microseconds)
    end: float
    cls: str
    stream: int
    correlation: int | None
    signature: tuple | None = None  # only for communication ops


@dataclass(kw_only=True, slots=True)
class Step:
    name: str
    start: float
    end: float


@dataclass(kw_only=True, slots=True)
class RankTrace:
    path: str
    rank: int | None
    world_size: int | None
    device_name: str | None
    device_memory_bytes: int | None
    compute_capability: tuple[int, int] | None
    ops: list[GpuOp]
    launches: dict[int, float]  # correlation id -> CPU launch-call start (us)
    graph_launches: frozenset[int] = frozenset()  # correlation ids of CUDA-graph launches (replayed kernels share one)
    steps: list[Step]
    peak_reserved_bytes: float | None = None  # from "[memory]" events (profile_memory=True)
    device_sms: int | None = None  # deviceProperties numSms: parts of one architecture differ in it
    origin_us: int = 0  # the trace's own timestamp of time 0 here
    notes: list[str] = field(default_factory=list)
    span_us: float = 0.0  # from the first event to the last op's end

    @property
    def epoch_span(self) -> tuple[float, float] | None:
        """[first, last] in epoch microseconds when the trace's clock is the wall clock (Kineto since 2.x), else
        None (older traces count from the profiler's start)."""
        return (self.origin_us, self.origin_us + self.span_us) if self.origin_us > EPOCH_2001_US else None


class _Sink:
    """Keeps what the analysis needs from each event and drops the rest (cpu_op, flows...)."""

    def __init__(self) -> None:
        self.ops: list[GpuOp] = []
        self.launches: dict[int, float] = {}
        self.steps: list[Step] = []
        self.devices: dict[int, int] = {}
        self.peak_reserved: float | None = None
        self.events = 0
        self.origin: int | None = None
        self.launch_tid: dict[int, object] = {}  # correlation -> CPU thread of the launch call
        self.graph_launches: set[int] = set()  # correlations of cudaGraphLaunch calls (their kernels share them)
        self.collective_ops: list[tuple[object, float, float, str]] = []  # (tid, start, end, collective)
        self.unsized_comm = 0  # communication kernels without message sizes: no comm_kernel_wait for them
        self.last_ts = 0.0  # the latest event start, since origin

    def _t(self, ts) -> float:
        """Microseconds since the first event. Numbers arrive as exact Decimals: an epoch timestamp
        (~1.7e15 us) with ns digits keeps only 0.25 us in a float64, so we subtract first. A number past MAX_TS_US
        (1e400 had overflowed the trace's wall-clock span) names the event; a string fails int() as malformed."""
        if isinstance(ts, (int, float, Decimal)) and not abs(ts) < MAX_TS_US:
            raise BadEvent(f"an event's ts {ts!s:.24} is past any clock's (over {MAX_TS_US:.0e} us); re-export the "
                           "trace")
        if self.origin is None:
            self.origin = int(ts)
        t = float(ts - self.origin)
        self.last_ts = max(self.last_ts, t)
        return t

    def add(self, e: dict) -> None:
        if not isinstance(e, dict):
            return
        self.events += 1
        if "ts" not in e:
            return
        ph = e.get("ph")
        if ph == "X":
            self._complete(e)
        elif ph == "i" and e.get("name") == "[memory]":
            self._memory(e.get("args") or {})

    def _complete(self, e: dict) -> None:
        cat = str(e.get("cat", "")).lower()
        args = e.get("args") or {}
        gpu_cat = _GPU_CATS.get(cat)
        if gpu_cat is not None:
            self._gpu(e, gpu_cat, args)
        elif cat in _LAUNCH_CATS:
            corr = args.get("correlation")
            if corr is not None:
                self.launches[int(corr)] = self._t(e["ts"])
                self.launch_tid[int(corr)] = e.get("tid")
                if "GraphLaunch" in str(e.get("name", "")):  # cudaGraphLaunch / cuGraphLaunch
                    self.graph_launches.add(int(corr))
        elif cat != "gpu_user_annotation":
            name = str(e.get("name", ""))
            if m := _STEP_RE.match(name):
                start = self._t(e["ts"])
                if not (dur := duration(e, m.group(0))):
                    raise BadEvent(f"{m.group(0)} at ts {e.get('ts')} lasts 0 us: not an iteration; re-export the "
                                   "trace")
                self.steps.append(Step(name=m.group(0), start=start, end=start + dur))
            elif m := _COLLECTIVE_OP.match(name) or (name == "record_param_comms" and args.get("Collective name")):
                start = self._t(e["ts"])
                what = m.group(1) if isinstance(m, re.Match) else str(args["Collective name"])
                self.collective_ops.append((e.get("tid"), start, start + float(e.get("dur", 0)), what))

    def _gpu(self, e: dict, cat: str, args: dict) -> None:
        name = str(e.get("name", ""))
        collective = args.get("Collective name")
        cls = classify(name, cat, str(collective) if collective else None)
        start = self._t(e["ts"])
        corr = args.get("correlation")
        device = args.get("device", e.get("pid"))
        if isinstance(device, int):
            self.devices[device] = self.devices.get(device, 0) + 1
        dur = duration(e, f"GPU event {name[:40]!r}")  # an op without a real duration cannot be placed
        op = GpuOp(start=start, end=start + dur, cls=cls,
                   stream=int(args.get("stream", e.get("tid", 0)) or 0),
                   correlation=int(corr) if corr is not None else None)
        if name.lower().startswith(("nccl", "deep_ep", "hybrid_ep", "userbuffers")) or collective:
            op.signature = (name, *(str(args.get(k)) for k in _SIG_ARGS))
            self.unsized_comm += not sized(op.signature)
        self.ops.append(op)

    def _memory(self, args: dict) -> None:
        # Kineto "[memory]" instant events: Device Type 1 is CUDA (c10::DeviceType).
        if args.get("Device Type", 1) != 1 or args.get("Total Reserved") is None:
            return
        value = float(args["Total Reserved"])
        self.peak_reserved = value if self.peak_reserved is None else max(self.peak_reserved, value)


def read_trace(path: str | Path) -> RankTrace:
    """Read one rank's trace (.json or .json.gz); MoetuneError names what is wrong with it."""
    path = Path(path)
    if not path.is_file():
        raise fail(path, "no such file; pass a Kineto .json/.json.gz trace or a directory of them")
    if path.stat().st_size == 0:
        raise fail(path, "is empty (0 bytes); re-export it from torch.profiler")
    sink = _Sink()
    try:
        if not first_char(path):
            raise fail(path, "is empty after decompression; re-export it from torch.profiler")
        header = stream(path, sink)
    except MoetuneError:
        raise
    except BadEvent as err:
        raise fail(path, str(err)) from None
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as err:
        raise fail(path, f"is not a readable gzip/JSON file ({err.__class__.__name__}); truncated copy?") from None
    except BAD_JSON as err:
        raise fail(path, f"{json_problem(err)}{misnamed_gzip(path)}: {str(err).splitlines()[0][:120]}") from None
    return _assemble(path, header, sink)


def _assemble(path: Path, header: dict, sink: _Sink) -> RankTrace:
    if sink.events == 0 and (found := header.get(EVENTS_NOT_A_LIST)):
        raise fail(path, f"has traceEvents as {found}, not a list of events; is it a "
                          "PyTorch profiler (Kineto) trace?")
    if sink.events == 0:
        raise fail(path, "has no trace events (no traceEvents, or an empty list); is it a PyTorch profiler (Kineto) "
                          "trace of at least one step?")
    if not sink.ops:
        raise fail(path, "has no GPU kernels or memcpys (a CPU-only profile); record with "
                          "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")
    named = attribute(sink.ops, sink.launches, sink.launch_tid, sink.collective_ops)
    sink.ops.sort(key=lambda op: op.start)
    sink.steps.sort(key=lambda s: s.start)
    device = max(sink.devices, key=sink.devices.get) if sink.devices else 0
    try:
        rank, world = _distributed(path, header.get("distributedInfo") or {})
        name, mem, cc, sms = _device(header.get("deviceProperties") or [], device)
    except (TypeError, ValueError, AttributeError) as err:
        raise fail(path, f"has malformed distributedInfo/deviceProperties ({err}); re-export it from "
                          "torch.profiler or remove those keys") from None
    notes = [f"{named} NCCL kernel(s) named by the c10d operator that launched them"] if named else []
    if sink.unsized_comm:
        notes.append(f"{sink.unsized_comm} communication kernel(s) carry no message sizes (record_param_comms "
                     "args): comm_kernel_wait leaves them out, as transfers of different sizes are not comparable")
    return RankTrace(
        path=str(path), rank=rank, world_size=world, device_name=name, device_memory_bytes=mem,
        compute_capability=cc, device_sms=sms, ops=sink.ops, launches=sink.launches, steps=sink.steps,
        graph_launches=frozenset(sink.graph_launches),
        peak_reserved_bytes=sink.peak_reserved, origin_us=(sink.origin or 0) + _base_us(header),
        span_us=max(sink.last_ts, max(op.end for op in sink.ops)), notes=notes,
    )


def _base_us(header: dict) -> int:
    """The epoch microseconds a trace's ts count from: Kineto's baseTimeNanoseconds where it writes one (its ts are
    then relative), else 0 (ts already epoch, or a trace without a wall clock)."""
    base = header.get("baseTimeNanoseconds")
    if isinstance(base, str) and base.isascii() and base.isdigit() and len(base) <= 20:  # written as a string
        base = int(base)
    return int(base) // 1000 if isinstance(base, (int, float, Decimal)) and 0 < base < 10**20 else 0


def _distributed(path: Path, dist: dict) -> tuple[int | None, int | None]:
    """(rank, world size) from Kineto's distributedInfo, else the rank in the file name."""
    rank, world = dist.get("rank"), dist.get("world_size")
    if rank is None and (m := _RANK_IN_NAME.search(path.name)):
        rank = m.group(1)
    rank, world = (int(rank) if rank is not None else None), (int(world) if world is not None else None)
    if rank is not None and world is not None and not 0 <= rank < world:
        raise ValueError(f"rank {rank} outside world size {world}")
    return rank, world


def _device(props_list: list, device: int) -> tuple[str | None, int | None, tuple[int, int] | None, int | None]:
    """(name, memory bytes, compute capability, SMs) of the device the kernels ran on, from deviceProperties."""
    props = next((p for p in props_list if p.get("id") == device), {})
    cc = (int(props["computeMajor"]), int(props.get("computeMinor", 0))) if "computeMajor" in props else None
    mem, sms = props.get("totalGlobalMem"), props.get("numSms")
    return props.get("name"), int(mem) if mem else None, cc, int(sms) if sms else None
