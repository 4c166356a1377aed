"""The weights Transformer Engine holds in FP8 are its GEMM weights alone: TE quantizes the `weight` of its Linear,
LayerNormLinear and GroupedLinear modules (TE v2.12 module/base.py:1266-1268 reset_parameters, only parameters
registered with an fp8_meta_index: linear.py:1269-1274, grouped_linear.py:674-686; biases and a LayerNormLinear's norm
without one), and Megatron-Core's router weight is a plain parameter multiplied by torch.mm (moe/router.py:53-54,
moe_utils.py:1196 @core_v0.16.0). Hand counts from Qwen3-30B-A3B's config.json at TP2 PP2 EP4 (16 GPUs)."""

import json
import math

import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.batch_bytes import batch_memory
from moetune.walls.batch_layouts import build_batch
from moetune.walls.overheads import default_overheads
from moetune.walls.rank_params import stage_params

MODEL = "qwen3-30b-a3b"
LAYOUT = Layout(world_size=16, tp=2, pp=2, ep=4)
TP, PP, EP = 2, 2, 4
WL = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=64)


@pytest.fixture(scope="module")
def hand(shared_data) -> dict:
    """One rank's elements on each of the two stages, by hand from config.json: Megatron's linear_qkv [h, q + 2 kv]
    and linear_proj [q, h] split over TP; the routed experts' fc1 (gated: 2 x moe_ffn) and fc2 over EP; the router
    [experts, h], the input and pre-MLP RMSNorms [h] and the per-head q/k norms [head_dim] whole on every rank; the
    final norm and the output layer on the last stage, the embedding on the first (vocabulary padded to 128 x TP)."""
    c = json.loads((shared_data / "models" / f"{MODEL}.config.json").read_text())
    h, d, experts = c["hidden_size"], c["head_dim"], c["num_experts"]
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    attention = (h * (q + 2 * kv) + q * h) // TP
    routed = experts // EP * (h * 2 * c["moe_intermediate_size"] + c["moe_intermediate_size"] * h)
    layers = c["num_hidden_layers"] // PP
    router, norms = experts * h, 2 * h + 2 * d
    vocab = -(-c["vocab_size"] // (128 * TP)) * 128 * TP // TP * h
    gemm = layers * (attention + routed)
    kept_bf16 = [layers * (router + norms) + vocab, layers * (router + norms) + h + vocab]
    return {"gemm": gemm, "bf16": kept_bf16, "total": [gemm + k for k in kept_bf16]}


def _stage_items(precision: str, gpu: str = "h100", **knobs) -> list[dict]:
    e = estimate(load_model(MODEL), load_gpu(gpu), LAYOUT, WL, Knobs(precision=precision, **knobs))
    return [s.items for s in e.stages]


def test_the_quantized_count_is_the_gemm_weights(hand):
    assert [p.quantized for p in stage_params(load_model(MODEL), LAYOUT)] == [hand["gemm"]] * PP
    assert [p.total for p in stage_params(load_model(MODEL), LAYOUT)] == hand["total"]


def test_the_blockwise_cache_holds_the_gemm_weights_alone(hand):
    """fp8-blockwise (no FP8 parameters by Bridge's preset): a 1-byte row-wise and a 1-byte column-wise copy of each
    GEMM weight plus an FP32 scale per 128x128 block each way, beside the BF16 weights of every parameter."""
    per_weight = 2 + 2 * 4 / 128**2
    for items, total in zip(_stage_items("fp8-blockwise"), hand["total"], strict=True):
        assert items["fp8_weight_cache"] == round(per_weight * hand["gemm"])
        assert items["weights"] == 2 * total


def test_fp8_parameters_keep_the_norms_router_and_vocabulary_in_bf16(hand):
    """fp8-current with FP8 parameters on H100: each GEMM weight is its FP8 data and transpose (2 B), and only the
    parameters no TE GEMM reads keep a BF16 copy."""
    for items, kept in zip(_stage_items("fp8-current", fp8_param_gather=True), hand["bf16"], strict=True):
        assert items["fp8_weights"] == 2 * hand["gemm"]
        assert items["weights"] == 2 * kept


def test_bf16_weights_are_every_parameter_at_two_bytes(hand):
    for items, total in zip(_stage_items("bf16"), hand["total"], strict=True):
        assert items["weights"] == 2 * total
        assert "fp8_weight_cache" not in items and "fp8_weights" not in items


CASES = [  # gpt-oss: linear and expert biases, the router's bias; qwen3-next: a shared expert's gate, the GDN's
    # conv1d/A_log/dt_bias; deepseek-v3: MLA's latent norms and an MTP layer
    ("gpt-oss-20b", Layout(world_size=16, tp=2, pp=2, vpp=2, ep=4)),
    ("qwen3-next-80b-a3b", Layout(world_size=64, tp=4, pp=2, vpp=2, ep=32)),
    ("deepseek-v3", Layout(world_size=64, tp=2, pp=4, ep=8, first_stage_layers=13, last_stage_layers=18)),
]
KNOBS = [dict(precision="fp8-blockwise"), dict(precision="fp8-current", fp8_param_gather=True),
         dict(precision="mxfp8"), dict(precision="nvfp4", fp4_param_gather=True),
         dict(precision="fp8-current", fp8_param_gather=True, megatron_fsdp="optim_grads_params")]


@pytest.mark.parametrize(("model", "layout"), CASES, ids=[m for m, _ in CASES])
@pytest.mark.parametrize("knobs", KNOBS, ids=lambda k: "-".join(str(v) for v in k.values()))
def test_the_planner_batch_weighs_the_quantized_weights_as_estimate(model, layout, knobs):
    spec, gpu = load_model(model), load_gpu("b200" if knobs["precision"] in ("mxfp8", "nvfp4") else "h100")
    k = Knobs(**knobs)
    e = estimate(spec, gpu, layout, WL, k)
    peak = batch_memory(spec, build_batch(spec, [(layout, 1)]), WL.seq_length, WL.global_batch_size, k,
                        default_overheads(), arch=e.gpu.arch)[0]
    assert float(peak) == pytest.approx(e.peak_bytes, rel=1e-9)
    held = [s.items.get("fp8_weights", s.items.get("fp8_weight_cache")) for s in e.stages]
    assert all(math.isfinite(x) and x > 0 for x in held)
