"""A model's own fields in the normalized config (Megatron Bridge dotted names): its architecture, as a recipe's
model provider sets it, and what Bridge's model bridges and recipes set beside it for every MoE model.

`to_config` writes the architecture into every plan's config; `check --model` fills in the fields a user's config
leaves out and, like an estimate from `--config`, names the identity fields a config sets to another model's values.
"""

from typing import Any

from moetune.specs.model import ModelSpec
from moetune.walls.params import bias_linear


def architecture_fields(m: ModelSpec) -> dict[str, Any]:
    """The model's own architecture under Megatron's names (what a recipe's model provider sets; None: not this
    model's). `check --model` fills in those a user's config leaves out, so Megatron-Core can validate it."""
    return {
        "model.num_layers": m.num_layers, "model.hidden_size": m.hidden_size,
        "model.num_attention_heads": m.num_attention_heads, "model.num_query_groups": m.num_query_groups,
        "model.num_moe_experts": m.num_moe_experts or None, "model.moe_router_topk": m.moe_router_topk or None,
        # Megatron-Core asserts pre-softmax for a top-1 softmax router; Llama 4's top-1 router is a sigmoid
        "model.moe_router_score_function": m.moe_router_score_function if m.num_moe_experts else None,
        "model.moe_router_pre_softmax": True if m.moe_router_pre_softmax else None,
        "model.moe_router_topk_scaling_factor": m.moe_router_topk_scaling_factor,
        "model.moe_ffn_hidden_size": m.moe_ffn_hidden_size or None,
        "model.moe_shared_expert_intermediate_size": m.moe_shared_expert_intermediate_size or None,
        "model.mtp_num_layers": m.mtp_num_layers or None, "model.multi_latent_attention": m.mla is not None,
        "model.is_hybrid_model": True if m.mamba else None,  # Mamba hybrids: Megatron-Core's HybridModel
        # Megatron's add_bias_linear covers the attention output projection and the MLP/expert linears
        "model.add_bias_linear": bias_linear(m), "model.add_qkv_bias": m.add_qkv_bias,
        # attention sinks (gpt-oss): Bridge's gpt_oss_bridge.py sets softmax_type "learnable"; CP rules read it
        "model.softmax_type": "learnable" if m.softmax_sinks else None,
        # Llama 4: qk L2 norm, no-RoPE layers, router probability on the expert's input (Megatron-Core's own fields;
        # Bridge HEAD has no Llama 4 bridge to set them)
        "model.qk_l2_norm": True if m.qk_l2_norm else None, "model.no_rope_freq": m.no_rope_freq,
        "model.moe_apply_probs_on_input": True if m.moe_apply_probs_on_input else None,
        **_shape_fields(m),
    }


# The architecture fields a config may hold that name a different model when they differ from MODEL's
IDENTITY_FIELDS = ("model.num_layers", "model.hidden_size", "model.num_attention_heads", "model.num_moe_experts",
                   "model.moe_ffn_hidden_size", "model.moe_router_topk")


def architecture_conflicts(m: ModelSpec, config: dict) -> list[str]:
    """`key (config's vs model's)` for each identity field the config sets to another value than MODEL's, and the
    MoE layers a config's moe_layer_freq puts elsewhere than MODEL has them (moe_layer_conflict)."""
    mine = architecture_fields(m)
    found = [f"{k} ({config[k]} vs {m.name}'s {mine[k]})" for k in IDENTITY_FIELDS
             if mine.get(k) is not None and config.get(k) is not None and config[k] != mine[k]]
    return found + ([moe] if (moe := moe_layer_conflict(m, config)) else [])


def moe_layer_conflict(m: ModelSpec, config: dict) -> str | None:
    """Where a config's moe_layer_freq builds experts on other decoder layers than MODEL's, which the estimate would
    price in silence (the model's own pattern): an int N is every N-th layer from layer 0 (TransformerConfig's
    `i % N == 0`), a list one 0/1 a layer. Llama-4-Maverick at `--moe-layer-freq 2` builds experts on its even layers,
    its config.json on its odd ones: the first stage 14% off. A Mamba hybrid's layers come from its pattern."""
    freq = config.get("model.moe_layer_freq")
    if freq is None or m.mamba or not m.num_moe_layers:
        return None
    built = [int(i % freq == 0) for i in range(m.num_layers)] if isinstance(freq, int) else [int(x) for x in freq]
    mine = [int(k.mlp == "moe") for k in m.layers]
    if built == mine:
        return None
    def where(flags: list[int]) -> str:
        layers = [str(i) for i, f in enumerate(flags) if f]
        return ", ".join(layers[:4]) + (", ..." if len(layers) > 4 else "") if layers else "none"

    first = next((i for i, (a, b) in enumerate(zip(built, mine)) if a != b), min(len(built), len(mine)))
    kind = {1: "MoE", 0: "dense"}
    at = (f"; layer {first} is {kind[built[first]]} there, {kind[mine[first]]} in {m.name}"
          if first < min(len(built), len(mine)) else "")
    said = freq if isinstance(freq, int) else f"a list of {len(freq)}"
    return (f"model.moe_layer_freq ({said}: experts on layers {where(built)} of {len(built)}, {m.name}'s on "
            f"{where(mine)} of {m.num_layers}{at})")


