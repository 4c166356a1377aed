"""moetune's layout and knobs <-> the normalized config (Megatron Bridge dotted names, data/megatron_names.csv).

`to_config` turns an estimate or plan result into what `emit` writes and `check` reads; `from_config`
reads a user's normalized config (Bridge YAML, dotted overrides or Megatron-LM arguments, via configio)
back into a Layout, Workload and Knobs, so `diagnose --config` can predict the run it measured.
Precision recipes follow Bridge's mixed_precision presets (training/mixed_precision.py):
fp8-blockwise = e4m3 + "blockwise", mxfp8 = e4m3 + "mxfp8", fp8-current = hybrid + "tensorwise",
fp8-delayed = hybrid + "delayed", nvfp4 = fp4 e2m1 + "nvfp4".
"""

from dataclasses import replace
from typing import Any

from moetune.configio.names import LAUNCHER
from moetune.errors import MoetuneError
from moetune.layout.knobs import (
    FP8_OUTPUT_PROJ_PRECISION,
    MEGATRON_FLEX_SMS,
    Knobs,
    parse_modules,
    parse_offload_modules,
)
from moetune.layout.layout import Layout, hybrid_segments, write_pipeline_layout
from moetune.layout.pipeline import pipeline_chunks, stage_order
from moetune.layout.ranks import job_nvlink_domain
from moetune.layout.validate import Workload
from moetune.planner.estimate import Estimate
from moetune.rules.derive import dispatcher_sms, graph_setting
from moetune.specs.model import ModelSpec
from moetune.walls.memory import PAGED_STASH_CUDA

# Each writes the other family off too: a recipe's own FP8 (or FP4) would otherwise survive beside the plan's
# (Bridge training/mixed_precision.py refuses fp4 with fp8; a BF16 plan over an MXFP8 recipe would run MXFP8)
PRECISION = {
    "bf16": {"mixed_precision.fp8": None, "mixed_precision.fp4": None},
    "fp8-blockwise": {"mixed_precision.fp8": "e4m3", "mixed_precision.fp8_recipe": "blockwise",
                      "mixed_precision.fp4": None},
    "mxfp8": {"mixed_precision.fp8": "e4m3", "mixed_precision.fp8_recipe": "mxfp8", "mixed_precision.fp4": None},
    "fp8-current": {"mixed_precision.fp8": "hybrid", "mixed_precision.fp8_recipe": "tensorwise",
                    "mixed_precision.fp4": None},
    "fp8-delayed": {"mixed_precision.fp8": "hybrid", "mixed_precision.fp8_recipe": "delayed",
                    "mixed_precision.fp4": None},
    "nvfp4": {"mixed_precision.fp4": "e2m1", "mixed_precision.fp4_recipe": "nvfp4", "mixed_precision.fp8": None},
}
# Bridge's preset of each (training/mixed_precision.py): bridge_overrides.py starts from it where the recipe's own
# precision is of another family
PRECISION_PRESET = {"bf16": "bf16_mixed", "fp8-blockwise": "bf16_with_fp8_subchannel_scaling_mixed",
                    "mxfp8": "bf16_with_mxfp8_mixed", "fp8-current": "bf16_with_fp8_current_scaling_mixed",
                    "fp8-delayed": "bf16_with_fp8_delayed_scaling_mixed", "nvfp4": "bf16_with_nvfp4_mixed"}
DISPATCHER = {"alltoall": ("alltoall", None), "allgather": ("allgather", None), "deepep": ("flex", "deepep"),
              "hybridep": ("flex", "hybridep")}


