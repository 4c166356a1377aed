"""Muon's Newton-Schulz GEMMs in the optimizer step (walls/muon.py): Kimi-K2's Bridge recipes run dist_muon, whose
step had been timed as Adam's memory-bound update alone."""

import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.muon import ns_flops_per_param

KIMI = load_model("kimi-k2")


def test_an_expert_costs_five_quintic_iterations_on_each_of_its_matrices():
    """By hand from Kimi-K2's config (hidden 7,168, expert width 2,048): fc1 is one 4,096 x 7,168 matrix (gate and up),
    fc2 2,048 x 7,168; an iteration on a x b (a <= b) is 4a^2 b + 2a^3 FLOPs."""
    fc1 = 4 * 4096**2 * 7168 + 2 * 4096**3
    fc2 = 4 * 2048**2 * 7168 + 2 * 2048**3
    per_param = 5 * (fc1 + fc2) / (4096 * 7168 + 2048 * 7168)
    assert ns_flops_per_param(KIMI, 1, 1)[1] == pytest.approx(per_param, rel=1e-12)


def test_blockwise_tensor_parallelism_shrinks_the_dense_matrices_only():
    qwen = load_model("qwen3-30b-a3b")
    dense1, expert1 = ns_flops_per_param(qwen, 1, 1)
    dense4, expert4 = ns_flops_per_param(qwen, 4, 1)
    assert dense4 < dense1 / 1.5 and expert4 == expert1


@pytest.mark.parametrize("ep", [64, 16])
def test_muon_steps_cost_the_newton_schulz_work_shared_over_expert_data_parallel_ranks(ep):
    gpu, wl = load_gpu("gb300"), Workload(seq_length=4096, global_batch_size=4096)
    lay = Layout(world_size=256, pp=4, ep=ep, pipeline_layout="Et*15|t*15|t*15|t*16L")
    adam = estimate(KIMI, gpu, lay, wl, Knobs(precision="mxfp8"))
    muon = estimate(KIMI, gpu, lay, wl, Knobs(precision="mxfp8", optimizer="muon"))
    extra = muon.time["compute_by_class"]["optimizer_step"] - adam.time["compute_by_class"]["optimizer_step"]
    # the largest stage's local experts (16 layers of 384 / EP experts, three 2,048 x 7,168 matrices each) at about
    # 86k FLOPs a parameter over EDP ranks, at the BF16 GEMM rate: a tenth to a third of a second
    experts = 16 * 384 / ep * 3 * 2048 * 7168 / lay.edp
    rate = gpu.bf16_tflops * 1e12 * muon.efficiency["gemm_eff"]
    assert extra > 0.9 * experts * ns_flops_per_param(KIMI, 1, 1)[1] / rate
    assert 0.05 < extra < 0.5


def test_the_layer_wise_optimizer_all_reduces_gradients_and_gathers_parameters_unhidden():
    """dist_muon keeps DDP's own distributed optimizer off: DDP all-reduces the gradients (twice a reduce-scatter's
    traffic) and the layer-wise optimizer all-gathers what each rank stepped (Megatron-Core
    optimizer/layer_wise_optimizer.py), with no bucketed overlap of that gather (review)."""
    from moetune.walls.efficiency import efficiency
    from moetune.walls.iteration import iteration_terms
    gpu, lay = load_gpu("h100"), Layout(world_size=64, ep=8)
    adam = Knobs()
    muon = Knobs(optimizer="muon")
    (rs_a, ag_a, *_), _, _ = iteration_terms(KIMI, 1e9, 4e9, 1e8, lay, adam, gpu, efficiency("h100"))
    (rs_m, ag_m, *_), _, _ = iteration_terms(KIMI, 1e9, 4e9, 1e8, lay, muon, gpu, efficiency("h100"))
    assert rs_m == pytest.approx(2 * rs_a) and ag_m == pytest.approx(ag_a)
    assert adam.overlap_param_gather and not muon.overlap_param_gather


def test_the_non_2d_parameters_step_on_adam_without_newton_schulz():
    """Megatron's Muon hands the parameters it does not build 2-D (norms, biases) to Adam (optimizer/muon.py:252-258
    @core_v0.16.1): each holds Adam's 12 bytes, read and written, where Muon's 2-D weights hold 8, its BF16 weight
    written either way, and no Newton-Schulz GEMM runs on it."""
    from moetune.walls.efficiency import efficiency
    from moetune.walls.iteration import iteration_terms
    gpu, lay, eff = load_gpu("h100"), Layout(world_size=64, ep=8), efficiency("h100")
    knobs = Knobs(optimizer="muon", precision="bf16")
    base = iteration_terms(KIMI, 1e9, 4e9, 1e8, lay, knobs, gpu, eff)[1]
    norms = iteration_terms(KIMI, 1e9, 4e9, 1e8, lay, knobs, gpu, eff, nonmatrix=(8e6, 0))[1]
    n = 8e6 / (lay.dp * lay.cp)  # this rank's shard of them
    moved = 2 * (12 - 8) * n / (gpu.hbm_tbps * 1e12 * eff["mem_eff"])
    newton_schulz = ns_flops_per_param(KIMI, 1, 1)[0] * n / (gpu.bf16_tflops * 1e12 * eff["gemm_eff"])
    assert norms - base == pytest.approx(moved - newton_schulz, rel=1e-9)


def test_the_planner_searches_muon_without_an_offload_pin():
    from moetune.planner.search import plan
    result = plan(load_model("qwen3-30b-a3b"), load_gpu("h100"), 16, Workload(seq_length=4096, global_batch_size=512),
                  fixed={"optimizer": "muon"}, top=1)
    assert result.results and result.results[0].knobs.optimizer == "muon"
