"""The families the oracle builds beyond GPT's stock layer: their HF -> Megatron-Core mapping (pure Python) and what
the built model holds where the family's Megatron Bridge spec differs from the stock one (full-width q/k norms, gated
delta-net layers, a Mamba hybrid). Per-stage totals against moetune are in tests/walls/test_rank_params_vs_mcore.py."""

import pytest
from oracle_refs import load_config

from moetune.errors import MoetuneError
from moetune.oracle import hf_to_mcore


def test_ernie_dense_prefix_shared_experts_and_no_mtp():
    small = hf_to_mcore(load_config("ernie-4.5-21b-a3b"))
    cfg = small.config
    assert small.tied and cfg["moe_layer_freq"] == [0] + [1] * 27
    assert (cfg["num_moe_experts"], cfg["moe_router_topk"], cfg["moe_ffn_hidden_size"]) == (64, 6, 1536)
    assert cfg["moe_shared_expert_intermediate_size"] == 2 * 1536
    assert cfg["moe_router_enable_expert_bias"] and cfg["moe_router_score_function"] == "sigmoid"
    # MindIE's naming: no architectures field, model_type ernie_moe; no shared experts; MTP never built
    big = hf_to_mcore({**load_config("ernie-4.5-300b-a47b"), "num_nextn_predict_layers": 1}).config
    assert big["moe_layer_freq"] == [0] * 3 + [1] * 51 and big["moe_shared_expert_intermediate_size"] is None
    assert big["mtp_num_layers"] is None


def test_llama4_reads_text_config():
    scout = hf_to_mcore(load_config("llama4-scout"))
    cfg = scout.config
    assert scout.vocab_size == 202048 and not scout.tied
    assert (cfg["ffn_hidden_size"], cfg["moe_ffn_hidden_size"], cfg["moe_shared_expert_intermediate_size"]) == \
        (16384, 8192, 8192)
    assert cfg["moe_layer_freq"] == 1 and cfg["qk_l2_norm"] and not cfg["qk_layernorm"]
    maverick = hf_to_mcore(load_config("llama4-maverick")).config
    assert maverick["moe_layer_freq"] == [0, 1] * 24 and not maverick["qk_l2_norm"]


def test_full_width_qk_norm_modes():
    assert hf_to_mcore(load_config("minimax-m2")).qk_norm == "full_tp"
    assert hf_to_mcore(load_config("olmoe-1b-7b")).qk_norm == "full"
    assert hf_to_mcore(load_config("qwen3-30b-a3b")).qk_norm == "per_head"


def test_qwen3_next_gated_delta_net_fields():
    cfg = hf_to_mcore(load_config("qwen3-next-80b-a3b")).config
    assert cfg["experimental_attention_variant"] == "gated_delta_net" and cfg["linear_attention_freq"] == 4
    assert (cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]) == (16, 32)
    assert cfg["attention_output_gate"] and cfg["moe_shared_expert_gate"] and cfg["qk_layernorm"]
    bad = {k: v for k, v in load_config("qwen3-next-80b-a3b").items() if k != "linear_key_head_dim"}
    bad["model_type"] = "unknown"  # no class defaults to fill the field back in
    with pytest.raises(MoetuneError, match="linear_key_head_dim"):
        hf_to_mcore(bad)


def test_nemotron_h_is_a_hybrid_with_plain_mlps():
    args = hf_to_mcore(load_config("nemotron3-nano-30b-a3b"))
    assert args.hybrid_pattern.startswith("MEMEM*E") and len(args.hybrid_pattern) == 52
    cfg = args.config
    assert not cfg["gated_linear_unit"] and cfg["moe_shared_expert_intermediate_size"] == 3712
    assert (cfg["mamba_num_heads"], cfg["mamba_head_dim"], cfg["mamba_num_groups"], cfg["mamba_state_dim"]) == \
        (64, 64, 8, 128)
    with pytest.raises(MoetuneError, match="hybrid_override_pattern"):
        hf_to_mcore({**load_config("nemotron3-nano-30b-a3b"), "hybrid_override_pattern": "ME*"})
    with pytest.raises(MoetuneError, match="MTP"):
        hf_to_mcore({**load_config("nemotron3-nano-30b-a3b"), "num_nextn_predict_layers": 1})


