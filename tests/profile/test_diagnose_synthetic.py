"""Each wall recognized on a synthetic trace built to show it; figures checked against construction."""

import json

import pytest

from moetune.profile import diagnose, read_trace
from moetune.profile.synthetic import (
    DEEPEP_DISPATCH,
    NCCL_SENDRECV,
    Op,
    Scenario,
    alltoall_exposed,
    compute_bound,
    deepep_rank_wait,
    events,
    header,
    host_bound,
    memory_bound,
    write_trace,
)


def run(sc, tmp_path, name="rank0.json.gz"):
    return diagnose([write_trace(sc, tmp_path / name)])


def built(sc, pred) -> float:
    """Seconds per step the scenario puts into ops matching pred (gaps and waits excluded)."""
    return sum(op.dur_us for op in sc.step_ops if pred(op)) * 1e-6


def test_compute_wall(tmp_path):
    sc = compute_bound()
    r = run(sc, tmp_path)
    assert r.dominant_wall == "compute"
    assert r.step_seconds == pytest.approx(sc.step_us() * 1e-6)
    assert r.exposed_communication_seconds == pytest.approx(0.0, abs=1e-12)  # all comm hidden under GEMMs
    assert r.breakdown["reducescatter"] == pytest.approx(built(sc, lambda op: "ReduceScatter" in op.name))
    assert r.breakdown["grouped_gemm"] == pytest.approx(built(sc, lambda op: "GroupProblemShape" in op.name))
    assert r.idle["seconds"] == pytest.approx(0.0, abs=1e-12)
    assert [rec.rule for rec in r.recommendations] == ["compute.fp8"]  # H100: grouped GEMM already on
    assert r.recommendations[0].overrides == {"mixed_precision": "bf16_with_fp8_subchannel_scaling_mixed"}


def test_communication_wall_from_exposed_nccl_alltoall(tmp_path):
    sc = alltoall_exposed()
    r = run(sc, tmp_path)
    a2a = built(sc, lambda op: op.name == NCCL_SENDRECV)
    assert r.breakdown["alltoall"] == pytest.approx(a2a)  # SendRecv kernels, but the collective is all_to_allv
    assert r.breakdown["sendrecv"] == 0.0
    assert r.exposed_communication_seconds == pytest.approx(a2a)
    assert r.dominant_wall == "communication"
    rules = {rec.rule: rec for rec in r.recommendations}
    assert rules["comm.dispatcher"].overrides == {"model.moe_token_dispatcher_type": "flex",
                                                  "model.moe_flex_dispatcher_backend": "deepep"}
    assert "comm.ep_overlap" in rules and "comm.deepep_sms" not in rules


@pytest.mark.parametrize(("device", "backend"), [("NVIDIA GB200", "hybridep"), ("NVIDIA GB300", "hybridep"),
                                                ("NVIDIA B200", "deepep")])
def test_hybridep_on_nvl72(tmp_path, device, backend):
    """The traced device's name names its catalog GPU, whose platform (specs/platform.py on_nvl72) picks the seeds'
    row: HybridEP on GB200/GB300 NVL72, DeepEP on B200 (seed 000 default mappings)."""
    r = run(alltoall_exposed(device_name=device, compute_capability=(10, 0)), tmp_path)
    dispatcher = next(rec for rec in r.recommendations if rec.rule == "comm.dispatcher")
    assert dispatcher.overrides["model.moe_flex_dispatcher_backend"] == backend


def test_deepep_rank_wait(tmp_path):
    sc = deepep_rank_wait()
    r = run(sc, tmp_path)
    assert r.breakdown["deepep"] == pytest.approx(built(sc, lambda op: "deep_ep" in op.name))
    waits = sum(op.gap_before_us for op in sc.step_ops if op.name == DEEPEP_DISPATCH) * 1e-6
    assert r.idle["rank_wait"] == pytest.approx(waits)
    assert r.idle["host_bound"] == pytest.approx(0.0, abs=1e-12)
    assert r.dominant_wall == "communication"
    rules = [rec.rule for rec in r.recommendations]
    assert "comm.deepep_sms" in rules and "comm.dispatcher" not in rules  # flex already runs


def test_host_overhead_wall(tmp_path):
    sc = host_bound()
    r = run(sc, tmp_path)
    gaps = sum(op.gap_before_us for op in sc.step_ops) * 1e-6
    assert r.idle["host_bound"] == pytest.approx(gaps)
    assert r.dominant_wall == "host_overhead"
    # the scenario shows no attention kernels and no experts: no Megatron graph scope applies until a config says
    assert "host.cuda_graphs" not in {rec.rule for rec in r.recommendations}
    moe = diagnose([tmp_path / "rank0.json.gz"], config={"model.num_moe_experts": 64})
    assert moe.recommendations[0].rule == "host.cuda_graphs"
    assert moe.recommendations[0].overrides["model.cuda_graph_scope"] == ["attn", "moe_router", "moe_preprocess"]


def test_queued_work_is_dependency_not_host(tmp_path):
    ops = [Op(name="gemm_a", dur_us=100), Op(name="gemm_b", dur_us=100, gap_before_us=400)]  # launched early
    r = run(Scenario(name="dependency", step_ops=ops), tmp_path)
    assert r.idle["dependency"] == pytest.approx(400e-6)
    assert r.idle["host_bound"] == 0.0


