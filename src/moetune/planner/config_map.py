"""moetune's layout and knobs -> the normalized config (Megatron Bridge dotted names, data/megatron_names.csv).

`to_config` turns an estimate or plan result into what `emit` writes and `check` reads: the model's own fields
(model_fields.py), the layout (configio/layout_map.py), the knobs, the CP exchange and a Mamba hybrid's pipeline
split. from_config.py reads a user's config back the other way.
Precision recipes follow Bridge's mixed_precision presets (training/mixed_precision.py):
fp8-blockwise = e4m3 + "blockwise", mxfp8 = e4m3 + "mxfp8", fp8-current = hybrid + "tensorwise",
fp8-delayed = hybrid + "delayed", nvfp4 = fp4 e2m1 + "nvfp4".
"""

from typing import Any

from moetune.configio.layout_map import HYBRID_SPLIT, layout_fields
from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.param_gather import FP8_RECIPES
from moetune.layout.pipeline import pipeline_chunks, stage_order
from moetune.layout.ranks import job_nvlink_domain
from moetune.planner.estimate import Estimate
from moetune.planner.model_fields import architecture_fields
from moetune.specs.hf_hybrid import HYBRID_SYMBOLS
from moetune.walls.memory import PAGED_STASH_CUDA

# Each writes the other family off too: a recipe's own FP8 (or FP4) would otherwise survive beside the plan's
# (Bridge training/mixed_precision.py refuses fp4 with fp8; a BF16 plan over an MXFP8 recipe would run MXFP8)
_FP8_FORMATS = {"fp8-blockwise": "e4m3", "mxfp8": "e4m3", "fp8-current": "hybrid", "fp8-delayed": "hybrid"}
PRECISION = {
    "bf16": {"mixed_precision.fp8": None, "mixed_precision.fp4": None},
    **{name: {"mixed_precision.fp8": fmt, "mixed_precision.fp8_recipe": FP8_RECIPES[name], "mixed_precision.fp4": None}
       for name, fmt in _FP8_FORMATS.items()},  # param_gather.py's recipe names, as the offload test reads them
    "nvfp4": {"mixed_precision.fp4": "e2m1", "mixed_precision.fp4_recipe": "nvfp4", "mixed_precision.fp8": None},
}
# Bridge's preset of each (training/mixed_precision.py): bridge_overrides.py starts from it where the recipe's own
# precision is of another family
PRECISION_PRESET = {"bf16": "bf16_mixed", "fp8-blockwise": "bf16_with_fp8_subchannel_scaling_mixed",
                    "mxfp8": "bf16_with_mxfp8_mixed", "fp8-current": "bf16_with_fp8_current_scaling_mixed",
                    "fp8-delayed": "bf16_with_fp8_delayed_scaling_mixed", "nvfp4": "bf16_with_nvfp4_mixed"}
