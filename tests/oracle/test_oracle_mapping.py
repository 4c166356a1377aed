"""HF -> TransformerConfig mapping and vocab padding: pure Python, no megatron needed."""

import pytest
from oracle_refs import load_config

from moetune.errors import MoetuneError
from moetune.oracle import bridge_divisible_by, hf_to_mcore, padded_vocab_size


def test_padded_vocab_rounds_up_to_divisor_times_tp():
    # Megatron-LM megatron/training/vocab_utils.py: multiple = 128 * tp, round up.
    assert padded_vocab_size(32000, 1) == 32000  # 32000 = 250 * 128
    assert padded_vocab_size(32000, 4) == 32256  # 512 * 63
    assert padded_vocab_size(129280, 8) == 130048  # 1024 * 127
    assert padded_vocab_size(129280, 8, divisible_by=1280) == 133120  # 10240 * 13
    assert padded_vocab_size(151936, 2) == 152064  # 256 * 594


def test_padded_vocab_rejects_nonsense():
    with pytest.raises(MoetuneError, match="tp"):
        padded_vocab_size(32000, 0)


def test_bridge_divisor_examples_from_its_docstring():
    # MegatronModelBridge.make_vocab_size_divisible_by docstring: 50257 -> 1, 32000 -> 128.
    assert bridge_divisible_by(50257) == 1
    assert bridge_divisible_by(32000) == 128
    assert bridge_divisible_by(129280) == 128


def test_deepseek_v3_mapping():
    args = hf_to_mcore(load_config("deepseek-v3"))
    cfg = args.config
    assert args.mla and not args.tied and args.vocab_size == 129280
    assert cfg["moe_layer_freq"] == [0, 0, 0] + [1] * 58
    assert cfg["moe_shared_expert_intermediate_size"] == 2048
    assert cfg["mtp_num_layers"] == 1
    assert (cfg["q_lora_rank"], cfg["kv_lora_rank"]) == (1536, 512)
    assert (cfg["qk_head_dim"], cfg["qk_pos_emb_head_dim"], cfg["v_head_dim"]) == (128, 64, 128)
    assert cfg["moe_router_enable_expert_bias"] and cfg["moe_router_score_function"] == "sigmoid"
    assert cfg["qk_layernorm"] and cfg["rope_type"] == "yarn"
    assert hf_to_mcore(load_config("deepseek-v3"), include_mtp=False).config["mtp_num_layers"] is None


def test_moonlight_has_no_query_compression():
    cfg = hf_to_mcore(load_config("moonlight-16b-a3b")).config
    assert cfg["q_lora_rank"] is None
    assert cfg["mtp_num_layers"] is None  # num_nextn_predict_layers 0
    assert cfg["moe_shared_expert_intermediate_size"] == 2 * 1408


def test_qwen_families():
    q3 = hf_to_mcore(load_config("qwen3-30b-a3b")).config
    assert q3["qk_layernorm"] and not q3["add_qkv_bias"]
    assert q3["moe_layer_freq"] == 1 and q3["moe_shared_expert_intermediate_size"] is None
    assert (q3["kv_channels"], q3["num_query_groups"], q3["moe_ffn_hidden_size"]) == (128, 4, 768)
    q2 = hf_to_mcore(load_config("qwen1.5-moe-a2.7b")).config
    assert q2["add_qkv_bias"] and q2["moe_shared_expert_gate"]
    assert q2["moe_shared_expert_intermediate_size"] == 5632


def test_qwen_sparse_step_and_mlp_only_layers():
    hf = {"architectures": ["Qwen2MoeForCausalLM"], "num_hidden_layers": 6, "hidden_size": 8,
          "num_attention_heads": 2, "num_experts": 4, "moe_intermediate_size": 4,
          "intermediate_size": 16, "decoder_sparse_step": 2, "mlp_only_layers": [3],
          "vocab_size": 128}
    # HF Qwen2MoeDecoderLayer: MoE iff idx not in mlp_only_layers and (idx + 1) % step == 0.
    assert hf_to_mcore(hf).config["moe_layer_freq"] == [0, 1, 0, 0, 0, 1]


def test_expert_width_falls_back_to_intermediate_size():
    assert hf_to_mcore(load_config("mixtral-8x7b")).config["moe_ffn_hidden_size"] == 14336
    oss = hf_to_mcore(load_config("gpt-oss-20b")).config
    assert oss["moe_ffn_hidden_size"] == 2880 and oss["add_bias_linear"]
    assert oss["softmax_type"] == "learnable"


def test_glm_qkv_bias_and_qk_norm_come_from_config():
    full = hf_to_mcore(load_config("glm-4.5")).config
    air = hf_to_mcore(load_config("glm-4.5-air")).config
    assert full["add_qkv_bias"] and full["qk_layernorm"]
    assert air["add_qkv_bias"] and not air["qk_layernorm"]
    assert air["moe_layer_freq"][:2] == [0, 1]


def test_unsupported_architecture_is_a_user_error():
    with pytest.raises(MoetuneError, match="architectures"):
        hf_to_mcore(dict(load_config("olmoe-1b-7b"), architectures=["JambaForCausalLM"]))
    with pytest.raises(MoetuneError, match="missing"):  # neither architectures nor a known model_type
        hf_to_mcore({k: v for k, v in load_config("olmoe-1b-7b").items() if k not in ("architectures", "model_type")})