def test_dbrx_nested_fields_and_grok():
    cfg = hf_to_mcore(load_config("dbrx")).config
    assert (cfg["num_layers"], cfg["hidden_size"], cfg["num_query_groups"]) == (40, 6144, 8)
    assert (cfg["num_moe_experts"], cfg["moe_router_topk"], cfg["moe_ffn_hidden_size"]) == (16, 4, 10752)
    assert cfg["normalization"] == "LayerNorm"
    grok = hf_to_mcore(load_config("grok-1"))
    assert grok.tied and grok.config["num_moe_experts"] == 8 and grok.config["moe_ffn_hidden_size"] == 32768


# --- what Megatron-Core builds (needs torch + megatron) ---------------------------------------------------------

def _breakdown(name: str, **kw) -> dict[str, int]:
    pytest.importorskip("megatron.core")
    from moetune.oracle import count_params_breakdown

    return count_params_breakdown(load_config(name), **kw)


def test_minimax_qk_norms_split_with_the_heads_and_olmoe_norms_do_not():
    mm = _breakdown("minimax-m2", tp=4, pp=2, ep=32, etp=1, world_size=64, padded_vocab_size=200192)
    attn = "decoder.layers.0.self_attention."
    assert (mm[attn + "q_layernorm.weight"], mm[attn + "k_layernorm.weight"]) == (48 // 4 * 128, 8 // 4 * 128)
    # Bridge's OLMoESelfAttention builds both whole (num_attention_heads x head_dim) on every TP rank
    ol = _breakdown("olmoe-1b-7b", tp=2, pp=1, ep=8, etp=1, world_size=16, padded_vocab_size=50432)
    assert (ol[attn + "q_layernorm.weight"], ol[attn + "k_layernorm.weight"]) == (2048, 2048)


def test_qwen3_next_attention_on_every_fourth_layer():
    names = _breakdown("qwen3-next-80b-a3b", tp=2, pp=1, ep=64, etp=1, world_size=128, padded_vocab_size=152064)
    for i in range(48):
        attn = f"decoder.layers.{i}.self_attention."
        assert (attn + "linear_qkv.weight" in names) == ((i + 1) % 4 == 0)
        assert (attn + "in_proj.weight" in names) != ((i + 1) % 4 == 0)
    gdn = "decoder.layers.0.self_attention."  # q, k 16 x 128; v, z 32 x 128; beta, alpha 32; over TP 2
    assert names[gdn + "in_proj.weight"] == 2048 * (2 * 2048 + 2 * 4096 + 2 * 32) // 2
    assert names[gdn + "out_norm.weight"] == 128 and names[gdn + "A_log"] == 16
    # the sigmoid output gate doubles the query rows: (16 x 2 + 2 x 2) heads of 256 over TP 2
    assert names["decoder.layers.3.self_attention.linear_qkv.weight"] == 2048 * (16 * 2 + 2 * 2) * 256 // 2


def test_nemotron_h_layers_follow_the_pattern_and_shims_are_undone():
    import sys

    import torch

    saved_device = torch.cuda.current_device
    names = _breakdown("nemotron3-nano-30b-a3b", tp=2, pp=1, ep=8, etp=1, world_size=16, padded_vocab_size=131072)
    pattern = hf_to_mcore(load_config("nemotron3-nano-30b-a3b")).hybrid_pattern
    marks = {"M": "mixer.in_proj.weight", "*": "self_attention.linear_qkv.weight", "E": "mlp.router.weight"}
    for i, symbol in enumerate(pattern):
        assert all((f"decoder.layers.{i}.{name}" in names) == (s == symbol) for s, name in marks.items())
    assert names["decoder.layers.0.mixer.norm.weight"] == 64 * 64 // 2  # mamba_ssm's gated norm, split over TP
    assert names["decoder.final_norm.weight"] == 2688 and "output_layer.weight" in names

    from megatron.core.ssm import gated_delta_net, mamba_block, mamba_mixer

    assert not (mamba_mixer.HAVE_MAMBA_SSM or gated_delta_net.HAVE_FLA)
    assert mamba_block.TENorm.__name__ == "TENorm" and torch.cuda.current_device is saved_device
    ops = sys.modules.get("megatron.core.inference.contexts.attention_context.triton.tensor_ops")
    assert ops is None or getattr(ops, "__file__", None)  # the build-only placeholder is gone


def test_a_hybrid_takes_no_vpp():
    pytest.importorskip("megatron.core")
    from moetune.oracle import count_params_per_stage

    with pytest.raises(MoetuneError, match="VPP"):
        count_params_per_stage(load_config("nemotron3-nano-30b-a3b"), tp=1, pp=2, vpp=2, ep=8, etp=1,
                               world_size=16, padded_vocab_size=131072)