DISPATCHER = {"alltoall": ("alltoall", None), "allgather": ("allgather", None), "deepep": ("flex", "deepep"),
              "hybridep": ("flex", "hybridep")}


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
    adam_sharded = k.distributed_optimizer and k.optimizer == "adam"
    step_overlap_off = k.precision == "mxfp8" or not k.overlap_param_gather  # Knobs turn it off under Muon
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
        # the weights as the memory wall sized them (Knobs.fp8_params); Bridge copies both onto the DDP config and
        # fp8_param onto the model's. MXFP8 parameters gather through the gradient buffer: Bridge asserts the reuse
        # with them (rule precision.mxfp8_param_gather_reuse) and Megatron-Core refuses it without them
        # (distributed_data_parallel_config.py); TE cannot remap an MXFP8Tensor into a parameter buffer
        # (tensor/utils.py replace_raw_data)
        "mixed_precision.fp8_param_gather": k.fp8_params,
        "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag": k.fp8_params and k.precision == "mxfp8",
        # NVFP4 weights likewise (Knobs.fp4_params); Bridge keeps fp4_param in step with it
        "mixed_precision.fp4_param_gather": k.fp4_params,
        # torch FSDP2 in place of Megatron's DDP (rules fsdp.torch_fsdp2_*); the no-reshard switch is Megatron-LM's
        # alone (megatron_names.csv), written only where it departs from fully_shard's default
        "dist.use_torch_fsdp2": k.torch_fsdp2 or None,
        "dist.torch_fsdp2_reshard_after_forward": False if k.torch_fsdp2 and not k.fsdp2_reshard_after_forward
        else None,
        # Megatron FSDP and its strategy (layout/dp_sharding.py), on the ddp section, which Megatron-LM's
        # --use-megatron-fsdp sets and Bridge syncs dist's switch onto, and the checkpoint format it asserts (rule
        # fsdp.megatron_fsdp_ckpt_format)
        "ddp.use_megatron_fsdp": True if k.megatron_fsdp else None,
        "ddp.data_parallel_sharding_strategy": k.megatron_fsdp,
        "checkpoint.ckpt_format": "fsdp_dtensor" if k.megatron_fsdp else None,
        # the distributed optimizer's copies the state was sized with (one: Megatron's default, left out)
        "ddp.num_distributed_optimizer_instances": k.num_distributed_optimizer_instances
        if k.num_distributed_optimizer_instances > 1 else None,
        # and what Megatron FSDP's copies shard between them (no_shard: Megatron's default, left out)
        "ddp.outer_dp_sharding_strategy": k.outer_dp_sharding_strategy
        if k.outer_dp_sharding_strategy != "no_shard" else None,
        # and the transient buffers it was sized with (layout/dp_sharding.py; off and unset: Megatron's defaults)
        "ddp.fsdp_double_buffer": True if k.fsdp_double_buffer else None,
        "ddp.suggested_communication_unit_size": k.suggested_communication_unit_size,
        # without the distributed optimizer there are no parameter shards to gather (Megatron-LM asserts it)
        "ddp.overlap_grad_reduce": k.overlap_grad_reduce,
        "ddp.overlap_param_gather": k.overlap_param_gather,
        # and on the comm_overlap section, which Bridge copies onto ddp with the distributed optimizer, its own unset
        # values as on for DP > 1 whatever ddp says (configio/finalize.py settle_dp_overlap)
        "comm_overlap.overlap_grad_reduce": k.overlap_grad_reduce,
        "comm_overlap.overlap_param_gather": k.overlap_param_gather,
        # Bridge turns the distributed optimizer on for both when either is true (config.py
        # _validate_and_sync_distributed_optimizer_settings): both are written; Muon shards layer-wise instead
        # (dist_muon, Kimi-K2's recipes), with the distributed optimizer off
        "ddp.use_distributed_optimizer": adam_sharded,
        # the first bucket's parameter gather under the optimizer step: moetune does not price it; Megatron-Core
        # refuses it beside MXFP8's reused grad buffer (optimizer_config.py, core_v0.19.0; Bridge's MXFP8 preset
        # reuses it) and under the layer-wise optimizer (rules optimizer.mxfp8_reuse_step_overlap and
        # optimizer.layerwise_param_gather_overlap); without a parameter gather it has nothing to overlap. There a
        # recipe's on (DeepSeek-V3's BF16 and FP8 perf recipes) is turned off, on both sections Bridge reads
        "optimizer.overlap_param_gather_with_optimizer_step": False if step_overlap_off else None,
        "comm_overlap.overlap_param_gather_with_optimizer_step": False if step_overlap_off else None,
        "optimizer.use_distributed_optimizer": adam_sharded,
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
    # the optimizer the memory wall sized, whatever the recipe's: Adam with FP32 or BF16 moments (DeepSeek-V3's H100
    # recipe: BF16), or Muon (Kimi-K2's recipes: dist_muon, the layer-wise distributed optimizer); Megatron's
    # precision-aware optimizer holds BF16 moments, and its code path carries the CPU offload (Megatron-LM
    # arguments.py asserts it with --optimizer-cpu-offload)
    moments = "bfloat16" if k.adam_moments_bytes == 2 else "float32"  # the normalized spelling (configio/types.py)
    aware = k.adam_moments_bytes == 2 or k.optimizer_offload_fraction > 0
    # main grads as the plan counts them: FP32 unless BF16 and the precision-aware optimizer takes them (Megatron-Core
    # refuses BF16 main grads without it: DeepSeek-V3's and Moonlight's H100 recipes set them)
    grads = "bfloat16" if aware and not k.main_grads_fp32 else "float32"
    name = ("dist_muon" if k.distributed_optimizer else "muon") if k.optimizer == "muon" else "adam"
    out.update({"optimizer.optimizer": name, "optimizer.use_precision_aware_optimizer": aware,
                "optimizer.exp_avg_dtype": moments, "optimizer.exp_avg_sq_dtype": moments,
                "optimizer.main_grads_dtype": grads, "optimizer.main_params_dtype": "float32"})
    return out