def layout_fields(lay: Layout) -> dict[str, Any]:
    return {
        "model.tensor_model_parallel_size": lay.tp, "model.context_parallel_size": lay.cp,
        "model.pipeline_model_parallel_size": lay.pp,
        # with a layout string Megatron derives VPP from it and accepts an equal explicit value
        # (transformer_config.py: "virtual_pipeline_model_parallel_size conflicts with ...")
        "model.virtual_pipeline_model_parallel_size": lay.vpp if lay.vpp > 1 else None,
        "model.expert_model_parallel_size": lay.ep, "model.expert_tensor_parallel_size": lay.etp,
        "model.sequence_parallel": lay.sp,
        "model.num_layers_in_first_pipeline_stage": lay.first_stage_layers,
        "model.num_layers_in_last_pipeline_stage": lay.last_stage_layers,
        "model.pipeline_model_parallel_layout": lay.pipeline_layout,
        "model.account_for_embedding_in_pipeline_split": lay.account_for_embedding,
        "model.account_for_loss_in_pipeline_split": lay.account_for_loss,
    }


# Full-iteration CUDA graphs capture MoE layers only with static expert shapes. Every MoE full-iteration recipe of
# Megatron Bridge gets them from HybridEP with a per-rank token budget, paged activation stashing, and the TE op fuser
# that Megatron-Core asks of that budget under HybridEP (perf_recipes/deepseek/common.py
# _enable_deepseek_full_iteration_mxfp8, gpt_oss/common.py, qwen/common.py @067f987; transformer_config.py). Any
# other plan unsets the budget, which drops tokens beyond it, and the stash that needs it (a recipe the overrides go
# onto may set both).
STATIC_EXPERTS = {"model.moe_expert_rank_capacity_factor": 1.5, "model.moe_paged_stash": True,
                  "model.moe_paged_stash_buffer_size_factor_cuda": PAGED_STASH_CUDA,  # what the memory wall counts
                  "model.use_transformer_engine_op_fuser": True}
DYNAMIC_EXPERTS = {"model.moe_expert_rank_capacity_factor": None, "model.moe_paged_stash": False}


