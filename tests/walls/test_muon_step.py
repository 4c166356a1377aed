"""Muon's Newton-Schulz GEMMs in the optimizer step (walls/muon.py): Kimi-K2's Bridge recipes run dist_muon, whose
step had been timed as Adam's memory-bound update alone.

Every expected value here is worked by hand from the model's config.json and the shipped constants (hardware.toml,
efficiency.toml: inputs, not results), after Megatron-Core's Muon (Megatron-LM mirror):
- which parameters Muon steps: 2-D ones not tagged is_embedding_or_output_parameter; the rest go to Adam
  (optimizer/muon.py:252-258 @core_v0.16.1; emerging_optimizers.py:128-130 _is_nonlinear_or_embedding @core_v0.18.2);
- how often: muon_num_ns_steps = 5 quintic iterations (optimizer_config.py:279 @core_v0.18.2), each on a x b (a the
  smaller side) X Xᵀ (2a²b FLOPs), its square (2a³) and that times X (2a²b);
- which matrices: a GQA layer's fused linear_qkv split per query group into q, k and v (muon_split_qkv on,
  optimizer_config.py:263; emerging_optimizers.py:133-140 split shapes, :252-266 the split; MLA's projections are
  not linear_qkv and stay whole, muon.py:248-250 @core_v0.16.1); Bridge's blockwise TP mode orthogonalizes a rank's
  own shard (muon_tp_mode "blockwise", optimizer_config.py:282; emerging_optimizers.py:248);
- where: the layer-wise optimizer hands whole parameters to the DP x CP ranks (dense) and the EDP ranks (experts),
  layer_wise_optimizer.py:104-111 @core_v0.16.1.
"""

import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.muon import ns_flops_per_param

KIMI = load_model("kimi-k2")
QWEN = load_model("qwen3-30b-a3b")
STEPS = 5  # muon_num_ns_steps


def _ns(rows, cols):
    """One quintic Newton-Schulz iteration's FLOPs on a rows x cols matrix."""
    a, b = min(rows, cols), max(rows, cols)
    return 4 * a * a * b + 2 * a ** 3


def _flops(mats):
    return STEPS * sum(_ns(r, c) for r, c in mats)


def _numel(mats):
    return sum(r * c for r, c in mats)


# Kimi-K2 (src/moetune/data/models/kimi-k2.config.json): hidden 7,168, 61 layers (the first dense, first_k_dense_replace
# 1), 64 heads, q_lora_rank 1,536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128, 384 routed experts and one
# shared expert of width 2,048, dense FFN 18,432. (out, in) of each 2-D weight, MLA's after multi_latent_attention.py
# @core_v0.18.2: linear_q_down_proj :533-536, linear_q_up_proj :553-556 (heads x (128 + 64)), linear_kv_down_proj
# :580-583 (512 + 64), linear_kv_up_proj :600-603 (heads x (128 + 128)), linear_proj :221 (heads x 128 -> hidden)
H = 7168
MLA = [(1536, H), (64 * 192, 1536), (512 + 64, H), (64 * 256, 512), (H, 64 * 128)]
DENSE_MLP = [(2 * 18432, H), (H, 18432)]  # layer 0's gated fc1 (gate and up, one matrix) and fc2
MOE_DENSE = [(384, H), (2 * 2048, H), (H, 2048)]  # a MoE layer's router and shared expert fc1, fc2
EXPERT = [(2 * 2048, H), (H, 2048)]  # one routed expert's fc1, fc2 (TE GroupedLinear keeps a weight per expert)
KIMI_MOE_LAYER = MLA + MOE_DENSE  # the dense 2-D weights of one MoE layer
# moetune charges a dense parameter the model's average work (walls/muon.py ns_flops_per_param: a stage's mix of
# layer kinds is the model's, near enough): 61 MLAs, one dense MLP and 60 routers and shared experts
KIMI_DENSE_PER_PARAM = ((61 * _flops(MLA) + _flops(DENSE_MLP) + 60 * _flops(MOE_DENSE))
                        / (61 * _numel(MLA) + _numel(DENSE_MLP) + 60 * _numel(MOE_DENSE)))
