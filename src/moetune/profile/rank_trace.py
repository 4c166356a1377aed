"""One rank's trace as diagnose reads it (profile/reader.py read_trace builds it): its GPU ops, ProfilerSteps and the
device it ran on. Times are microseconds since the trace's first event (Kineto ts/dur are microseconds)."""

from dataclasses import dataclass, field

# Message-size fields PyTorch's record_param_comms attaches to NCCL kernels; they make a collective's
# signature, so a slow instance can be compared with the fastest instance of the same transfer.
SIG_ARGS = ("Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size",
            "Process Group Name", "grid", "block")
# where the message sizes sit in a signature (the kernel name first, then SIG_ARGS)
_SIZES = slice(1 + SIG_ARGS.index("In msg nelems"), 2 + SIG_ARGS.index("Out msg nelems"))


def sized(signature: tuple) -> bool:
    """Whether a communication signature records its message sizes ("In/Out msg nelems"): without them two transfers
    of one kernel are not the same transfer, and their durations say nothing of waiting."""
    return signature[_SIZES] != ("None", "None")


EPOCH_2001_US = 1e15  # 2001-09-09 in epoch microseconds: a ts above it is wall-clock time


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