def _knob_fields(k: Knobs) -> dict[str, Any]:
    kind, backend = DISPATCHER[k.dispatcher]
    full = "full_iteration" in k.cuda_graph_scope
    out = {
        "mixed_precision.bf16": True, **PRECISION[k.precision],
        "mixed_precision.grad_reduce_in_fp32": k.main_grads_fp32,
        "model.moe_token_dispatcher_type": kind,
        "model.recompute_granularity": None if k.recompute == "none" else k.recompute,
        "model.recompute_modules": sorted(k.effective_modules) if k.recompute == "selective" else None,
        "model.cuda_graph_impl": ("local" if full else "transformer_engine") if k.cuda_graph_scope else "none",
        "model.cuda_graph_scope": list(k.cuda_graph_scope) or None,
        # CUDA graphs need Transformer Engine's RNG tracker (Bridge docs/training/cuda-graphs.md; perf_recipes/
        # _common.py sets both to graphs_active; Megatron-LM turns it on itself, arguments.py)
        "model.use_te_rng_tracker": True if k.cuda_graph_scope else None,
        "rng.te_rng_tracker": True if k.cuda_graph_scope else None,
        # a captured iteration cannot read the loss on the host: Megatron-LM asserts the NaN check off
        # (arguments.py, --no-check-for-nan-in-loss-and-grad) and Bridge's perf scripts turn it off (overrides.py)
        "rerun_state_machine.check_for_nan_in_loss": False if full else None,
        "model.moe_router_force_load_balancing": k.routing == "force-balance",
        "comm_overlap.overlap_moe_expert_parallel_comm": k.ep_overlap,
        # Bridge and Megatron-Core assert shared-expert overlap off beside EP overlap (comm_overlap.py,
        # transformer_config.py), and Bridge's flex setup turns it off (flex_dispatcher_backend.py); Kimi-K2's and
        # GLM-4.5's recipes turn it on
        "model.moe_shared_expert_overlap": False if k.ep_overlap or backend else None,
        "comm_overlap.delay_wgrad_compute": k.delay_wgrad,
        "comm_overlap.tp_comm_overlap": k.tp_comm_overlap,
        "model.fp8_output_proj": k.fp8_output_proj,
        # without the distributed optimizer there are no parameter shards to gather (Megatron-LM asserts it)
        "ddp.overlap_grad_reduce": k.overlap_grad_reduce,
        "ddp.overlap_param_gather": k.overlap_param_gather and k.distributed_optimizer,
        # Bridge turns the distributed optimizer on for both when either is true (config.py
        # _validate_and_sync_distributed_optimizer_settings): both are written
        "ddp.use_distributed_optimizer": k.distributed_optimizer,
        "optimizer.use_distributed_optimizer": k.distributed_optimizer,
        "optimizer.optimizer_cpu_offload": k.optimizer_offload_fraction > 0,
        "optimizer.optimizer_offload_fraction": k.optimizer_offload_fraction,
    }
    out.update(STATIC_EXPERTS if full and k.dispatcher == "hybridep" else DYNAMIC_EXPERTS)
    if backend:
        out["model.moe_flex_dispatcher_backend"] = backend
        out[f"model.moe_{backend}_num_sms"] = k.num_sms  # the name Bridge's releases set (newer Megatron routes it)
        # newer Megatron-Core routes both per-backend fields into one and refuses two that differ (a recipe's
        # moe_hybridep_num_sms=16 beside a DeepEP plan's 20: "Conflicting deprecated SM-count knobs")
        out[f"model.moe_{'hybridep' if backend == 'deepep' else 'deepep'}_num_sms"] = None
    out["model.fine_grained_activation_offloading"] = bool(k.offload_modules)  # off overrides a recipe's on
    # a list always: Megatron-Core iterates it under paged stashing whatever the offload switch, and most recipes
    # hold None (transformer_config.py: set(self.offload_modules))
    out["model.offload_modules"] = sorted(k.offload_modules)
    whole = k.recompute == "full"
    out.update({"model.recompute_method": "uniform" if whole else None,
                "model.recompute_num_layers": 1 if whole else None})
    # the optimizer the memory wall sized, whatever the recipe's (Kimi-K2's recipe runs Muon; DeepSeek-V3's H100 recipe
    # BF16 moments): Adam with FP32 or BF16 moments; Megatron's precision-aware optimizer holds BF16 moments, and its
    # code path carries the CPU offload (Megatron-LM arguments.py asserts it with --optimizer-cpu-offload)
    moments = "bfloat16" if k.adam_moments_bytes == 2 else "float32"  # the normalized spelling (configio/types.py)
    aware = k.adam_moments_bytes == 2 or k.optimizer_offload_fraction > 0
    # main grads as the plan counts them: FP32 unless BF16 and the precision-aware optimizer takes them (Megatron-Core
    # refuses BF16 main grads without it: DeepSeek-V3's and Moonlight's H100 recipes set them)
    grads = "bfloat16" if aware and not k.main_grads_fp32 else "float32"
    out.update({"optimizer.optimizer": "adam", "optimizer.use_precision_aware_optimizer": aware,
                "optimizer.exp_avg_dtype": moments, "optimizer.exp_avg_sq_dtype": moments,
                "optimizer.main_grads_dtype": grads, "optimizer.main_params_dtype": "float32"})
    return out


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
        "model.add_bias_linear": m.add_proj_bias or m.add_mlp_bias, "model.add_qkv_bias": m.add_qkv_bias,
        # attention sinks (gpt-oss): Bridge's gpt_oss_bridge.py sets softmax_type "learnable"; CP rules read it
        "model.softmax_type": "learnable" if m.softmax_sinks else None,
        **_shape_fields(m),
    }


# The architecture fields a config may hold that name a different model when they differ from MODEL's
IDENTITY_FIELDS = ("model.num_layers", "model.hidden_size", "model.num_attention_heads", "model.num_moe_experts",
                   "model.moe_ffn_hidden_size", "model.moe_router_topk")


MLM_VOCAB_DIVISOR = 128


