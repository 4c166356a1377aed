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
from decimal import Decimal
from pathlib import Path

from moetune.errors import MoetuneError
from moetune.profile.collectives import attribute
from moetune.profile.event_sink import BadEvent, EventSink
from moetune.profile.rank_trace import RankTrace
from moetune.profile.trace_json import (
    BAD_JSON,
    EVENTS_NOT_A_LIST,
    fail,
    first_char,
    json_problem,
    stream,
)

_RANK_IN_NAME = re.compile(r"rank[_\-.]?(\d+)", re.IGNORECASE)


def read_trace(path: str | Path) -> RankTrace:
    """Read one rank's trace (.json or .json.gz); MoetuneError names what is wrong with it."""
    path = Path(path)
    if not path.is_file():
        raise fail(path, "no such file; pass a Kineto .json/.json.gz trace or a directory of them")
    if path.stat().st_size == 0:
        raise fail(path, "is empty (0 bytes); re-export it from torch.profiler")
    sink = EventSink()
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
        raise MoetuneError(json_problem(path, err)) from None
    return _assemble(path, header, sink)


def _assemble(path: Path, header: dict, sink: EventSink) -> RankTrace:
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