def test_a_nearly_full_gpu_is_memory_wall_only_with_its_signs(tmp_path):
    sc = memory_bound()
    r = run(sc, tmp_path)
    assert r.memory["fraction"] == pytest.approx(0.96)
    assert r.dominant_wall != "memory"  # 96% reserved with no OOM and no retries still fits (seeds/000 memory row)
    assert any("caching allocator" in line for line in r.evidence)
    full = diagnose([tmp_path / "rank0.json.gz"], config={"model.recompute_granularity": "full"})
    assert full.dominant_wall == "memory"  # fitting only with full recompute is the memory wall
    assert full.recommendations[0].rule == "mem.selective_recompute"
    assert full.facts["moe"] is True  # its grouped-GEMM kernels: the MoE set
    assert full.recommendations[0].overrides["model.recompute_modules"] == ["layernorm", "moe_act", "mlp"]
    dense = diagnose([tmp_path / "rank0.json.gz"], config={"model.recompute_granularity": "full",
                                                          "model.num_moe_experts": None})
    # no core_attn: under fused attention, the default, it frees nothing (check's rule fit.core_attn_fused_attention)
    assert dense.recommendations[0].overrides["model.recompute_modules"] == ["layernorm", "mlp"]


def test_two_ranks_imbalance_and_peer_wait(tmp_path):
    """Rank 0 waits 300 us per all-to-all for rank 1: its extra time shows up as comm_kernel_wait."""
    a2a_index = 2
    slow = alltoall_exposed(rank=1, world_size=2)
    fast = alltoall_exposed(rank=0, world_size=2, wait_us={a2a_index: 300.0})
    write_trace(fast, tmp_path / "trace_rank0.json.gz")
    write_trace(slow, tmp_path / "trace_rank1.json")  # a plain .json beside a .json.gz
    r = diagnose([tmp_path])
    assert r.ranks == 2 and r.world_size == 2
    per = {p["rank"]: p for p in r.per_rank}
    assert per[0]["idle"]["comm_kernel_wait"] == pytest.approx(300e-6)
    assert per[1]["idle"]["comm_kernel_wait"] == pytest.approx(0.0, abs=1e-12)
    assert per[0]["seconds"] - per[1]["seconds"] == pytest.approx(300e-6)
    assert r.imbalance["slowest_rank"] in (0, 1) and r.imbalance["max_over_mean"] == pytest.approx(1.0)
    # the evidence line keeps its figure with two ranks (it had kept only its tail, "instance of the same transfer")
    wait = next(line for line in r.evidence if "beyond the fastest" in line)
    assert wait.startswith("communication kernels ran ") and wait.endswith("(waiting on slower peers)")


def test_trace_without_profiler_steps_is_one_window(tmp_path):
    sc = compute_bound(steps=1)
    evs = [e for e in events(sc) if not e.get("name", "").startswith("ProfilerStep")]
    path = tmp_path / "nostep.json"
    path.write_text(json.dumps({**header(sc), "traceEvents": evs}))
    r = diagnose([path])
    assert r.step_seconds == pytest.approx(sc.step_us() * 1e-6)
    assert any("no ProfilerStep" in n for n in r.notes)


def test_bare_event_array_and_rank_from_file_name(tmp_path):
    sc = compute_bound(steps=2)
    path = tmp_path / "worker_rank3.json"
    path.write_text(json.dumps(list(events(sc))))
    trace = read_trace(path)
    assert trace.rank == 3 and trace.device_name is None
    assert len(trace.steps) == 2 and len(trace.ops) == 2 * len(sc.step_ops)


def test_config_filters_recommendations(tmp_path):
    path = write_trace(alltoall_exposed(), tmp_path / "r.json.gz")
    untailored = {rec.rule for rec in diagnose([path]).recommendations}
    assert {"comm.dispatcher", "comm.ep_overlap"} <= untailored
    config = {"model.moe_token_dispatcher_type": "flex", "model.expert_model_parallel_size": 1}
    tailored = {rec.rule for rec in diagnose([path], config=config).recommendations}
    assert "comm.dispatcher" not in tailored and "comm.ep_overlap" not in tailored


def test_no_deepep_advice_off_hopper_and_blackwell(tmp_path):
    """seeds/000 maps DeepEP to H100/B200-style systems; on an A100 the alltoall dispatcher stays (no variant)."""
    r = run(alltoall_exposed(device_name="NVIDIA A100-SXM4-80GB", compute_capability=(8, 0)), tmp_path)
    assert r.dominant_wall == "communication"
    assert "comm.dispatcher" not in {rec.rule for rec in r.recommendations}


def test_too_few_steps_are_named_as_possibly_warm_up(tmp_path):
    """Two profiled steps: both are averaged, the first of which ran on an empty launch queue; diagnose says so."""
    sc = compute_bound()
    sc.steps = 2
    r = run(sc, tmp_path)
    assert any("only 2 profiled step(s)" in n for n in r.notes)
    assert not any("profiled step(s)" in n for n in run(compute_bound(), tmp_path, "four.json.gz").notes)
