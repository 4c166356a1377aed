"""The layer specs the oracle builds each family with: Megatron-Core's local (no-TE) specs, adjusted the way each
family's Megatron Bridge spec differs from the stock one. None of the classes here holds a parameter of its own: each
returns a Megatron-Core module (the q/k norms are ``WrappedTorchNorm``, MCore's torch norm), or is a spec.

* GPT families: ``get_gpt_decoder_block_spec`` (local) per virtual stage, its core attention pointed at the oracle's
  ``DotProductAttention`` stand-in (shims.py), the MLA/DSA adjustments of the TE spec, and:
  - full-width q/k norms (MiniMax-M2, OLMoE): ``FullWidthNorm`` in the q/k layernorm slots;
  - gated delta-net (Qwen3-Next): ``GatedDeltaNet`` as the mixer of every layer the linear-attention pattern names,
    as experimental_attention_variant_module_specs.py get_transformer_block_with_experimental_attention_variant_spec
    lays it out (a TE-only builder in 0.16.1, re-laid here with local modules);
  - Llama 4's weightless L2 q/k norm (qk_l2_norm).
* Mamba hybrids (Nemotron-H): ``hybrid_stack_spec``, models/mamba/mamba_layer_specs.py ``mamba_stack_spec`` with local
  modules in place of its TE ones (a TE fused-norm linear becomes a separate norm + the plain linear: same tensors).
"""

from __future__ import annotations

import copy


def _full_width_norm(heads_field: str, split: bool):
    """A q/k layernorm spec class normalising over every head of the rank (split: the heads split over TP, as Bridge
    minimax_m2_provider.py FullDimQNorm/FullDimKNorm, v0.4.2 :110-139) or over every head of the model on each rank
    (Bridge olmoe_provider.py OLMoESelfAttention, v0.3.1 :120-135, which sizes both norms by num_attention_heads).
    SelfAttention asks it for a per-head width; it returns MCore's WrappedTorchNorm of the full width."""
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    class FullWidthNorm:
        def __new__(cls, hidden_size: int, config, eps: float = 1e-5):
            heads = getattr(config, heads_field) or config.num_attention_heads
            if split:
                heads //= config.tensor_model_parallel_size
            return WrappedTorchNorm(config=config, hidden_size=heads * hidden_size, eps=eps)

    return FullWidthNorm


def use_full_width_qk_norm(layer_specs: list, mode: str) -> None:
    """Point every attention's q/k layernorm at the full-width norm (mode "full_tp" or "full")."""
    split = mode == "full_tp"
    q_norm = _full_width_norm("num_attention_heads", split)
    k_norm = _full_width_norm("num_query_groups" if split else "num_attention_heads", split)
    for spec in layer_specs:
        sub = getattr(spec.submodules.self_attention, "submodules", None)
        if sub is not None and hasattr(sub, "k_layernorm"):
            sub.q_layernorm, sub.k_layernorm = q_norm, k_norm


def _gated_delta_net_spec():
    """experimental_attention_variant_module_specs.py get_gated_delta_net_module_spec with local modules: the TE
    in_proj fuses the layer's input norm (layer_norm_weight [h]); here the layer keeps its own input_layernorm."""
    from megatron.core.ssm.gated_delta_net import GatedDeltaNet, GatedDeltaNetSubmodules
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    return ModuleSpec(module=GatedDeltaNet, submodules=GatedDeltaNetSubmodules(
        in_proj=ColumnParallelLinear, out_norm=WrappedTorchNorm, out_proj=RowParallelLinear))


def with_gated_delta_net(config, layer_specs: list) -> list:
    """The whole model's layer specs with gated delta-net mixers where the linear-attention pattern has a 1."""
    from megatron.core.models.gpt.experimental_attention_variant_module_specs import get_linear_attention_pattern

    gdn = _gated_delta_net_spec()
    out = []
    for spec, linear in zip(layer_specs, get_linear_attention_pattern(config), strict=True):
        if linear:
            spec = copy.copy(spec)
            spec.submodules = copy.copy(spec.submodules)
            spec.submodules.self_attention = gdn
        out.append(spec)
    return out


def _stage_slice(config, layer_specs: list, vp_stage: int | None) -> list:
    """The layers this pipeline stage builds, as get_gpt_decoder_block_spec slices them (gpt_layer_specs.py)."""
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    if config.pipeline_model_parallel_layout is not None:
        ids = config.pipeline_model_parallel_layout.get_layer_id_list(layer_type=LayerType.decoder, vp_stage=vp_stage)
        return [layer_specs[i] for i in ids]
    offset = get_transformer_layer_offset(config, vp_stage=vp_stage)
    return layer_specs[offset:offset + get_num_layers_to_build(config, vp_stage=vp_stage)]