def trained_model(m: ModelSpec, config: dict) -> ModelSpec:
    """MODEL with the vocabulary padding (model.make_vocab_size_divisible_by; 128 under Megatron-LM arguments that
    leave it out, else the model's Bridge default), the FLOP counter of its launcher, and the MTP depth the config
    trains:
    `model.mtp_num_layers` where the config sets it (None or 0: none);
    none under Megatron-LM arguments that leave it out (`--mtp-num-layers` defaults to None, arguments.py); else the
    model's own (Bridge's model providers take num_nextn_predict_layers from the config.json)."""
    mlm = config.get(LAUNCHER) == "megatron-lm"
    divisor = config.get("model.make_vocab_size_divisible_by")  # the padding the launch asks
    if divisor is None and mlm:
        divisor = MLM_VOCAB_DIVISOR  # --make-vocab-size-divisible-by's default (arguments.py)
    if divisor is not None:
        if int(divisor) < 1:
            raise MoetuneError(f"model.make_vocab_size_divisible_by ({divisor}) must be at least 1")
        m = replace(m, vocab_divisor=int(divisor))
    if mlm:  # its log counts FLOPs as training.py does
        m = replace(m, flops_convention="megatron-lm")
    if "model.mtp_num_layers" in config:
        mtp = int(config["model.mtp_num_layers"] or 0)
    elif mlm:
        mtp = 0
    else:
        return m
    try:
        return m.with_mtp(mtp)
    except ValueError as err:
        raise MoetuneError(f"model.mtp_num_layers ({mtp}): {err}; set it to 0 or leave it out") from None


def architecture_conflicts(m: ModelSpec, config: dict) -> list[str]:
    """`key (config's vs model's)` for each identity field the config sets to another value than MODEL's."""
    mine = architecture_fields(m)
    return [f"{k} ({config[k]} vs {m.name}'s {mine[k]})" for k in IDENTITY_FIELDS
            if mine.get(k) is not None and config.get(k) is not None and config[k] != mine[k]]


# HF model types whose Megatron Bridge model bridge sets provider.moe_router_dtype = "fp32" (deepseek_v2_bridge.py,
# deepseek_v3_bridge.py, kimi_bridge.py, ernie_45_bridge.py, glm45_bridge.py, olmoe_bridge.py, nemotron_h_bridge.py,
# qwen3_next_bridge.py @067f987)
FP32_ROUTER_BRIDGES = ("deepseek_v2", "deepseek_v3", "kimi_k2", "ernie4_5_moe", "glm4_moe", "olmoe", "nemotron_h",
                       "qwen3_next")


