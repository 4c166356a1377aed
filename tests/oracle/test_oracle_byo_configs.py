"""A user's own config.json, field by field: moetune's per-stage parameters equal Megatron-Core's (moetune.oracle)
for the fields whose reading had disagreed with the HF model, and the HF model's own choice is the one both make."""

import json
from pathlib import Path

import pytest

pytest.importorskip("megatron.core")

from moetune.layout.layout import Layout  # noqa: E402
from moetune.oracle import count_params_per_stage  # noqa: E402
from moetune.specs.hf_config import spec_from_hf  # noqa: E402
from moetune.walls.rank_params import padded_vocab_size, stage_params  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "specs" / "fixtures"  # sources in fixtures/SOURCES.md


def _both(hf: dict, **layout) -> tuple[list[int], list[int]]:
    spec, lay = spec_from_hf(hf, name="x", origin="x.json"), Layout(**layout)
    padded = padded_vocab_size(spec.vocab_size, lay.tp, spec.vocab_divisor)
    theirs = count_params_per_stage(hf, padded_vocab_size=padded, tp=lay.tp, pp=lay.pp, ep=lay.ep, etp=lay.etp,
                                    world_size=lay.world_size)
    return [s.total for s in stage_params(spec, lay, layer_spec="te")], theirs


def test_qwen3_moe_has_no_shared_expert():
    """Qwen3MoeSparseMoeBlock builds no shared expert: shared_expert_intermediate_size in a qwen3_moe config adds
    nothing (it had added 2.9B parameters to Qwen3-Coder-480B, which Megatron-Core does not build)."""
    hf = json.loads((FIXTURES / "Qwen--Qwen3-Coder-480B-A35B-Instruct.config.json").read_text())
    layout = dict(world_size=64, tp=2, pp=2, ep=32)
    ours, theirs = _both({**hf, "shared_expert_intermediate_size": 2560}, **layout)
    assert ours == theirs == _both(hf, **layout)[0]


def _builtin(name: str) -> dict:
    return json.loads((Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "models" /
                       f"{name}.config.json").read_text())


def test_mixtral_has_no_attention_biases():
    """HF MixtralAttention hard-codes bias=False: attention_bias true builds nothing in either count (moetune had
    added q/k/v and o_proj biases, the oracle q/k/v ones)."""
    hf, layout = _builtin("mixtral-8x22b"), dict(world_size=16, tp=2, pp=2, ep=4)
    ours, theirs = _both({**hf, "attention_bias": True}, **layout)
    assert ours == theirs == _both(hf, **layout)[1]


def test_glm_attention_bias_is_qkv_only():
    """Glm4MoeAttention biases q, k and v from attention_bias (o_proj none): Megatron's add_qkv_bias, both ways."""
    hf, layout = _builtin("glm-4.5-air"), dict(world_size=32, tp=2, pp=2, ep=16)
    with_bias, without = _both(hf, **layout), _both({**hf, "attention_bias": False}, **layout)
    assert with_bias[0] == with_bias[1] and without[0] == without[1]
    qkv = (96 + 2 * 8) * 128 // 2  # heads + 2 x kv heads, x head_dim, over TP 2, per layer
    # 23 decoder layers a stage; the last also holds the MTP layer (num_nextn_predict_layers 1)
    assert [a - b for a, b in zip(with_bias[0], without[0])] == [23 * qkv, 24 * qkv]


@pytest.mark.parametrize("qkv_bias", [True, False, None])
def test_qwen2_moe_qkv_bias_is_read(qkv_bias):
    """HF Qwen2MoeAttention biases q, k and v by config.qkv_bias (Qwen2MoeConfig default true): false builds none in
    either count (moetune had always added them), left out builds them."""
    hf, layout = _builtin("qwen1.5-moe-a2.7b"), dict(world_size=8, tp=2, pp=2, ep=2)
    edited = {k: v for k, v in hf.items() if k != "qkv_bias"} | ({} if qkv_bias is None else {"qkv_bias": qkv_bias})
    ours, theirs = _both(edited, **layout)
    assert ours == theirs
    biased, plain = _both({**hf, "qkv_bias": True}, **layout)[0], _both({**hf, "qkv_bias": False}, **layout)[0]
    qkv = 3 * 2048 // 2  # q, k and v (16 heads = 16 kv heads, head_dim 128) over TP 2, per layer
    assert [a - b for a, b in zip(biased, plain)] == [12 * qkv, 12 * qkv]  # 24 layers, 12 a stage
    assert ours == (plain if qkv_bias is False else biased)


@pytest.mark.parametrize(("name", "layout"), [("mixtral-8x7b", dict(world_size=16, tp=2, pp=2, ep=4)),
                                              ("qwen3-30b-a3b", dict(world_size=8, tp=1, pp=2, ep=4))])
def test_mtp_trained_from_scratch_is_the_decoders_last_layer(name, layout):
    """A checkpoint with no MTP module, trained with one: Megatron-Core builds it as the decoder's last layer
    (Megatron-LM gpt_builders.py), which the oracle does from num_nextn_predict_layers; moetune's with_mtp(1) holds
    the same parameters on every stage, the last one more than without."""
    hf = _builtin(name)
    spec, lay = spec_from_hf(hf, name=name, origin="x.json").with_mtp(1), Layout(**layout)
    padded = padded_vocab_size(spec.vocab_size, lay.tp, spec.vocab_divisor)
    theirs = count_params_per_stage({**hf, "num_nextn_predict_layers": 1}, padded_vocab_size=padded, tp=lay.tp,
                                    pp=lay.pp, ep=lay.ep, etp=lay.etp, world_size=lay.world_size)
    ours = [s.total for s in stage_params(spec, lay, layer_spec="te")]
    assert ours == theirs and ours[-1] > _both(hf, **layout)[0][-1]


@pytest.mark.parametrize(("model", "dropped", "layout"), [
    ("qwen3-30b-a3b", "num_key_value_heads", dict(world_size=16, tp=2, pp=2, ep=8)),
    ("deepseek-v3", "n_shared_experts", dict(world_size=64, tp=2, pp=1, ep=64)),
])
def test_a_field_left_out_is_built_at_its_class_default_by_both(model, dropped, layout):
    """A config.json without a field builds, in Megatron-Core and in moetune alike, what the full config builds where
    the field holds transformers' class default (Qwen3MoeConfig's 4 KV heads, DeepseekV3Config's one shared expert):
    moetune had read 32 KV heads and no shared expert (specs/hf_defaults.py)."""
    hf = _builtin(model)
    ours, theirs = _both({k: v for k, v in hf.items() if k != dropped}, **layout)
    assert ours == theirs == _both(hf, **layout)[0]
