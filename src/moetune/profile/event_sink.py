"""What diagnose keeps of each Kineto trace event (GPU ops, launch calls, ProfilerSteps, c10d operators, "[memory]"
events), as profile/trace_json.py streams them in; profile/reader.py read_trace turns what is kept into a RankTrace."""

import re
from decimal import Decimal

from moetune.profile.kernels import classify
from moetune.profile.rank_trace import SIG_ARGS, GpuOp, Step, sized

_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
# Kineto category names across PyTorch versions (1.x wrote "Kernel", "Memcpy", "Runtime").
_GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "gpu_memcpy", "memcpy": "gpu_memcpy",
             "gpu_memset": "gpu_memset", "memset": "gpu_memset"}
_LAUNCH_CATS = {"cuda_runtime", "runtime", "cuda_driver"}
_COLLECTIVE_OP = re.compile(r"^(?:c10d::|nccl:)_*([a-z_]+?)_*$")  # c10d::alltoall_base_, nccl:all_to_all
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


class EventSink:
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
            if e.get("ph") == "X" and str(e.get("cat", "")).lower() in _GPU_CATS:  # had read as a CPU-only profile
                raise BadEvent(f"GPU event {str(e.get('name', ''))[:40]!r} has no ts: it cannot be placed on the "
                               "step's timeline; re-export the trace")
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
            op.signature = (name, *(str(args.get(k)) for k in SIG_ARGS))
            self.unsized_comm += not sized(op.signature)
        self.ops.append(op)

    def _memory(self, args: dict) -> None:
        # Kineto "[memory]" instant events: Device Type 1 is CUDA (c10::DeviceType).
        if args.get("Device Type", 1) != 1 or args.get("Total Reserved") is None:
            return
        value = float(args["Total Reserved"])
        self.peak_reserved = value if self.peak_reserved is None else max(self.peak_reserved, value)
