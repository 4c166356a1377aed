"""diagnose on the real GPU traces in ../shared/data/traces, checked against the raw-JSON oracle."""

import pytest

from moetune.profile import diagnose, read_trace

ALLREDUCE = "a100_2rank_allreduce.json.gz"
SENDRECV = "a100_16rank_sendrecv_rank0.json.gz"
COMPUTE = "v100_1rank_compute.json.gz"
ALL = (ALLREDUCE, SENDRECV, COMPUTE)


C10D = {"alltoall": "alltoall", "reduce_scatter": "reducescatter", "allreduce": "allreduce",
        "allgather": "allgather"}


def name_class(e: dict, c10d: dict[int, str]) -> str:
    """Class by plain string tests on the kernel name, or on the c10d op that launched an NCCL kernel."""
    name, low = e["name"], e["name"].lower()
    if e["cat"] != "kernel":
        return "memcpy"
    op = c10d.get(e["args"].get("correlation"))
    if op is not None:
        return next(cls for key, cls in C10D.items() if key in op)
    for prefix, cls in (("ncclKernel_AllReduce", "allreduce"), ("ncclKernel_SendRecv", "sendrecv"),
                        ("ncclKernel_Broadcast", "other_comm")):
        if name.startswith(prefix):
            return cls
    # GEMMs, and convolutions, which cuDNN runs as implicit GEMMs (the V100 trace's ResNet)
    conv = ("scudnn", "winograd", "dgrad_engine", "wgrad_alg", "convolve", "fprop_optimized", "dgrad_optimized",
            "wgrad_optimized")
    if any(key in low for key in ("gemm", "cublas", *conv)):
        return "gemm"
    return "other"


@pytest.fixture(scope="module")
def results(traces_dir):
    return {name: diagnose([traces_dir / name]) for name in ALL}


@pytest.mark.parametrize("name", ALL)
def test_every_kernel_class_of_one_iteration(name, results, traces_dir, oracle):
    doc = oracle.load(traces_dir / name)
    steps = oracle.steps(doc)
    step_name, lo, hi = steps[2]
    ours = next(s for s in results[name].per_rank[0]["steps"] if s["name"] == step_name)
    events, c10d = oracle.gpu_events(doc), oracle.launching_c10d_op(doc)
    classes = {name_class(e, c10d) for e in events}
    for cls in classes:
        expected = oracle.clipped_sum([e for e in events if name_class(e, c10d) == cls], lo, hi)
        assert ours["breakdown"][cls] == pytest.approx(expected, rel=1e-9, abs=1e-12), cls
    assert all(ours["breakdown"][c] == 0 for c in ours["breakdown"] if c not in classes)
    assert ours["seconds"] == pytest.approx((hi - lo) * 1e-6)


@pytest.mark.parametrize("name", ALL)
def test_busy_idle_and_exposed_communication(name, results, traces_dir, oracle):
    doc = oracle.load(traces_dir / name)
    events = oracle.gpu_events(doc)
    comm = [e for e in events if e["name"].startswith("nccl")]
    compute = [e for e in events if e["cat"] == "kernel" and not e["name"].startswith("nccl")]
    for (step_name, lo, hi), ours in zip(oracle.steps(doc), results[name].per_rank[0]["steps"]):
        assert ours["name"] == step_name
        busy = oracle.covered(events, lo, hi)
        assert ours["busy_seconds"] == pytest.approx(busy, rel=1e-9)
        idle_parts = sum(v for k, v in ours["idle"].items() if k not in ("seconds", "comm_kernel_wait"))
        assert idle_parts == pytest.approx((hi - lo) * 1e-6 - busy, rel=1e-6, abs=1e-9)
        assert ours["exposed_communication_seconds"] == pytest.approx(oracle.exposed(comm, compute, lo, hi),
                                                                      rel=1e-9, abs=1e-12)