KIMI_EXPERT_PER_PARAM = _flops(EXPERT) / _numel(EXPERT)


def test_an_expert_costs_five_quintic_iterations_on_each_of_its_matrices():
    """fc1 4,096 x 7,168: 4 x 4,096² x 7,168 + 2 x 4,096³ = 618.5 GFLOPs an iteration; fc2 2,048 x 7,168: 137.4."""
    assert _ns(4096, H) == 618_475_290_624 and _ns(H, 2048) == 137_438_953_472
    per_param = 5 * (618_475_290_624 + 137_438_953_472) / (3 * 2048 * H)
    assert per_param == pytest.approx(KIMI_EXPERT_PER_PARAM, rel=1e-15)
    assert ns_flops_per_param(KIMI, 1, 1) == pytest.approx((KIMI_DENSE_PER_PARAM, per_param), rel=1e-12)


# Qwen3-30B-A3B (qwen3-30b-a3b.config.json): hidden 2,048, 32 heads of 128 in 4 query groups, 128 experts of width
# 768, every layer MoE, no shared expert. A TP rank holds 32/TP heads and 4/TP groups of the fused QKV, which Muon
# splits into q (heads a group x 128 rows a group), k and v (128 a group); linear_proj its 32/TP x 128 input columns;
# the router is whole on every rank; TP leaves the experts (ETP 1) whole.
def _qwen_dense(tp):
    q, kv = 32 // tp * 128, 4 // tp * 128
    return [(q, 2048), (kv, 2048), (kv, 2048), (2048, q), (128, 2048)]


QWEN_EXPERT = [(2 * 768, 2048), (2048, 768)]


@pytest.mark.parametrize("tp", [1, 4])
def test_blockwise_tensor_parallelism_shrinks_the_dense_matrices_only(tp):
    """At TP 1: q 4,096 x 2,048, k and v 512 x 2,048, the output 2,048 x 4,096, the router 128 x 2,048; at TP 4 a
    quarter of each but the router's. The experts' per-parameter work is the same at either."""
    dense = _qwen_dense(tp)
    want = (_flops(dense) / _numel(dense), _flops(QWEN_EXPERT) / _numel(QWEN_EXPERT))
    assert ns_flops_per_param(QWEN, tp, 1) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("ep", [64, 16])