def _model_fields(e: Estimate) -> dict[str, Any]:
    """The architecture facts rules read (the recipe already sets them; the values are the model's own), and the
    model settings every plan makes."""
    m = e.model
    return {**architecture_fields(m), **_planned_model_fields(bool(m.num_moe_layers), m.vocab_divisor),
            # the router's dtype the step was priced with (Knobs.moe_router_dtype; a plan's: FP32, as seeds/000 FP8
            # Recipe Quick Decision keeps it); to_config writes its None too, over a recipe's FP32 (bf16_router)
            "model.moe_router_dtype": e.knobs.moe_router_dtype if m.num_moe_layers else None,
            # the dropout the activations were counted with (a plan's: none, NO_DROPOUT)
            "model.hidden_dropout": e.knobs.hidden_dropout, "model.attention_dropout": e.knobs.attention_dropout}


def _planned_model_fields(moe: bool, vocab_divisor: int) -> dict[str, Any]:
    """The model settings a plan makes whatever the model's architecture."""
    return {
        # every planned MoE config: grouped expert GEMMs (Megatron-Core requires them for moe_act recompute)
        "model.moe_grouped_gemm": True if moe else None,
        # the padding the memory and FLOPs were counted with: Megatron-LM's default (128) is not Bridge's for every
        # model (DeepSeek-V3 1280), so the emitted launch states it
        "model.make_vocab_size_divisible_by": vocab_divisor,
    }


CP_FIELDS = ("model.cp_comm_type", "model.hierarchical_context_parallel_sizes")


