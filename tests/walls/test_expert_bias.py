"""Biased experts (gpt-oss) add the fc2 bias outside the GEMM, scaled by each routed row's probability (Megatron-Core
moe/experts.py TEGroupedMLP._apply_bias), and DeepEP / HybridEP hand the experts FP32 probabilities
(moe/token_dispatcher.py "only supports float32 probs"): the pass is charged its bytes at the elementwise HBM rate
(walls/compute.py expert_bias_seconds), 28 bytes an output element with BF16 probabilities, 68 with FP32."""

import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.efficiency import efficiency


def _by_class(model="gpt-oss-120b", dispatcher="hybridep", recompute="none", modules=()):
    knobs = Knobs(precision="bf16", dispatcher=dispatcher, routing="force-balance", recompute=recompute,
                  recompute_modules=frozenset(modules))
    e = estimate(load_model(model), load_gpu("b200"), Layout(world_size=8, ep=8),
                 Workload(seq_length=4096, micro_batch_size=4, global_batch_size=32), knobs)
    assert e.time["num_microbatches"] == 1
    return e.time["compute_by_class"]


def test_hybridep_fp32_probabilities_cost_the_bytes_of_the_bias_pass():
    """36 MoE layers, 4 x 4096 tokens a rank each routed to 4 experts, hidden 2880 (gpt-oss-120b's config.json)."""
    hbm = load_gpu("b200").hbm_tbps * 1e12 * efficiency("b200")["mem_eff"]
    expected = 36 * (4 * 4096 * 4) * 2880 * (28 + 40) / hbm
    assert _by_class()["expert_bias"] == pytest.approx(expected, rel=1e-9)


def test_bf16_probabilities_of_the_alltoall_dispatcher_move_fewer_bytes():
    assert _by_class(dispatcher="alltoall")["expert_bias"] / _by_class()["expert_bias"] == pytest.approx(28 / 68)


def test_recomputing_the_experts_replays_the_forward_pass():
    replayed = _by_class(recompute="selective", modules=("moe",))["expert_bias"]
    assert replayed / _by_class()["expert_bias"] == pytest.approx((2 * 28 + 40) / 68)


def test_unbiased_experts_have_no_bias_pass():
    assert "expert_bias" not in _by_class(model="qwen3-30b-a3b")
