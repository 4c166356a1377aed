"""Per-architecture facts of the HF -> Megatron-Core mapping that a config.json does not spell out.

Each entry says how Megatron Bridge builds that family (the provider_bridge overrides or provider defaults named
beside it; Bridge tags are those of the NVIDIA-NeMo/Megatron-Bridge repository, v0.3.1 being the release that pins
megatron-core < 0.17). Keys of an entry:

* ``mla`` / ``dsa``: multi-latent attention, DeepSeek sparse attention;
* ``dense``: which layers are dense (hf_to_mcore.moe_layer_freq), ``shared``: the shared-expert width rule;
* ``fixed``: TransformerConfig fields the family always sets; ``switches``: HF booleans with their class default;
* ``names``: a function giving the config under the generic HF names (DBRX's nested fields, ERNIE's moe_k, ...);
* ``extra``: a function giving further TransformerConfig fields read from the config (gated delta-net, Mamba);
* ``qk_norm``: "full_tp" (one norm over every head, split over TP with the heads) or "full" (whole on each rank);
* ``stack``: "hybrid" for a Mamba hybrid built as Megatron-Core's MambaModel; ``mtp``: False where Bridge builds
  no MTP block whatever the config says.

Pure Python: importable without torch or megatron.
"""

from __future__ import annotations

from typing import Any

from moetune.errors import MoetuneError


def _first(value):
    """ERNIE's per-pool fields may be lists; text-only models use the first pool (ernie_45_bridge.py)."""
    return value[0] if isinstance(value, (list, tuple)) else value


def _dbrx_names(hf: dict) -> dict:
    """DBRX nests its sizes under attn_config / ffn_config (HF DbrxConfig; no Bridge bridge maps DBRX)."""
    attn, ffn = hf.get("attn_config") or {}, hf.get("ffn_config") or {}
    renamed = {"num_hidden_layers": hf.get("n_layers"), "hidden_size": hf.get("d_model"),
               "num_attention_heads": hf.get("n_heads"), "num_key_value_heads": attn.get("kv_n_heads"),
               "num_local_experts": ffn.get("moe_num_experts"), "num_experts_per_tok": ffn.get("moe_top_k"),
               "intermediate_size": ffn.get("ffn_hidden_size"), "max_position_embeddings": hf.get("max_seq_len")}
    return {**hf, **{k: v for k, v in renamed.items() if v is not None}}


def _ernie_names(hf: dict) -> dict:
    """Bridge ernie_45_bridge.py Ernie45Bridge.provider_bridge (v0.5.0 :202-217): moe_num_experts (first pool),
    moe_k, moe_intermediate_size (first pool; intermediate_size where absent)."""
    out = dict(hf)
    out["num_experts"] = _first(hf.get("moe_num_experts", 64))
    out["num_experts_per_tok"] = hf.get("moe_k", 6)
    if hf.get("moe_intermediate_size") is not None:
        out["moe_intermediate_size"] = _first(hf["moe_intermediate_size"])
    return out


def _llama4_names(hf: dict) -> dict:
    """Llama 4's language model lives in text_config; its per-expert and shared-expert width is intermediate_size,
    its dense layers' width intermediate_size_mlp (Bridge llama_provider.py Llama4ModelProvider, v0.3.1 :323-359:
    ffn_hidden_size 16384, moe_ffn_hidden_size 8192, moe_shared_expert_intermediate_size 8192)."""
    text = hf.get("text_config") or hf
    out = {**text, "architectures": hf.get("architectures")}
    out["tie_word_embeddings"] = text.get("tie_word_embeddings", hf.get("tie_word_embeddings", False))
    out["moe_intermediate_size"] = text.get("intermediate_size")
    out["intermediate_size"] = text.get("intermediate_size_mlp", text.get("intermediate_size"))
    return out


def _llama4_extra(hf: dict) -> dict:
    """Scout's use_qk_norm is a weightless L2 norm of q and k, not a learned norm (Bridge v0.3.1 llama_provider.py
    Llama4Experts16ModelProvider qk_l2_norm True, Llama4Experts128ModelProvider False, :363-383)."""
    return {"qk_l2_norm": bool(hf.get("use_qk_norm", True))}


def _qwen3_next_extra(hf: dict) -> dict:
    """Bridge qwen3_next_bridge.py Qwen3NextBridge.provider_bridge (v0.3.1 :76-87): gated delta-net on all but every
    full_attention_interval-th layer, its head sizes from the linear_* fields."""
    fields = {"linear_conv_kernel_dim": "linear_conv_kernel_dim", "linear_key_head_dim": "linear_key_head_dim",
              "linear_value_head_dim": "linear_value_head_dim", "linear_num_key_heads": "linear_num_key_heads",
              "linear_num_value_heads": "linear_num_value_heads", "linear_attention_freq": "full_attention_interval"}
    missing = [k for k in fields.values() if hf.get(k) is None]
    if missing:
        raise MoetuneError(f"hf_config: missing {', '.join(missing)} (gated delta-net sizes); use a full config.json")
    return {"experimental_attention_variant": "gated_delta_net", **{m: hf[k] for m, k in fields.items()}}