# HF model types whose Megatron Bridge model bridge sets provider.moe_router_dtype = "fp32" (deepseek_v2_bridge.py,
# deepseek_v3_bridge.py, kimi_bridge.py, ernie_45_bridge.py, glm45_bridge.py, olmoe_bridge.py, nemotron_h_bridge.py,
# qwen3_next_bridge.py @067f987)
FP32_ROUTER_BRIDGES = ("deepseek_v2", "deepseek_v3", "kimi_k2", "ernie4_5_moe", "glm4_moe", "olmoe", "nemotron_h",
                       "qwen3_next")


def bridge_router_dtype(m: ModelSpec) -> str | None:
    """The moe_router_dtype a Megatron Bridge recipe of MODEL runs where its config leaves the field out: its model
    bridge's ("fp32" for FP32_ROUTER_BRIDGES' types), else Megatron-Core's None (gpt_oss_bridge.py and
    qwen3_moe_bridge.py do not set it, nor do the gpt-oss recipes and perf scripts @067f987)."""
    return "fp32" if m.num_moe_layers and m.model_type in FP32_ROUTER_BRIDGES else None


# No dropout, as Megatron Bridge builds every MoE model: its model bridges set hidden_dropout = 0.0
# (deepseek_v2_bridge.py, qwen3_moe_bridge.py, olmoe_bridge.py, glm45_bridge.py, gpt_oss_bridge.py ...) and copy
# attention_dropout from the config.json (model_bridge.py CONFIG_MAPPING; 0.0 in every built-in one that names it);
# the activation memory counts no dropout mask. Megatron-Core's own default is 0.1, which it refuses under graphed
# attention or MLP/MoE recompute (transformer_config.py).
NO_DROPOUT = {"model.hidden_dropout": 0.0, "model.attention_dropout": 0.0}


def provider_fields(m: ModelSpec) -> dict[str, Any]:
    """What Megatron Bridge's model bridges set for every MoE model beside the architecture: no dropout (NO_DROPOUT),
    grouped expert GEMMs and the alltoall dispatcher (deepseek_v3_bridge.py, qwen3_moe_bridge.py, gpt_oss_bridge.py,
    glm45_bridge.py, kimi_bridge.py ... provider.moe_grouped_gemm = True, moe_token_dispatcher_type = "alltoall"),
    and the recipes' BF16 mixed precision (recipes/common.py _pretrain_common: bf16_mixed). `check --model` fills them
    in where an overrides file leaves them to the recipe, so Megatron-Core does not judge the recipe's fields at its
    own defaults."""
    moe = {"model.moe_grouped_gemm": True, "model.moe_token_dispatcher_type": "alltoall"} if m.num_moe_layers else {}
    if dtype := bridge_router_dtype(m):
        moe["model.moe_router_dtype"] = dtype
    # attention sinks run CP only by a2a, which Bridge's gpt-oss recipes set (recipes/gpt_oss/h100/gpt_oss.py:70
    # @067f987 cfg.model.cp_comm_type = "a2a"): a CP > 1 override left to the recipe had read as p2p, refused
    if m.softmax_sinks:
        moe["model.cp_comm_type"] = "a2a"
    return {**moe, **NO_DROPOUT, "mixed_precision.bf16": True, "mixed_precision.params_dtype": "bfloat16",
            "mixed_precision.pipeline_dtype": "bfloat16"}


