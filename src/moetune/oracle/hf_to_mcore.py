"""Hugging Face ``config.json`` -> Megatron-Core ``TransformerConfig`` architecture fields.

Only the fields that decide *which parameters exist and their shapes* are mapped (routing
hyper-parameters, dropout, fusions, RoPE scaling values do not change a parameter count).
Field semantics follow Megatron-Bridge's bridges (``MegatronModelBridge.CONFIG_MAPPING`` in
src/megatron/bridge/models/conversion/model_bridge.py and the per-family ``provider_bridge``
overrides under src/megatron/bridge/models/{deepseek,qwen,glm,gpt_oss,kimi}/); the code is ours.

Pure Python: importable without torch or megatron.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from moetune.errors import MoetuneError
from moetune.specs.hf_defaults import with_class_defaults

# (HF key, TransformerConfig field). First HF key present wins for a given field.
_GENERIC_FIELDS: tuple[tuple[str, str], ...] = (
    ("num_hidden_layers", "num_layers"),
    ("hidden_size", "hidden_size"),
    ("intermediate_size", "ffn_hidden_size"),
    ("num_attention_heads", "num_attention_heads"),
    ("num_key_value_heads", "num_query_groups"),
    ("head_dim", "kv_channels"),
    ("rms_norm_eps", "layernorm_epsilon"),
    ("attention_bias", "add_qkv_bias"),
    ("use_qk_norm", "qk_layernorm"),
    ("n_routed_experts", "num_moe_experts"),
    ("num_experts", "num_moe_experts"),
    ("num_local_experts", "num_moe_experts"),
    ("num_experts_per_tok", "moe_router_topk"),
    ("moe_intermediate_size", "moe_ffn_hidden_size"),
    # Mixtral / gpt-oss / OLMoE: the per-expert width is ``intermediate_size``.
    ("intermediate_size", "moe_ffn_hidden_size"),
)

_MLA_FIELDS: tuple[tuple[str, str], ...] = (
    ("q_lora_rank", "q_lora_rank"),
    ("kv_lora_rank", "kv_lora_rank"),
    ("qk_nope_head_dim", "qk_head_dim"),
    ("qk_rope_head_dim", "qk_pos_emb_head_dim"),
    ("v_head_dim", "v_head_dim"),
)

_DENSE_LAYER_RULES = ("first_k_dense", "qwen_sparse_step", "all_moe")
_SHARED_RULES = ("n_shared_x_moe_width", "qwen_shared_width", "none")

# Per-architecture facts that the HF config does not spell out (from the bridge overrides).
# Every family here uses RMSNorm and a gated (SwiGLU-style) expert/dense MLP.
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
}


@dataclass(kw_only=True, slots=True)
class McoreModelArgs:
    """Everything the oracle needs to build one GPTModel from an HF config."""

    architecture: str
    config: dict[str, Any] = field(default_factory=dict)  # TransformerConfig kwargs
    mla: bool = False
    dsa: bool = False  # DeepSeek Sparse Attention: the core attention is DSAttention with an indexer
    vocab_size: int = 0
    tied: bool = False
    max_sequence_length: int = 4096


def architecture_of(hf_config: dict) -> str:
    archs = hf_config.get("architectures") or []
    arch = archs[0] if archs else ""
    if arch not in FAMILIES:
        raise MoetuneError(
            f"hf_config.architectures: {arch or 'missing'!r} has no oracle mapping; "
            f"supported: {', '.join(sorted(FAMILIES))}"
        )
    return arch


def _moe_layer_freq(hf: dict, rule: str, num_layers: int) -> int | list[int]:
    """1 = MoE layer, 0 = dense layer, as in TransformerConfig.moe_layer_freq."""
    if rule == "first_k_dense":
        k = int(hf.get("first_k_dense_replace") or 0)
        # HF DeepseekV2/V3 decoder layer: MoE iff idx >= first_k_dense_replace and
        # idx % moe_layer_freq == 0 (moe_layer_freq is 1 in every released config).
        step = int(hf.get("moe_layer_freq") or 1)
        pattern = [int(i >= k and i % step == 0) for i in range(num_layers)]
    elif rule == "qwen_sparse_step":
        # HF Qwen2Moe/Qwen3Moe decoder layer: MoE iff not in mlp_only_layers and
        # (layer_idx + 1) % decoder_sparse_step == 0.
        step = int(hf.get("decoder_sparse_step") or 1)
        dense = set(hf.get("mlp_only_layers") or [])
        pattern = [int(i not in dense and (i + 1) % step == 0) for i in range(num_layers)]
    else:
        return 1
    return 1 if all(pattern) else pattern


def _shared_width(hf: dict, rule: str, moe_width: int) -> int | None:
    if rule == "n_shared_x_moe_width":
        n = int(hf.get("n_shared_experts") or 0)
        return n * moe_width or None
    if rule == "qwen_shared_width":
        return int(hf.get("shared_expert_intermediate_size") or 0) or None
    return None


def _generic(hf: dict, pairs: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for hf_key, mc_key in pairs:
        if mc_key not in out and hf.get(hf_key) is not None:
            out[mc_key] = hf[hf_key]
    return out


def _rope_type(hf: dict) -> str:
    scaling = hf.get("rope_scaling") or {}
    return "yarn" if (scaling.get("type") or scaling.get("rope_type")) == "yarn" else "rope"


def _dsa(hf: dict) -> dict[str, Any]:
    """The indexer's shape fields (Bridge glm5_bridge.py). megatron-core 0.16.1 has no index sharing
    (dsa_indexer_topk_freq comes at core_v0.19.0): a config that shares is refused, not built unshared."""
    if int(hf.get("index_topk_freq") or 1) != 1:
        raise MoetuneError("hf_config: index_topk_freq > 1 (shared indexers) needs megatron-core 0.19, and the "
                           "oracle is pinned to 0.16.1; count it with index_topk_freq 1")
    return {"dsa_indexer_n_heads": hf["index_n_heads"], "dsa_indexer_head_dim": hf["index_head_dim"],
            "dsa_indexer_topk": hf["index_topk"]}


def hf_to_mcore(hf_config: dict, *, include_mtp: bool = True) -> McoreModelArgs:
    """Map an HF config dict to the TransformerConfig fields that shape the parameters; a field it leaves out at its
    transformers config class's default, as Megatron Bridge's AutoConfig builds it (specs/hf_defaults.py)."""
    hf_config, _ = with_class_defaults(hf_config, str(hf_config.get("model_type")))
    arch = architecture_of(hf_config)
    fam = FAMILIES[arch]
    cfg = _generic(hf_config, _GENERIC_FIELDS)
    for key in ("num_layers", "hidden_size", "num_attention_heads", "num_moe_experts"):
        if key not in cfg:
            raise MoetuneError(f"hf_config: missing the field that maps to {key}; use a full config.json")
    cfg.setdefault("num_query_groups", cfg["num_attention_heads"])
    cfg.update(normalization="RMSNorm", gated_linear_unit=True, add_bias_linear=False)
    cfg.update(fam["fixed"])
    cfg.update({field: bool(hf_config.get(key, default)) for key, (field, default) in fam.get("switches", {}).items()})
    cfg["moe_layer_freq"] = _moe_layer_freq(hf_config, fam["dense"], cfg["num_layers"])
    cfg["moe_shared_expert_intermediate_size"] = _shared_width(
        hf_config, fam["shared"], cfg["moe_ffn_hidden_size"])
    mtp = int(hf_config.get("num_nextn_predict_layers") or 0)
    cfg["mtp_num_layers"] = mtp if (mtp and include_mtp) else None
    if fam["mla"]:
        cfg.update(_generic(hf_config, _MLA_FIELDS))
        cfg.setdefault("q_lora_rank", None)  # None: no query compression (V2-Lite, Moonlight)
        cfg["rope_type"] = _rope_type(hf_config)
    if fam.get("dsa"):
        cfg.update(_dsa(hf_config))
    return McoreModelArgs(
        architecture=arch,
        config=cfg,
        mla=fam["mla"],
        dsa=bool(fam.get("dsa")),
        vocab_size=int(hf_config["vocab_size"]),
        tied=bool(hf_config.get("tie_word_embeddings", False)),
        max_sequence_length=int(hf_config.get("max_position_embeddings") or 4096),
    )