def chunk_specs(config, vp_stage: int | None, spec: str, *, dsa: bool = False, qk_norm: str = "per_head"):
    """Decoder block spec and MTP block spec for one virtual stage of the current rank."""
    from megatron.core.models.gpt.gpt_layer_specs import (
        get_gpt_decoder_block_spec,
        get_gpt_decoder_layer_specs,
        get_gpt_mtp_block_spec,
    )

    from moetune.oracle.shims import use_dsa_core_attention, use_oracle_core_attention, use_te_mla_down_proj

    l2 = bool(config.qk_l2_norm)
    block = get_gpt_decoder_block_spec(config, use_transformer_engine=False, normalization="RMSNorm",
                                       qk_l2_norm=l2, vp_stage=vp_stage)
    # MTP's inner layer copies the *last decoder layer* spec of the whole model (what
    # get_gpt_mtp_block_spec takes from the last stage's block), even when this chunk has none.
    every = get_gpt_decoder_layer_specs(config, False, "RMSNorm", qk_l2_norm=l2)
    if config.experimental_attention_variant == "gated_delta_net":
        every = with_gated_delta_net(config, every)
        block.layer_specs = _stage_slice(config, every, vp_stage)
    mtp_layer = every[-1]
    use_oracle_core_attention([*block.layer_specs, mtp_layer])
    if dsa:
        use_dsa_core_attention([*block.layer_specs, mtp_layer])
    if spec == "te":
        use_te_mla_down_proj([*block.layer_specs, mtp_layer])
    if qk_norm != "per_head":
        use_full_width_qk_norm([*block.layer_specs, mtp_layer], qk_norm)
    mtp = None
    if config.mtp_num_layers:
        mtp = get_gpt_mtp_block_spec(config, mtp_layer, use_transformer_engine=False, vp_stage=vp_stage)
    return block, mtp


def hybrid_stack_spec():
    """models/mamba/mamba_layer_specs.py mamba_stack_spec (the TE stack Bridge's MambaModelProvider builds,
    mamba_provider.py v0.3.1 :54-76) with local modules: each TE fused-norm linear becomes WrappedTorchNorm + the
    plain parallel linear, TENorm WrappedTorchNorm, the core attention the oracle's stand-in."""
    from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
    from megatron.core.models.gpt.moe_module_specs import get_moe_module_spec
    from megatron.core.ssm.mamba_block import MambaStack, MambaStackSubmodules
    from megatron.core.ssm.mamba_layer import MambaLayer, MambaLayerSubmodules
    from megatron.core.ssm.mamba_mixer import MambaMixer, MambaMixerSubmodules
    from megatron.core.ssm.mlp_layer import MLPLayer
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.attention import SelfAttention, SelfAttentionSubmodules
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.mlp import MLP, MLPSubmodules
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.torch_norm import WrappedTorchNorm
    from megatron.core.transformer.transformer_layer import (
        MoETransformerLayer,
        TransformerLayer,
        TransformerLayerSubmodules,
    )

    from moetune.oracle.shims import core_attention_class

    norm, bda = WrappedTorchNorm, get_bias_dropout_add
    mixer = ModuleSpec(module=MambaMixer, submodules=MambaMixerSubmodules(
        in_proj=ColumnParallelLinear, out_proj=RowParallelLinear))
    attention = ModuleSpec(module=SelfAttention, params={"attn_mask_type": AttnMaskType.causal},
                           submodules=SelfAttentionSubmodules(linear_qkv=ColumnParallelLinear,
                                                              core_attention=core_attention_class(),
                                                              linear_proj=RowParallelLinear))
    mlp = ModuleSpec(module=MLP, submodules=MLPSubmodules(linear_fc1=ColumnParallelLinear,
                                                          linear_fc2=RowParallelLinear))
    moe = get_moe_module_spec(use_te=False, num_experts=8, moe_grouped_gemm=False)  # any count: MCore's own idiom
    return ModuleSpec(module=MambaStack, submodules=MambaStackSubmodules(
        mamba_layer=ModuleSpec(module=MambaLayer, submodules=MambaLayerSubmodules(
            norm=norm, mixer=mixer, mamba_bda=bda)),
        attention_layer=ModuleSpec(module=TransformerLayer, submodules=TransformerLayerSubmodules(
            input_layernorm=norm, self_attention=attention, self_attn_bda=bda)),
        mlp_layer=ModuleSpec(module=MLPLayer, submodules=TransformerLayerSubmodules(
            pre_mlp_layernorm=norm, mlp=mlp, mlp_bda=bda)),
        moe_layer=ModuleSpec(module=MoETransformerLayer, submodules=TransformerLayerSubmodules(
            pre_mlp_layernorm=norm, mlp=moe, mlp_bda=bda)),
    ))