def _mixer_fields(m: ModelSpec) -> dict[str, Any]:
    """Linear-attention and Mamba mixers' dims, as Bridge's qwen3_next_bridge.py / nemotron_h_bridge.py set them."""
    out: dict[str, Any] = {}
    if m.gdn:
        # every `interval`-th layer is full (gated) attention, the rest gated delta-net
        interval = next(i + 1 for i, k in enumerate(m.layers) if k.mixer != "gdn")
        out.update({"model.experimental_attention_variant": "gated_delta_net", "model.linear_attention_freq": interval,
                    "model.linear_conv_kernel_dim": m.gdn.conv_kernel, "model.linear_key_head_dim": m.gdn.key_head_dim,
                    "model.linear_value_head_dim": m.gdn.value_head_dim,
                    "model.linear_num_key_heads": m.gdn.num_key_heads,
                    "model.linear_num_value_heads": m.gdn.num_value_heads})
    if m.dsa:
        out.update(_dsa_fields(m))
    if m.attention_output_gate:
        out["model.attention_output_gate"] = True
    if m.mamba:
        out.update({"model.mamba_num_heads": m.mamba.num_heads, "model.mamba_head_dim": m.mamba.head_dim,
                    "model.mamba_state_dim": m.mamba.state_size, "model.mamba_num_groups": m.mamba.n_groups})
    return out


def _dsa_fields(m: ModelSpec) -> dict[str, Any]:
    """DeepSeek Sparse Attention as Megatron Bridge's GLM-5 bridge sets it (glm5_bridge.py provider_bridge @067f987):
    the variant and its indexer's shapes and top-k (with index sharing's period and offset), and the indexer loss
    moetune prices (walls/dsa.py: coefficient 0.001, the sparse form). Without them Megatron-LM builds plain MLA."""
    d = m.dsa
    return {"model.experimental_attention_variant": "dsa", "model.dsa_indexer_n_heads": d.index_n_heads,
            "model.dsa_indexer_head_dim": d.index_head_dim, "model.dsa_indexer_topk": d.index_topk,
            "model.dsa_indexer_topk_freq": d.index_topk_freq if d.index_topk_freq > 1 else None,
            "model.dsa_indexer_skip_topk_offset": d.index_skip_topk_offset or None,
            # Megatron-Core runs no indexer loss at coefficient None or 0 (dsa.py: dsa_indexer_loss_coeff or 0.0)
            "model.dsa_indexer_loss_coeff": 0.001 if d.indexer_loss else None,
            "model.dsa_indexer_use_sparse_loss": True if d.indexer_loss and d.sparse_loss else None}


def _shape_fields(m: ModelSpec) -> dict[str, Any]:
    """The rest of what fixes the model's parameter shapes, as Bridge's model bridges set it from the config.json, so
    Megatron-LM arguments (which have no recipe behind them) build this model and not its defaults."""
    mixed = m.num_moe_layers and m.num_moe_layers < m.num_layers
    return {
        "model.ffn_hidden_size": m.ffn_hidden_size, "model.kv_channels": None if m.mla else m.kv_channels,
        "model.gated_linear_unit": m.gated_linear_unit, "model.normalization": m.normalization,
        # Megatron's per-head q/k norm; MLA's q/kv latent norms are the same switch (Bridge's deepseek bridges set
        # qk_layernorm=True); a full-width q/k norm (OLMoE, MiniMax) has no Megatron-LM flag
        "model.qk_layernorm": True if m.qk_layernorm == "head" or m.mla else None,
        "model.share_embeddings_and_output_weights": not m.untie_embeddings_and_output_weights,
        "model.vocab_size": m.vocab_size,
        # 1 = MoE, 0 = dense, per decoder layer (TransformerConfig.moe_layer_freq); all-MoE models keep the default
        "model.moe_layer_freq": [int(k.mlp == "moe") for k in m.layers] if mixed else None,
        "model.moe_router_num_groups": m.moe_router_num_groups if m.moe_router_num_groups > 1 else None,
        "model.moe_router_group_topk": m.moe_router_group_topk if m.moe_router_num_groups > 1 else None,
        "model.moe_router_enable_expert_bias": True if m.moe_router_score_correction_bias else None,
        "model.moe_shared_expert_gate": True if m.moe_shared_expert_gate else None,
        **_mixer_fields(m),
        **({"model.q_lora_rank": m.mla.q_lora_rank, "model.kv_lora_rank": m.mla.kv_lora_rank,
            "model.qk_head_dim": m.mla.qk_head_dim, "model.qk_pos_emb_head_dim": m.mla.qk_pos_emb_head_dim,
            "model.v_head_dim": m.mla.v_head_dim} if m.mla else {}),
    }
