"""Hugging Face ``config.json`` -> Megatron-Core ``TransformerConfig`` architecture fields.

Only the fields that decide *which parameters exist and their shapes* are mapped (routing
hyper-parameters, dropout, fusions, RoPE scaling values do not change a parameter count).
Field semantics follow Megatron-Bridge's bridges (``MegatronModelBridge.CONFIG_MAPPING`` in
src/megatron/bridge/models/conversion/model_bridge.py and the per-family ``provider_bridge``
overrides under src/megatron/bridge/models/*/, cited per family in families.py); the code is ours.

Pure Python: importable without torch or megatron.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from moetune.errors import MoetuneError
from moetune.oracle.families import FAMILIES, MODEL_TYPE_ARCHITECTURES
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

_DENSE_LAYER_RULES = ("first_k_dense", "qwen_sparse_step", "ernie_start", "llama4_step", "all_moe")
_SHARED_RULES = ("n_shared_x_moe_width", "qwen_shared_width", "ernie_shared", "llama4_shared", "direct", "none")


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
    # "per_head" (Megatron's qk_layernorm), "full_tp" (one norm over the rank's heads, MiniMax-M2), "full" (one norm
    # over every head on each TP rank, OLMoE in Bridge)
    qk_norm: str = "per_head"
    hybrid_pattern: str | None = None  # a Mamba hybrid (MambaModel) and its layer symbols; None: a GPTModel


def architecture_of(hf_config: dict) -> str:
    archs = hf_config.get("architectures") or []
    arch = archs[0] if archs else MODEL_TYPE_ARCHITECTURES.get(str(hf_config.get("model_type")), "")
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
    elif rule == "ernie_start":
        # Bridge ernie_45_bridge.py (v0.5.0 :241-253): mlp_layer_types where given, else dense below
        # moe_layer_start_index (first pool) and MoE from there to the last layer
        types = hf.get("mlp_layer_types")
        start = hf.get("moe_layer_start_index")
        start = 1 if start is None else int(start[0] if isinstance(start, (list, tuple)) else start)
        pattern = [int(t != "dense") for t in types] if types else [int(i >= start) for i in range(num_layers)]
    elif rule == "llama4_step":
        # HF Llama4TextConfig: moe_layers where given, else every interleave_moe_layer_step-th layer from step - 1
        # (Bridge's 128-expert provider: [0, 1] * 24 for step 2)
        step = int(hf.get("interleave_moe_layer_step") or 1)
        moe = hf.get("moe_layers")
        moe = set(moe) if moe is not None else set(range(step - 1, num_layers, step))
        pattern = [int(i in moe) for i in range(num_layers)]
    else:
        return 1
    return 1 if all(pattern) else pattern


def _shared_width(hf: dict, rule: str, moe_width: int) -> int | None:
    if rule == "n_shared_x_moe_width":
        n = int(hf.get("n_shared_experts") or 0)
        return n * moe_width or None
    if rule == "qwen_shared_width":
        return int(hf.get("shared_expert_intermediate_size") or 0) or None
    if rule == "ernie_shared":  # Bridge ernie_45_bridge.py (v0.5.0 :216-217): moe_num_shared_experts, default 2
        n = hf.get("moe_num_shared_experts")
        return moe_width * int(2 if n is None else n) or None
    if rule == "llama4_shared":  # one shared expert of the routed experts' width
        return moe_width
    if rule == "direct":
        return int(hf.get("moe_shared_expert_intermediate_size") or 0) or None
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
    if "names" in fam:
        hf_config = fam["names"](hf_config)
    cfg = _generic(hf_config, _GENERIC_FIELDS)
    for key in ("num_layers", "hidden_size", "num_attention_heads", "num_moe_experts"):
        if key not in cfg:
            raise MoetuneError(f"hf_config: missing the field that maps to {key}; use a full config.json")
    cfg.setdefault("num_query_groups", cfg["num_attention_heads"])
    cfg.update(normalization="RMSNorm", gated_linear_unit=True, add_bias_linear=False)
    cfg.update(fam["fixed"])
    cfg.update({field: bool(hf_config.get(key, default)) for key, (field, default) in fam.get("switches", {}).items()})
    if "extra" in fam:
        cfg.update(fam["extra"](hf_config))
    cfg["moe_layer_freq"] = _moe_layer_freq(hf_config, fam["dense"], cfg["num_layers"])
    cfg["moe_shared_expert_intermediate_size"] = _shared_width(
        hf_config, fam["shared"], cfg["moe_ffn_hidden_size"])
    mtp = int(hf_config.get("num_nextn_predict_layers") or 0) if fam.get("mtp", True) else 0
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
        qk_norm=fam.get("qk_norm", "per_head"),
        hybrid_pattern=_hybrid_pattern(hf_config, cfg["num_layers"]) if fam.get("stack") == "hybrid" else None,
    )


def _hybrid_pattern(hf: dict, num_layers: int) -> str:
    """The Mamba hybrid's layer symbols (M Mamba, * attention, - MLP, E MoE), as Bridge passes hybrid_override_pattern
    to MambaModel (nemotron_h_bridge.py CONFIG_MAPPING, v0.3.1 :64); transformers 5 writes them as layers_block_type."""
    names = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-", "moe": "E"}
    pattern = hf.get("hybrid_override_pattern")
    if pattern is None and hf.get("layers_block_type"):
        pattern = "".join(names.get(b, "?") for b in hf["layers_block_type"])
    if not isinstance(pattern, str) or len(pattern) != num_layers or set(pattern) - set("M*-E"):
        raise MoetuneError(f"hf_config: hybrid_override_pattern {pattern!r} must give one of M * - E for each of the "
                           f"{num_layers} layers")
    return pattern
