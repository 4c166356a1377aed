"""Synthetic Kineto traces for tests and benchmarks: what the real traces in shared/data lack.

The real traces (ResNet and a recommender model on A100/V100) have no MoE kernels. These scenarios
put known amounts of time into DeepEP dispatch/combine, exposed NCCL all-to-all, host gaps and
memory pressure, with the event layout PyTorch writes (ProfilerStep user annotations, cuda_runtime
launch calls linked to kernels by ``correlation``, kernel ``args`` with stream/device, NCCL
``Collective name`` from record_param_comms, "[memory]" instant events). Each ``Scenario`` knows the
figures it was built with, so tests compare the analysis against construction, not against itself.
"""

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

GEMM = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_"
        "execute_segment_k_off_kernel__5x_cublas")
GROUPED_GEMM = ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape"
                "<cute::tuple<int, int, int> >, cutlass::bfloat16_t> >(cutlass::gemm::kernel::Params)")
ATTENTION = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x128x128_4x1x1_kernel0_0"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16> >"
DEEPEP_DISPATCH = "void deep_ep::internode::dispatch<true, 8, 3, 4, 24, 8>(int4*, float*, long*, float*, int*)"
DEEPEP_COMBINE = "void deep_ep::internode::combine<__nv_bfloat16, 8, 3, 4, 8>(int4*, float*, int4 const*)"
NCCL_SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
NCCL_ALLGATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NCCL_REDUCESCATTER = "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
STREAMS = {"compute": 7, "comm": 23}
PID = 4242


@dataclass(kw_only=True, slots=True)
class Op:
    name: str
    dur_us: float
    stream: str = "compute"
    cat: str = "kernel"  # or gpu_memcpy / gpu_memset
    gap_before_us: float = 0.0  # GPU idle before this op starts
    late_launch: bool = False  # launch call made after the GPU went idle (host-bound gap)
    overlap: bool = False  # runs beside the following compute ops instead of before them
    collective: str | None = None
    nelems: int = 1 << 20


@dataclass(kw_only=True, slots=True)
class Scenario:
    name: str
    step_ops: list[Op]
    steps: int = 4
    rank: int = 0
    world_size: int = 8
    device_name: str = "NVIDIA H100 80GB HBM3"
    device_memory_bytes: int = 85_520_809_984
    compute_capability: tuple[int, int] = (9, 0)
    peak_reserved_bytes: float | None = None
    cpu_noise: int = 0  # extra cpu_op events per GPU op, to make realistic file sizes
    first_step: int = 10
    wait_us: dict[int, float] = field(default_factory=dict)  # op index -> extra duration (peer wait)

    def step_us(self) -> float:
        """GPU time of one step as built: serial ops and gaps (overlapped ops add nothing)."""
        return sum(op.gap_before_us + (0 if op.overlap else op.dur_us) for op in self.step_ops) + \
            sum(self.wait_us.values())


def _kernel(op: Op, start: float, dur: float, corr: int, rank: int, world: int) -> dict:
    args = {"External id": corr, "queued": 0, "device": 0, "context": 1, "stream": STREAMS[op.stream],
            "correlation": corr, "registers per thread": 128, "grid": [132, 1, 1], "block": [384, 1, 1]}
    if op.collective:
        args.update({"Collective name": op.collective, "In msg nelems": op.nelems, "Out msg nelems": op.nelems,
                     "Group size": world, "dtype": "BFloat16", "Process Group Name": "3"})
    return {"ph": "X", "cat": op.cat, "name": op.name, "pid": 0, "tid": STREAMS[op.stream],
            "ts": start, "dur": dur, "args": args}


def _launch(name: str, ts: float, corr: int) -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": PID, "ts": ts, "dur": 4.0,
            "args": {"External id": corr, "cbid": 211, "correlation": corr}}


def _noise(ts: float, corr: int, k: int) -> Iterator[dict]:
    for j in range(k):
        yield {"ph": "X", "cat": "cpu_op", "name": f"aten::op_{j}", "pid": PID, "tid": PID, "ts": ts - 3.0 - j,
               "dur": 2.0, "args": {"External id": corr, "Sequence number": corr, "Fwd thread id": 0,
                                    "Record function id": 0, "Input Dims": [[4096, 7168], [7168]],
                                    "Input type": ["c10::BFloat16", "c10::BFloat16"], "Ev Idx": j}}
        yield {"ph": "f", "id": corr * 8 + j, "pid": 0, "tid": 7, "ts": ts, "cat": "ac2g", "name": "ac2g", "bp": "e"}


def _step_events(sc: Scenario, t0: float, corr0: int) -> tuple[list[dict], float, int]:
    """GPU ops of one step from t0 with their launches; returns (events, step end, next correlation)."""
    events, now, corr = [], t0, corr0
    for i, op in enumerate(sc.step_ops):
        gap_start = now
        start = now + op.gap_before_us
        dur = op.dur_us + sc.wait_us.get(i, 0.0)
        # Host-bound: the launch call comes after the GPU went idle; otherwise it was queued early.
        launch = gap_start + 0.5 * op.gap_before_us if op.late_launch else gap_start - 5.0
        events.append(_launch("cudaMemcpyAsync" if op.cat != "kernel" else "cudaLaunchKernel", launch, corr))
        events.extend(_noise(launch, corr, sc.cpu_noise))
        events.append(_kernel(op, start, dur, corr, sc.rank, sc.world_size))
        corr += 1
        now = start if op.overlap else start + dur
    return events, now, corr


