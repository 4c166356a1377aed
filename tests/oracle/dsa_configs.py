"""config.json dicts of the two DeepSeek Sparse Attention families, for tests only: no verbatim copy of either
checkpoint's config.json was found in the stored corpora, so none ships as a built-in model.

GLM-5 (zai-org/GLM-5, glm_moe_dsa): the GLM-5.2 fields of a third-party Rust test's "Representative slice of a real
GLM-5.2-FP8 config.json" (library find_string id 62651119609), with 78 layers and no index sharing (no
index_topk_freq / index_skip_topk_offset / indexer_types / mlp_layer_types): what Megatron Bridge's verification card
pins for GLM-5 (Megatron-Bridge examples/model_verification_cards/glm5/card.yaml @067f987: 743,911,199,232
parameters, 78 layers, MTP excluded), which every layer having an indexer reproduces exactly and 21 shared-indexer
groups do not (743,386,372,608). GLM-5.2 is the same with index_topk_freq 4, index_skip_topk_offset 3.

DeepSeek-V3.2 (deepseek-ai/DeepSeek-V3.2-Exp, deepseek_v32): DeepSeek-V3's config.json with index_n_heads 64,
index_head_dim 128, index_topk 2048 and model_type deepseek_v32, as consistent partial copies give it (library
find_string ids 54566085524, 4289690615, 58447926695).
"""

GLM5 = {
    "architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa", "vocab_size": 154880,
    "hidden_size": 6144, "intermediate_size": 12288, "num_hidden_layers": 78, "num_attention_heads": 64,
    "num_key_value_heads": 64, "head_dim": 192, "q_lora_rank": 2048, "kv_lora_rank": 512, "qk_nope_head_dim": 192,
    "qk_rope_head_dim": 64, "qk_head_dim": 256, "v_head_dim": 256, "index_n_heads": 32, "index_head_dim": 128,
    "index_topk": 2048, "indexer_rope_interleave": True, "n_routed_experts": 256, "num_experts_per_tok": 8,
    "n_shared_experts": 1, "moe_intermediate_size": 2048, "n_group": 1, "topk_group": 1,
    "routed_scaling_factor": 2.5, "norm_topk_prob": True, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
    "first_k_dense_replace": 3, "num_nextn_predict_layers": 1, "rms_norm_eps": 1e-05, "hidden_act": "silu",
    "tie_word_embeddings": False, "attention_bias": False,
}
GLM52_SHARING = {"index_topk_freq": 4, "index_skip_topk_offset": 3}

DEEPSEEK_V32 = {
    "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "vocab_size": 129280,
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_attention_heads": 128, "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 256,
    "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 3, "moe_layer_freq": 1, "n_group": 8,
    "topk_group": 4, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": True,
    "routed_scaling_factor": 2.5, "num_nextn_predict_layers": 1, "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False, "attention_bias": False, "index_topk": 2048, "index_n_heads": 64,
    "index_head_dim": 128, "max_position_embeddings": 163840,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
}


def small(hf: dict, layers: int = 6, experts: int = 8) -> dict:
    """The same model cut down for a Megatron-Core build in a test: fewer layers and routed experts."""
    return {**hf, "num_hidden_layers": layers, "n_routed_experts": experts, "n_group": 1, "topk_group": 1}