def test_host_bound_gaps_follow_launch_times(results, traces_dir, oracle):
    """Gaps ended by a compute kernel launched after the GPU went idle are host-bound (HTA's HOST_WAIT)."""
    doc = oracle.load(traces_dir / ALLREDUCE)
    launches = {e["args"]["correlation"]: e["ts"] for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"}
    events = sorted(oracle.gpu_events(doc), key=lambda e: e["ts"])
    _, lo, hi = oracle.steps(doc)[1]
    host, frontier = 0.0, events[0]["ts"]
    for e in events:  # walk the GPU timeline; a kernel starting past the frontier ends a gap
        if e["ts"] > frontier and not e["name"].startswith("nccl"):
            launch = launches.get(e["args"].get("correlation"))
            if launch is not None and launch >= frontier:
                host += max(0.0, min(e["ts"], hi) - max(frontier, lo))
        frontier = max(frontier, e["ts"] + e["dur"])
    ours = results[ALLREDUCE].per_rank[0]["steps"][1]["idle"]["host_bound"]
    assert ours == pytest.approx(host * 1e-6, rel=1e-6)


@pytest.mark.parametrize("name", ALL)
def test_step_time_is_the_steady_profiler_step_mean(name, results, traces_dir, oracle):
    """Steady steps: after the first, those within 10% of the median ProfilerStep window (the leading short ones are
    the CPU marking steps ahead of a filling launch queue)."""
    steps = oracle.steps(oracle.load(traces_dir / name))
    lengths = [hi - lo for _, lo, hi in steps]
    median = sorted(lengths)[len(lengths) // 2]
    steady = [d for d in lengths[1:] if d >= 0.9 * median] if len(steps) >= 3 else lengths
    assert results[name].step_seconds == pytest.approx(sum(steady) / len(steady) * 1e-6, rel=1e-9)


def test_v100_warmup_windows_are_left_out(results, traces_dir, oracle):
    """The V100 trace's first two windows (35 and 72 ms) are warm-up; the three after measure one 95.6-95.7 ms
    step, which is what the GPU's own kernels span: their first-to-last time over the five iterations profiled."""
    doc = oracle.load(traces_dir / "v100_1rank_compute.json.gz")
    lengths = [(hi - lo) * 1e-3 for _, lo, hi in oracle.steps(doc)]
    assert lengths[0] < 40 and lengths[1] < 80 and all(95 < d < 96.5 for d in lengths[2:])
    events = oracle.gpu_events(doc)
    span = (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) * 1e-6
    assert results["v100_1rank_compute.json.gz"].step_seconds == pytest.approx(span / len(lengths), rel=0.01)


@pytest.mark.parametrize("name, rank, world, gib", [(ALLREDUCE, 0, 2, 39.4), (SENDRECV, 0, 16, 79.2),
                                                    (COMPUTE, 0, 1, 31.7)])
def test_rank_and_device_from_trace_header(name, rank, world, gib, traces_dir):
    trace = read_trace(traces_dir / name)
    assert (trace.rank, trace.world_size) == (rank, world)
    assert trace.device_memory_bytes / 2**30 == pytest.approx(gib, abs=0.05)


def test_sendrecv_kernels_named_by_their_c10d_op(results, traces_dir, oracle):
    """The 16-rank trace's NCCL kernels are all SendRecv by name; the c10d ops say what they were."""
    c10d = oracle.launching_c10d_op(oracle.load(traces_dir / SENDRECV))
    assert {op.split("::")[1] for op in c10d.values()} == {"alltoall_base_", "_reduce_scatter_base_", "allreduce_",
                                                           "_allgather_base_"}
    r = results[SENDRECV]
    assert any(f"{len(c10d)} NCCL kernel(s) named" in n for n in r.notes)
    assert r.breakdown["alltoall"] > 0 and r.breakdown["allreduce"] > r.breakdown["alltoall"]


@pytest.mark.parametrize("name, wall", [(COMPUTE, "compute"), (ALLREDUCE, "host_overhead"),
                                        (SENDRECV, "communication")])
def test_dominant_wall_on_real_traces(name, wall, results):
    r = results[name]
    assert r.dominant_wall == wall
    assert r.evidence and all(rec.wall == wall for rec in r.recommendations)
    # the V100 and 2-rank A100 traces are convolutional models (cuDNN kernels, no attention, no experts): the
    # Megatron fusions and transformer CUDA-graph scopes do not apply to them, so none is advised
    advised = {rec.rule for rec in r.recommendations}
    if name in (COMPUTE, ALLREDUCE):
        assert r.breakdown["attention"] == 0 and "moe" not in r.facts
        assert not advised & {"compute.fusions", "host.cuda_graphs", "compute.grouped_gemm"}
    else:
        assert advised


def test_ampere_gets_no_fp8_advice(results):
    """FP8 needs compute capability 8.9+: the table's arch variants drop it on A100 and V100."""
    for r in results.values():
        assert not any("fp8" in c for rec in r.recommendations for c in rec.change)


def test_one_rank_of_many_says_what_it_cannot_show(results):
    """Rank 0 of 16: imbalance across ranks cannot be read from one trace, and its communication wait may be its own
    slower iterations rather than peers."""
    r = results[SENDRECV]
    assert any(n.startswith("1 of 16 ranks profiled") for n in r.notes)


def test_idle_inside_cuda_graph_replays_is_named(results):
    """The 16-rank A100 trace replays torch.compile CUDA graphs (70 cudaGraphLaunch calls whose kernels carry their
    correlation): most of its idle time sits inside those replays, which is told apart from other queued work."""
    r = results[SENDRECV]
    assert r.idle["graph_replay"] > 0.5 * r.step_seconds > r.idle["dependency"]
    assert any("inside CUDA-graph replays" in line for line in r.evidence)