def cp_fields(e: Estimate) -> dict[str, Any]:
    """cp_comm_type where CP is on (Megatron's default p2p otherwise), and the a2a+p2p group sizes it requires
    (hierarchical_context_parallel_sizes = [a2a, p2p]; Megatron-Bridge
    docs/training/hierarchical-context-parallel.md). estimate() has resolved a2a+p2p's a2a group
    (context_parallel.resolve_auto)."""
    k, lay = e.knobs, e.layout
    if lay.cp == 1:
        return {}
    out: dict[str, Any] = {CP_FIELDS[0]: k.cp_comm_type}
    if k.cp_comm_type == "a2a+p2p":
        out[CP_FIELDS[1]] = [k.hcp_a2a_size, lay.cp // k.hcp_a2a_size]
    return out


# Layer symbols of a Mamba hybrid's hybrid_layer_pattern (Megatron-Core hybrid_layer_allocation.Symbols), the inverse of
# the table specs/hf_hybrid.py reads Nemotron-H's hybrid_override_pattern with.
LAYER_SYMBOL = {kind: symbol for symbol, kind in HYBRID_SYMBOLS.items()}  # (mixer, mlp) -> hybrid_layer_pattern


def hybrid_fields(e: Estimate) -> dict[str, Any]:
    """A Mamba hybrid's split: HybridModel takes its stages from '|' in hybrid_layer_pattern (one segment per virtual
    stage, in Megatron's stage order; hybrid_layer_allocation.py select_pipeline_segment) and reads neither a layout
    string nor the first/last-stage flags beside the separators, so whatever split the layout has is written as
    separators and those fields are cleared."""
    m, lay = e.model, e.layout
    if not m.mamba:
        return {}
    symbols = [LAYER_SYMBOL[(k.mixer, k.mlp)] for k in m.layers]
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
    # Transformer Engine >= 2.10 offloads weights too unless this is set; Bridge raises without it (rule
    # env.cpu_offload_v1), and emit's env.sh writes it (emit/environment.py)
    offload_env = {"env.NVTE_CPU_OFFLOAD_V1": 1} if e.knobs.offload_modules else {}
    out = {
        **_model_fields(e), **hybridep, **offload_env,
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
    # a MoE model's BF16 router (None): the model bridge may set FP32 (model_fields.py bridge_router_dtype)
    bf16_router = {"model.moe_router_dtype"} if e.model.num_moe_layers else set()
    return {k: v for k, v in out.items() if v is not None or k in UNSET_EXPLICITLY | dropped_mtp | bf16_router}


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


# The fields a plan's config may set beside the model's architecture and the cluster: its layout, knobs, CP exchange,
# MTP depth and batch (to_config). Emit writes a Megatron-LM launch's own values of them over a Bridge recipe, as a
# plan writes its own (emit/bridge.py bridge_config). Declared, not derived: tests/planner/test_config_map.py checks it
# against the fields to_config writes across plans that between them set every knob.
PLAN_FIELDS = frozenset({
    "comm_overlap.delay_wgrad_compute", "comm_overlap.overlap_grad_reduce",
    "comm_overlap.overlap_moe_expert_parallel_comm", "comm_overlap.overlap_param_gather",
    "comm_overlap.overlap_param_gather_with_optimizer_step", "comm_overlap.tp_comm_overlap", "dataset.seq_length",
    "ddp.overlap_grad_reduce", "ddp.overlap_param_gather", "ddp.use_distributed_optimizer", "mixed_precision.bf16",
    "mixed_precision.fp4", "mixed_precision.fp4_param_gather", "mixed_precision.fp8",
    "mixed_precision.fp8_param_gather", "mixed_precision.grad_reduce_in_fp32",
    "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag",
    "model.account_for_embedding_in_pipeline_split", "model.account_for_loss_in_pipeline_split",
    "model.attention_dropout", "model.context_parallel_size", "model.cp_comm_type", "model.cuda_graph_impl",
    "model.cuda_graph_scope", "model.expert_model_parallel_size", "model.expert_tensor_parallel_size",
    "model.fine_grained_activation_offloading", "model.fp8_output_proj", "model.hidden_dropout",
    "model.hierarchical_context_parallel_sizes", "model.make_vocab_size_divisible_by", "model.moe_deepep_num_sms",
    "model.moe_expert_rank_capacity_factor", "model.moe_flex_dispatcher_backend", "model.moe_grouped_gemm",
    "model.moe_hybridep_num_sms", "model.moe_paged_stash", "model.moe_paged_stash_buffer_size_factor_cuda",
    "model.moe_router_dtype", "model.moe_router_force_load_balancing", "model.moe_shared_expert_overlap",
    "model.moe_token_dispatcher_type", "model.mtp_num_layers", "model.num_layers_in_first_pipeline_stage",
    "model.num_layers_in_last_pipeline_stage", "model.offload_modules", "model.pipeline_model_parallel_layout",
    "model.pipeline_model_parallel_size", "model.recompute_granularity", "model.recompute_method",
    "model.recompute_modules", "model.recompute_num_layers", "model.sequence_parallel",
    "model.tensor_model_parallel_size", "model.use_te_rng_tracker", "model.use_transformer_engine_op_fuser",
    "model.virtual_pipeline_model_parallel_size", "optimizer.exp_avg_dtype", "optimizer.exp_avg_sq_dtype",
    "optimizer.main_grads_dtype", "optimizer.main_params_dtype", "optimizer.optimizer",
    "optimizer.optimizer_cpu_offload", "optimizer.optimizer_offload_fraction",
    "optimizer.overlap_param_gather_with_optimizer_step", "optimizer.use_distributed_optimizer",
    "optimizer.use_precision_aware_optimizer", "rerun_state_machine.check_for_nan_in_loss", "rng.te_rng_tracker",
    "train.global_batch_size",
})