def provider_fields(m: ModelSpec) -> dict[str, Any]:
    """What Megatron Bridge's model bridges set for every MoE model beside the architecture: grouped expert GEMMs and
    the alltoall dispatcher (deepseek_v3_bridge.py, qwen3_moe_bridge.py, gpt_oss_bridge.py, glm45_bridge.py,
    kimi_bridge.py ... provider.moe_grouped_gemm = True, moe_token_dispatcher_type = "alltoall"), and the recipes'
    BF16 mixed precision (recipes/common.py _pretrain_common: bf16_mixed). `check --model` fills them in where an
    overrides file leaves them to the recipe, so Megatron-Core does not judge the recipe's fields at its own
    defaults."""
    moe = {"model.moe_grouped_gemm": True, "model.moe_token_dispatcher_type": "alltoall"} if m.num_moe_layers else {}
    if m.num_moe_layers and m.model_type in FP32_ROUTER_BRIDGES:
        moe["model.moe_router_dtype"] = "fp32"
    return {**moe, "mixed_precision.bf16": True, "mixed_precision.params_dtype": "bfloat16",
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
    if m.attention_output_gate:
        out["model.attention_output_gate"] = True
    if m.mamba:
        out.update({"model.mamba_num_heads": m.mamba.num_heads, "model.mamba_head_dim": m.mamba.head_dim,
                    "model.mamba_state_dim": m.mamba.state_size, "model.mamba_num_groups": m.mamba.n_groups})
    return out


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


def _model_fields(e: Estimate) -> dict[str, Any]:
    """The architecture facts rules read (the recipe already sets them; the values are the model's own), and the
    model settings every plan makes."""
    m = e.model
    return {
        **architecture_fields(m),
        # every planned MoE config: grouped expert GEMMs (Megatron-Core requires them for moe_act recompute)
        # and the router kept in FP32 (seeds/000 FP8 Recipe Quick Decision)
        "model.moe_grouped_gemm": True if m.num_moe_layers else None,
        "model.moe_router_dtype": "fp32" if m.num_moe_layers else None,
        # no dropout, as Megatron Bridge's model bridges set it (deepseek_v3_bridge.py, qwen3_moe_bridge.py,
        # gpt_oss_bridge.py, glm45_bridge.py: hidden_dropout = 0.0; the HF configs' attention_dropout is 0.0) and as
        # the activation memory counts it; Megatron-LM's own default is 0.1, and Megatron-Core refuses hidden dropout
        # under graphed MLP/MoE recompute (transformer_config.py), which full-iteration graphs are
        "model.hidden_dropout": 0.0, "model.attention_dropout": 0.0,
        # the padding the memory and FLOPs were counted with: Megatron-LM's default (128) is not Bridge's for every
        # model (DeepSeek-V3 1280), so the emitted launch states it
        "model.make_vocab_size_divisible_by": m.vocab_divisor,
    }


def _cp_comm_type(config: dict) -> str:
    value = config.get("model.cp_comm_type") or "p2p"  # None: Megatron hands TE its default, p2p
    if isinstance(value, list):
        raise MoetuneError("model.cp_comm_type: a per-layer list is not modelled; give one type for every layer "
                           "(p2p, all_gather, a2a or a2a+p2p)")
    return value


def _hcp_a2a_size(config: dict) -> int | None:
    sizes = config.get("model.hierarchical_context_parallel_sizes")
    if not (sizes and config.get("model.cp_comm_type") == "a2a+p2p"):
        return None
    cp = int(config.get("model.context_parallel_size") or 1)
    if len(sizes) != 2 or int(sizes[0]) * int(sizes[1]) != cp:  # parallel_state.py asserts their product is CP
        raise MoetuneError(f"model.hierarchical_context_parallel_sizes {list(sizes)} must be [a2a, p2p] multiplying to "
                           f"context_parallel_size ({cp}); e.g. [{min(cp, 2)}, {max(cp // 2, 1)}]")
    return int(sizes[0])


def cp_fields(e: Estimate) -> dict[str, Any]:
    """cp_comm_type where CP is on (Megatron's default p2p otherwise), and the a2a+p2p group sizes it requires
    (hierarchical_context_parallel_sizes = [a2a, p2p]; Megatron-Bridge
    docs/training/hierarchical-context-parallel.md). estimate() has resolved a2a+p2p's a2a group
    (context_parallel.resolve_auto)."""
    k, lay = e.knobs, e.layout
    if lay.cp == 1:
        return {}
    out: dict[str, Any] = {"model.cp_comm_type": k.cp_comm_type}
    if k.cp_comm_type == "a2a+p2p":
        out["model.hierarchical_context_parallel_sizes"] = [k.hcp_a2a_size, lay.cp // k.hcp_a2a_size]
    return out


# Layer symbols of a Mamba hybrid's hybrid_layer_pattern (Megatron-Core hybrid_layer_allocation.Symbols, as
# specs/hf_readers.py reads Nemotron-H's hybrid_override_pattern).
HYBRID_SYMBOLS = {("mamba", "none"): "M", ("gqa", "none"): "*", ("none", "moe"): "E", ("none", "dense"): "-"}
HYBRID_SPLIT = "model.hybrid_layer_pattern"  # carries a hybrid's pipeline split, so it depends on the layout


def hybrid_fields(e: Estimate) -> dict[str, Any]:
    """A Mamba hybrid's split: HybridModel takes its stages from '|' in hybrid_layer_pattern (one segment per virtual
    stage, in Megatron's stage order; hybrid_layer_allocation.py select_pipeline_segment) and reads neither a layout
    string nor the first/last-stage flags beside the separators, so whatever split the layout has is written as
    separators and those fields are cleared."""
    m, lay = e.model, e.layout
    if not m.mamba:
        return {}
    symbols = [HYBRID_SYMBOLS[(k.mixer, k.mlp)] for k in m.layers]
    if lay.pp == 1:
        return {HYBRID_SPLIT: "".join(symbols)}
    try:
        chunks = pipeline_chunks(lay, m.num_layers, m.mtp_num_layers)
    except MoetuneError:  # a layout estimate() would refuse (rule probes build such): the pattern as it is
        return {HYBRID_SPLIT: "".join(symbols)}
    return {HYBRID_SPLIT: "|".join("".join(symbols[i] for i in c.layers) for c in stage_order(chunks)),
            "model.pipeline_model_parallel_layout": None, "model.num_layers_in_first_pipeline_stage": None,
            "model.num_layers_in_last_pipeline_stage": None, "model.account_for_embedding_in_pipeline_split": False,
            "model.account_for_loss_in_pipeline_split": False}


def to_config(e: Estimate) -> dict[str, Any]:
    """The normalized config of an estimate (None values are dropped)."""
    hybridep = {"env.NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": min(
        e.layout.ep, job_nvlink_domain(e.layout.world_size, e.gpu.gpus_per_node, e.gpu.nvlink_domain))} \
        if e.knobs.dispatcher == "hybridep" else {}
    out = {
        **_model_fields(e), **hybridep,
        "cluster.gpu": e.gpu.ref, "cluster.num_gpus": e.layout.world_size,
        "cluster.gpus_per_node": e.gpu.gpus_per_node, "cluster.nvlink_domain": e.gpu.nvlink_domain,
        **layout_fields(e.layout), **_knob_fields(e.knobs),
        # both: Bridge's recipe runner resets model.seq_length from the dataset's (recipe_runner.py
        # sync_model_dataset_sequence_length), and ConfigContainer asserts the two match (training/config.py)
        "model.seq_length": e.workload.seq_length, "dataset.seq_length": e.workload.seq_length,
        "train.micro_batch_size": e.workload.micro_batch_size,
        "train.global_batch_size": e.workload.gbs(e.layout),
        **cp_fields(e), **hybrid_fields(e),
    }
    # a model whose config.json has MTP layers, trained without them: the recipe's provider would add them back
    dropped_mtp = {"model.mtp_num_layers"} if e.model.mtp_layer_kind is not None and not e.model.mtp_num_layers \
        else set()
    return {k: v for k, v in out.items() if v is not None or k in UNSET_EXPLICITLY | dropped_mtp}


# Fields whose None is the plan's own choice (no recompute, no interleaving, no uneven or string split, no graph
# scope) and must reach the config: a recipe the overrides are applied to may set them (DeepSeek-V3's
# recompute_modules and layout string, GLM-4.5's num_layers_in_first_pipeline_stage); Megatron-Core refuses a layout
# string beside the split flags or a VPP that differs from the string's (transformer_config.py __post_init__), and
# may turn a leftover "full_iteration" scope into graphs whatever cuda_graph_impl says (Megatron Bridge
# perf_recipes/_common.py). Every other None is dropped: the recipe's value stands.
UNSET_EXPLICITLY = frozenset({
    "model.recompute_granularity", "model.recompute_modules", "model.recompute_method", "model.recompute_num_layers",
    "model.virtual_pipeline_model_parallel_size", "model.num_layers_in_first_pipeline_stage",
    "model.num_layers_in_last_pipeline_stage", "model.pipeline_model_parallel_layout", "model.cuda_graph_scope",
    "model.moe_expert_rank_capacity_factor", "mixed_precision.fp8", "mixed_precision.fp4", "model.moe_deepep_num_sms",
    "model.moe_hybridep_num_sms",
})


def _hybrid_split(config: dict) -> str | None:
    """The layout string equivalent to a hybrid_layer_pattern's '|' separators (layer counts per virtual stage;
    embedding first, loss last), or None without separators. MTP depths after '/' are not split."""
    pattern = config.get(HYBRID_SPLIT)
    if not pattern or "|" not in pattern:
        return None
    return write_pipeline_layout([len(seg) for seg in hybrid_segments(str(pattern))], 0)


def _get(config: dict, key: str, default: Any = None) -> Any:
    value = config.get(key, default)
    return default if value is None else value


def precision_of(config: dict) -> str:
    """The GEMM precision moetune models for a config: BF16, or an FP8/FP4 recipe on top of it. FP16 and pure FP32
    training (Megatron-LM arguments without --bf16) have no rates here, so they are refused by name."""
    if config.get("mixed_precision.fp16"):
        raise MoetuneError("the config trains in FP16 (mixed_precision.fp16 / --fp16); moetune models BF16 mixed "
                           "precision and FP8/FP4 recipes on it: use --bf16")
    if config.get(LAUNCHER) == "megatron-lm" and not config.get("mixed_precision.bf16"):
        raise MoetuneError("Megatron-LM arguments without --bf16 (or --fp16) train in FP32, which moetune does not "
                           "model; add --bf16 (MoE recipes train in BF16 mixed precision)")
    if config.get("mixed_precision.fp4"):
        return "nvfp4"
    recipe = config.get("mixed_precision.fp8_recipe")
    if not config.get("mixed_precision.fp8"):
        return "bf16"
    for name, fields in PRECISION.items():
        if fields.get("mixed_precision.fp8_recipe") == recipe:
            return name
    raise MoetuneError(f"mixed_precision.fp8_recipe={recipe!r} is not one moetune models; use blockwise, mxfp8, "
                       "tensorwise or delayed")


def _graph_scope(config: dict) -> tuple[str, ...]:
    """A config's CUDA graphs as the knobs name them: the whole step, its scopes, or, for a per-layer
    implementation with no scope, whole layers (Megatron-Core captures attention and the MLP or MoE when
    cuda_graph_modules is empty: transformer/transformer_layer.py)."""
    impl, modules, full = graph_setting(config)
    if impl == "none":
        return ()
    return ("full_iteration",) if full else tuple(modules) or ("attn", "mlp", "moe")


def _dispatcher(config: dict) -> str:
    kind = _get(config, "model.moe_token_dispatcher_type", "alltoall")
    if kind == "flex":
        return _get(config, "model.moe_flex_dispatcher_backend", "deepep")
    return kind


def _flex_sms(config: dict) -> int | None:
    """SMs of a fused dispatcher as the config sets them, else Megatron's default (not the tuned one: the config
    did not ask for more); None for the NCCL dispatchers."""
    backend = _dispatcher(config)
    return dispatcher_sms(config, backend) if backend in MEGATRON_FLEX_SMS else None


def from_config(config: dict[str, Any]) -> tuple[Layout, Workload, Knobs]:
    """Layout, workload and knobs of a normalized config (Megatron's defaults where a name is absent)."""
    if "cluster.num_gpus" not in config:
        raise MoetuneError("the config does not say how many GPUs: pass --gpus N")
    split = _hybrid_split(config) or config.get("model.pipeline_model_parallel_layout")
    # the layout string (or a hybrid pattern's separators) fixes the virtual stages: Layout derives VPP from it
    vpp = 1 if split else config.get("model.virtual_pipeline_model_parallel_size") or 1
    layout = Layout(
        world_size=config["cluster.num_gpus"], tp=_get(config, "model.tensor_model_parallel_size", 1),
        cp=_get(config, "model.context_parallel_size", 1), pp=_get(config, "model.pipeline_model_parallel_size", 1),
        vpp=vpp, ep=_get(config, "model.expert_model_parallel_size", 1),
        etp=_get(config, "model.expert_tensor_parallel_size", _get(config, "model.tensor_model_parallel_size", 1)),
        sequence_parallel=config.get("model.sequence_parallel"),
        first_stage_layers=config.get("model.num_layers_in_first_pipeline_stage"),
        last_stage_layers=config.get("model.num_layers_in_last_pipeline_stage"),
        pipeline_layout=split or None,
        account_for_embedding=bool(config.get("model.account_for_embedding_in_pipeline_split")),
        account_for_loss=bool(config.get("model.account_for_loss_in_pipeline_split")))
    workload = Workload(seq_length=_get(config, "model.seq_length", _get(config, "dataset.seq_length", 4096)),
                        micro_batch_size=_get(config, "train.micro_batch_size", 1),
                        global_batch_size=config.get("train.global_batch_size"))
    recompute, precision = _get(config, "model.recompute_granularity", "none"), precision_of(config)
    knobs = Knobs(
        precision=precision, recompute=recompute,
        recompute_modules=_named("model.recompute_modules", parse_modules, _get(config, "model.recompute_modules", []))
        if recompute == "selective" else frozenset(),
        # the optimizer's field, else DDP's (Megatron-LM's one switch sets both), else on as Bridge's recipes set it
        # on when either says so, as Bridge syncs them; a side the config leaves out is the recipe's (on)
        distributed_optimizer=bool(_get(config, "optimizer.use_distributed_optimizer", True))
        or bool(_get(config, "ddp.use_distributed_optimizer", True)),
        optimizer_offload_fraction=float(_get(config, "optimizer.optimizer_offload_fraction", 0.0))
        if config.get("optimizer.optimizer_cpu_offload") else 0.0,
        main_grads_fp32=_main_grads_fp32(config),
        # low-precision moments only under the precision-aware optimizer (rule
        # optimizer.low_precision_state_needs_precision_aware refuses them otherwise)
        adam_moments_bytes=2 if config.get("optimizer.exp_avg_dtype") in ("bf16", "bfloat16") and
        config.get("optimizer.use_precision_aware_optimizer") else 4,
        dispatcher=_dispatcher(config), flex_num_sms=_flex_sms(config),
        cuda_graph_scope=_graph_scope(config),
        ep_overlap=bool(config.get("comm_overlap.overlap_moe_expert_parallel_comm")),
        delay_wgrad=bool(config.get("comm_overlap.delay_wgrad_compute")),
        tp_comm_overlap=bool(config.get("comm_overlap.tp_comm_overlap")),
        overlap_grad_reduce=bool(config.get("ddp.overlap_grad_reduce")),  # Megatron's default: off
        overlap_param_gather=bool(config.get("ddp.overlap_param_gather")),
        routing="force-balance" if config.get("model.moe_router_force_load_balancing") else "dropless",
        # Megatron refuses it outside MXFP8; `check` reports that (rule precision.fp8_output_proj_needs_mxfp8)
        fp8_output_proj=bool(config.get("model.fp8_output_proj")) and precision == FP8_OUTPUT_PROJ_PRECISION,
        cp_comm_type=_cp_comm_type(config), hcp_a2a_size=_hcp_a2a_size(config),
        offload_modules=_offload_modules(config))
    return layout, workload, knobs


def _main_grads_fp32(config: dict) -> bool:
    """Whether gradients accumulate and reduce in FP32: Bridge's mixed_precision.grad_reduce_in_fp32; Megatron-LM
    turns it on only where --main-grads-dtype stays fp32 and --grad-reduce-in-bf16 is off (arguments.py
    validate_args)."""
    if config.get(LAUNCHER) == "megatron-lm" and config.get("optimizer.main_grads_dtype") not in (None, "float32"):
        return False
    return bool(_get(config, "mixed_precision.grad_reduce_in_fp32", True))


def _named(key: str, parse, value) -> frozenset[str]:
    """Megatron module names a config gives, each one Megatron knows (parse: knobs.parse_modules or
    parse_offload_modules), the error naming the config field."""
    try:
        return parse(value)
    except MoetuneError as err:
        raise MoetuneError(f"{key}: {err}") from None


def _offload_modules(config: dict) -> frozenset[str]:
    """Fine-grained activation offloading's modules; switched on with none named is Megatron-Core's error."""
    if not config.get("model.fine_grained_activation_offloading"):
        return frozenset()
    modules = _named("model.offload_modules", parse_offload_modules, _get(config, "model.offload_modules", []) or [])
    if not modules:
        raise MoetuneError("model.fine_grained_activation_offloading is on with no model.offload_modules; name the "
                           "modules (e.g. [expert_fc1, moe_act]) or turn it off")
    return modules