def test_muon_steps_cost_the_newton_schulz_work_shared_over_expert_data_parallel_ranks(ep):
    """The largest stage (t*16L: 16 MoE layers, the output layer and final norm on Adam either way) at TP 1: this rank
    steps 1/64 of its dense 2-D weights (DP x CP 64) and 1/EDP of its 16 x 384/EP experts (EDP = 256 / (4 x EP)),
    Newton-Schulz at the BF16 GEMM rate; against Adam its update also reads and writes one FP32 moment a 2-D weight
    fewer (8 bytes) at the HBM rate. The rest of the two steps (vocabulary, norms, gradients, the MXFP8 weights
    written) is the same. About 0.25 s either way: EP 16 holds 4x the experts of EP 64 and shares them over 4 EDP."""
    gpu, wl = load_gpu("gb300"), Workload(seq_length=4096, global_batch_size=4096)
    lay = Layout(world_size=256, pp=4, ep=ep, pipeline_layout="Et*15|t*15|t*15|t*16L")
    adam = estimate(KIMI, gpu, lay, wl, Knobs(precision="mxfp8"))
    muon = estimate(KIMI, gpu, lay, wl, Knobs(precision="mxfp8", optimizer="muon"))
    extra = muon.time["compute_by_class"]["optimizer_step"] - adam.time["compute_by_class"]["optimizer_step"]
    dense = 16 * _numel(KIMI_MOE_LAYER) / 64
    experts = 16 * (384 // ep) * _numel(EXPERT) / (256 // (4 * ep))
    constants = muon.efficiency  # the named efficiency constants the estimate ran under (inputs, not results)
    newton_schulz = ((KIMI_DENSE_PER_PARAM * dense + KIMI_EXPERT_PER_PARAM * experts)
                     / (gpu.bf16_tflops * 1e12 * constants["gemm_eff"]))
    one_moment_fewer = 8 * (dense + experts) / (gpu.hbm_tbps * 1e12 * constants["mem_eff"])
    assert extra == pytest.approx(newton_schulz - one_moment_fewer, rel=1e-9)
    assert 0.24 < extra < 0.26


def test_the_layer_wise_optimizer_all_reduces_gradients_and_gathers_parameters_unhidden():
    """dist_muon keeps DDP's own distributed optimizer off: DDP all-reduces the FP32 gradients (a reduce-scatter and
    an all-gather, twice a reduce-scatter's traffic) and the layer-wise optimizer all-gathers the BF16 weights each
    rank stepped (layer_wise_optimizer.py @core_v0.16.1), with no bucketed overlap of that gather (review). By hand on
    64 H100 at EP 8: the dense ring over DP 64 and the expert ring over EDP 8 (ranks 8 apart) both leave the 8-GPU
    NVLink domain, so each runs on the NIC (400 Gb/s at nic_eff); a ring moves (n - 1) / n of the tensor."""
    from moetune.walls.efficiency import efficiency
    from moetune.walls.iteration import iteration_terms
    gpu, lay, eff = load_gpu("h100"), Layout(world_size=64, ep=8), efficiency("h100")
    adam = Knobs()
    muon = Knobs(optimizer="muon")
    (rs_a, ag_a, *_), _, _ = iteration_terms(KIMI, 1e9, 4e9, 1e8, lay, adam, gpu, eff)
    (rs_m, ag_m, *_), _, _ = iteration_terms(KIMI, 1e9, 4e9, 1e8, lay, muon, gpu, eff)
    nic = 400 / 8 * 1e9 * eff["nic_eff"]
    def ring(nbytes_a_param):  # 1e9 dense parameters over 64 ranks and 4e9 expert ones over 8
        return (63 / 64 * 1e9 + 7 / 8 * 4e9) * nbytes_a_param / nic
    assert rs_a == pytest.approx(ring(4), rel=1e-12) and rs_m == pytest.approx(2 * ring(4), rel=1e-12)
    assert ag_a == pytest.approx(ring(2), rel=1e-12) and ag_m == pytest.approx(ring(2), rel=1e-12)
    assert adam.overlap_param_gather and not muon.overlap_param_gather


def test_the_non_2d_parameters_step_on_adam_without_newton_schulz():
    """Megatron's Muon hands the parameters it does not build 2-D (norms, biases) to Adam: each holds Adam's 12 bytes,
    read and written, where Muon's 2-D weights hold 8, its BF16 weight written either way, and no Newton-Schulz GEMM
    runs on it, which a dense 2-D weight would have cost KIMI_DENSE_PER_PARAM FLOPs at the BF16 GEMM rate."""
    from moetune.walls.efficiency import efficiency
    from moetune.walls.iteration import iteration_terms
    gpu, lay, eff = load_gpu("h100"), Layout(world_size=64, ep=8), efficiency("h100")
    knobs = Knobs(optimizer="muon", precision="bf16")
    base = iteration_terms(KIMI, 1e9, 4e9, 1e8, lay, knobs, gpu, eff)[1]
    norms = iteration_terms(KIMI, 1e9, 4e9, 1e8, lay, knobs, gpu, eff, nonmatrix=(8e6, 0))[1]
    n = 8e6 / 64  # this rank's shard of them (DP x CP 64)
    moved = 2 * (12 - 8) * n / (gpu.hbm_tbps * 1e12 * eff["mem_eff"])
    newton_schulz = KIMI_DENSE_PER_PARAM * n / (gpu.bf16_tflops * 1e12 * eff["gemm_eff"])
    assert norms - base == pytest.approx(moved - newton_schulz, rel=1e-9)


def test_the_planner_searches_muon_without_an_offload_pin():
    from moetune.planner.search import plan
    result = plan(QWEN, load_gpu("h100"), 16, Workload(seq_length=4096, global_batch_size=512),
                  fixed={"optimizer": "muon"}, top=1)
    assert result.results and result.results[0].knobs.optimizer == "muon"