def _nemotron_h_extra(hf: dict) -> dict:
    """Bridge nemotron_h_bridge.py NemotronHBridge.CONFIG_MAPPING (v0.3.1 :58-70): the Mamba-2 sizes; its provider
    (mamba_provider.py MambaModelProvider :108) builds a plain, not gated, MLP."""
    fields = {"mamba_head_dim": "mamba_head_dim", "mamba_num_heads": "mamba_num_heads",
              "mamba_num_groups": "n_groups", "mamba_state_dim": "ssm_state_size"}
    out: dict[str, Any] = {m: hf[k] for m, k in fields.items() if hf.get(k) is not None}
    if hf.get("moe_latent_size"):
        raise MoetuneError("hf_config: moe_latent_size (latent MoE) is not in megatron-core 0.16.1's MambaModel")
    if int(hf.get("num_nextn_predict_layers") or 0):
        raise MoetuneError("hf_config: num_nextn_predict_layers: megatron-core 0.16.1's MambaModel builds no MTP")
    return {**out, "is_hybrid_model": True, "gated_linear_unit": False}


FAMILIES: dict[str, dict[str, Any]] = {
    "DeepseekV3ForCausalLM": {  # DeepSeek-V3/R1/V3.1, Kimi-K2, Moonlight
        "mla": True, "dense": "first_k_dense", "shared": "n_shared_x_moe_width",
        "fixed": {"qk_layernorm": True, "moe_router_score_function": "sigmoid",
                  "moe_router_enable_expert_bias": True},
    },
    # DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): the DeepSeek-V3 stack with an indexer in the MLA core attention
    # (Megatron-Core experimental_attention_variant="dsa"; Bridge glm5_bridge.py provider_bridge)
    **{arch: {"mla": True, "dsa": True, "dense": "first_k_dense", "shared": "n_shared_x_moe_width",
              "fixed": {"qk_layernorm": True, "moe_router_score_function": "sigmoid",
                        "moe_router_enable_expert_bias": True, "experimental_attention_variant": "dsa"}}
       for arch in ("DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM")},
    "DeepseekV2ForCausalLM": {
        "mla": True, "dense": "first_k_dense", "shared": "n_shared_x_moe_width",
        "fixed": {"qk_layernorm": True},
    },
    "Qwen3MoeForCausalLM": {
        "mla": False, "dense": "qwen_sparse_step", "shared": "none",
        "fixed": {"qk_layernorm": True, "add_qkv_bias": False},
    },
    "Qwen2MoeForCausalLM": {  # Qwen1.5-MoE, Qwen2-MoE: gated shared expert; q/k/v biases by config.qkv_bias
        "mla": False, "dense": "qwen_sparse_step", "shared": "qwen_shared_width",
        "fixed": {"moe_shared_expert_gate": True},
        # HF key -> (TransformerConfig field, the HF config class's default): Qwen2MoeConfig qkv_bias=True
        "switches": {"qkv_bias": ("add_qkv_bias", True)},
    },
    # HF MixtralAttention hard-codes bias=False on q/k/v/o (modeling_mixtral.py): a Mixtral config's attention_bias
    # builds nothing (Megatron-Bridge's generic attention_bias -> add_qkv_bias would add q/k/v biases HF has not)
    "MixtralForCausalLM": {"mla": False, "dense": "all_moe", "shared": "none", "fixed": {"add_qkv_bias": False}},
    "GptOssForCausalLM": {  # biases everywhere (qkv, o_proj, router, experts) + attention sinks
        "mla": False, "dense": "all_moe", "shared": "none",
        "fixed": {"add_bias_linear": True, "softmax_type": "learnable"},
    },
    # HF PhimoeAttention biases q, k, v and o_proj (attention_bias), its norms are LayerNorms with biases; Megatron
    # biases o_proj only under add_bias_linear, which biases the router and every expert too (no bridge ships Phi)
    "PhiMoEForCausalLM": {"mla": False, "dense": "all_moe", "shared": "none",
                          "fixed": {"normalization": "LayerNorm", "add_bias_linear": True}},
    "Glm4MoeForCausalLM": {  # GLM-4.5 / 4.5-Air: qkv bias from attention_bias, q/k norm from use_qk_norm
        "mla": False, "dense": "first_k_dense", "shared": "n_shared_x_moe_width",
        "fixed": {"moe_router_score_function": "sigmoid", "moe_router_enable_expert_bias": True},
    },
    # Bridge qwen3_next_bridge.py (v0.3.1 :52-89): per-head q/k norm, a sigmoid output gate doubling the query
    # projection, a gated shared expert, gated delta-net layers (extra); mtp_num_layers None. Its provider lays the
    # layers out with get_transformer_block_with_experimental_attention_variant_spec (qwen_provider.py :437-438)
    "Qwen3NextForCausalLM": {
        "mla": False, "dense": "qwen_sparse_step", "shared": "qwen_shared_width", "extra": _qwen3_next_extra,
        "fixed": {"qk_layernorm": True, "add_qkv_bias": False, "attention_output_gate": True,
                  "moe_shared_expert_gate": True},
    },
    # Bridge ernie_45_bridge.py Ernie45Bridge.provider_bridge (v0.5.0 :186-253): RMSNorm, no biases, sigmoid router
    # with an expert bias, shared width moe_ffn x moe_num_shared_experts, dense layers before moe_layer_start_index,
    # mtp_num_layers None (the checkpoint ships no MTP weights)
    "Ernie4_5_MoeForCausalLM": {
        "mla": False, "dense": "ernie_start", "shared": "ernie_shared", "names": _ernie_names, "mtp": False,
        "fixed": {"add_qkv_bias": False, "moe_router_score_function": "sigmoid",
                  "moe_router_enable_expert_bias": True},
    },
    # Bridge olmoe_bridge.py OlMoEBridge.provider_bridge (v0.3.1 :66-94) with olmoe_provider.py olmoe_layer_spec /
    # OLMoESelfAttention (:41-45, :120-135): q and k norms of head_dim x num_attention_heads, whole on each TP rank
    "OlmoeForCausalLM": {"mla": False, "dense": "all_moe", "shared": "none", "qk_norm": "full",
                         "fixed": {"qk_layernorm": True, "add_qkv_bias": False}},
    # Bridge minimax_m2_bridge.py MiniMaxM2Bridge.provider_bridge (v0.4.2 :135-163) with minimax_m2_provider.py
    # minimax_m2_layer_spec / FullDimQNorm / FullDimKNorm (:110-161): q and k norms over all the rank's heads, split
    # over TP with them; sigmoid router with an expert bias; its MTP modules are not mapped
    "MiniMaxM2ForCausalLM": {
        "mla": False, "dense": "all_moe", "shared": "none", "qk_norm": "full_tp", "mtp": False,
        "fixed": {"qk_layernorm": False, "add_qkv_bias": False, "moe_router_score_function": "sigmoid",
                  "moe_router_enable_expert_bias": True},
    },
    # Bridge ships no HF bridge for Llama 4; its providers (llama_provider.py Llama4ModelProvider and the 16/128-
    # expert subclasses, v0.3.1 :323-383) hold the shapes: sigmoid top-1 router, one shared expert, MoE every
    # interleave_moe_layer_step-th layer ([0, 1] * 24 for 128 experts), weightless L2 q/k norm (extra)
    "Llama4ForConditionalGeneration": {
        "mla": False, "dense": "llama4_step", "shared": "llama4_shared", "names": _llama4_names,
        "extra": _llama4_extra,
        "fixed": {"qk_layernorm": False, "add_qkv_bias": False, "moe_router_score_function": "sigmoid"},
    },
    # Bridge nemotron_h_bridge.py NemotronHBridge (v0.3.1 :37-99) builds Megatron-Core's MambaModel from
    # hybrid_override_pattern: Mamba-2 mixers (extra), squared-ReLU MLPs, sigmoid router with an expert bias
    "NemotronHForCausalLM": {
        "mla": False, "dense": "all_moe", "shared": "direct", "stack": "hybrid", "extra": _nemotron_h_extra,
        "fixed": {"moe_router_score_function": "sigmoid", "moe_router_enable_expert_bias": True},
    },
    # No Bridge bridge or provider maps DBRX: HF DbrxForCausalLM read directly. Its norms are LayerNorms, which
    # Megatron-Core builds with a bias (HF's have none: a known difference, see docs/oracle.md)
    "DbrxForCausalLM": {"mla": False, "dense": "all_moe", "shared": "none", "names": _dbrx_names,
                        "fixed": {"normalization": "LayerNorm", "add_qkv_bias": False}},
    # No Bridge bridge or provider maps Grok-1 (hpcai-tech's HF port): a stock GPT layer. Its post-attention and
    # post-MoE norms have no slot in Megatron-Core's TransformerLayer (a known difference, see docs/oracle.md)
    "Grok1ModelForCausalLM": {"mla": False, "dense": "all_moe", "shared": "none", "fixed": {"add_qkv_bias": False}},
}

# A config.json with no architectures field, known by its model_type (MindIE's ERNIE-4.5-300B naming)
MODEL_TYPE_ARCHITECTURES = {"ernie_moe": "Ernie4_5_MoeForCausalLM", "ernie4_5_moe": "Ernie4_5_MoeForCausalLM"}