def events(sc: Scenario) -> Iterator[dict]:
    t, corr = 1_000_000.0, 1
    for s in range(sc.steps):
        evs, end, corr = _step_events(sc, t, corr)
        yield {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{sc.first_step + s}", "pid": PID,
               "tid": PID, "ts": t, "dur": end - t, "args": {"External id": corr}}
        yield from evs
        if sc.peak_reserved_bytes is not None:
            yield {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": PID, "tid": PID,
                   "ts": end, "args": {"Device Type": 1, "Device Id": 0, "Total Reserved": sc.peak_reserved_bytes,
                                       "Total Allocated": 0.8 * sc.peak_reserved_bytes, "Bytes": 1024}}
        t = end


def header(sc: Scenario) -> dict:
    major, minor = sc.compute_capability
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": sc.device_name, "totalGlobalMem": sc.device_memory_bytes,
                              "computeMajor": major, "computeMinor": minor, "numSms": 132}],
        "distributedInfo": {"backend": "nccl", "rank": sc.rank, "world_size": sc.world_size},
    }


def write_trace(sc: Scenario, path: str | Path) -> Path:
    """Write the scenario as a Kineto trace, streaming events (gzip when the name ends in .gz)."""
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as fh:
        head = json.dumps(header(sc))[:-1]
        fh.write(head + ', "traceEvents": [\n')
        for i, e in enumerate(events(sc)):
            fh.write(("" if i == 0 else ",\n") + json.dumps(e))
        fh.write('\n], "displayTimeUnit": "ms"}\n')
    return path


# ---- scenarios: each built so one wall dominates --------------------------------------------------

def _layer(attn=300.0, gemm=400.0, grouped=500.0, elementwise=60.0) -> list[Op]:
    return [Op(name=ATTENTION, dur_us=attn), Op(name=GEMM, dur_us=gemm), Op(name=ELEMENTWISE, dur_us=elementwise),
            Op(name=GROUPED_GEMM, dur_us=grouped)]


def compute_bound(**kw) -> Scenario:
    """Back-to-back compute; DP reduce-scatter / all-gather fully hidden under the GEMMs."""
    ops = [Op(name=NCCL_REDUCESCATTER, dur_us=300, stream="comm", overlap=True, collective="_reduce_scatter_base")]
    ops += _layer() * 4
    ops += [Op(name=NCCL_ALLGATHER, dur_us=200, stream="comm", overlap=True, collective="_allgather_base")]
    ops += _layer()
    return Scenario(name="compute_bound", step_ops=ops, **kw)


def alltoall_exposed(**kw) -> Scenario:
    """alltoall dispatcher: NCCL all-to-all-v serial with the expert GEMMs (30%+ of the step)."""
    a2a = Op(name=NCCL_SENDRECV, dur_us=450, stream="comm", collective="all_to_allv")
    ops = []
    for _ in range(4):
        ops += [Op(name=ATTENTION, dur_us=300), Op(name=GEMM, dur_us=200), a2a, Op(name=GROUPED_GEMM, dur_us=500), a2a]
    return Scenario(name="alltoall_exposed", step_ops=ops, **kw)


def deepep_rank_wait(**kw) -> Scenario:
    """flex+DeepEP: idle before each dispatch (host waits for peers' counts), exposed dispatch/combine."""
    ops = []
    for _ in range(4):
        ops += [Op(name=ATTENTION, dur_us=300), Op(name=GEMM, dur_us=200),
                Op(name=DEEPEP_DISPATCH, dur_us=250, stream="comm", gap_before_us=150, late_launch=True),
                Op(name=GROUPED_GEMM, dur_us=500), Op(name=DEEPEP_COMBINE, dur_us=250, stream="comm")]
    return Scenario(name="deepep_rank_wait", step_ops=ops, **kw)


def host_bound(**kw) -> Scenario:
    """Launch-bound: many short kernels, each launched after the GPU ran dry."""
    ops = []
    for _ in range(40):
        ops += [Op(name=GEMM, dur_us=20, gap_before_us=30, late_launch=True),
                Op(name=ELEMENTWISE, dur_us=5, gap_before_us=25, late_launch=True)]
    return Scenario(name="host_bound", step_ops=ops, **kw)


def memory_bound(**kw) -> Scenario:
    """Compute-looking trace whose allocator peaked at 96% of the GPU."""
    sc = compute_bound(**kw)
    sc.name, sc.peak_reserved_bytes = "memory_bound", 0.96 * sc.device_memory_bytes
    return sc


SCENARIOS = {f.__name__: f for f in (compute_bound, alltoall_exposed, deepep_rank_wait, host_bound, memory_bound)}
