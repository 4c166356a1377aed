"""moetune's knobs -> the normalized config's fields (Megatron Bridge dotted names, data/megatron_names.csv), which
planner/config_map.py to_config writes beside the model's fields, the layout, the CP exchange and the batch.
Precision recipes follow Bridge's mixed_precision presets (training/mixed_precision.py):
fp8-blockwise = e4m3 + "blockwise", mxfp8 = e4m3 + "mxfp8", fp8-current = hybrid + "tensorwise",
fp8-delayed = hybrid + "delayed", nvfp4 = fp4 e2m1 + "nvfp4".
"""

from typing import Any

from moetune.configio.types import Scopes
from moetune.layout.knobs import Knobs
from moetune.layout.param_gather import FP8_RECIPES
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


def knob_fields(k: Knobs) -> dict[str, Any]:
    """The fields of a plan's knobs, in the order to_config has always written them (each a recipe's value
    overridden, a None where the plan unsets one: config_map.py UNSET_EXPLICITLY)."""
    out = {**_step_fields(k), **_param_precision_fields(k), **_sharding_fields(k), **_dp_overlap_fields(k)}
    full = "full_iteration" in k.cuda_graph_scope
    out.update(STATIC_EXPERTS if full and k.dispatcher == "hybridep" else DYNAMIC_EXPERTS)
    out.update(_flex_fields(k))
    out["model.fine_grained_activation_offloading"] = bool(k.offload_modules)  # off overrides a recipe's on
    # a list always: Megatron-Core iterates it under paged stashing whatever the offload switch, and most recipes
    # hold None (transformer_config.py: set(self.offload_modules))
    out["model.offload_modules"] = sorted(k.offload_modules)
    whole = k.recompute == "full"
    out.update({"model.recompute_method": "uniform" if whole else None,
                "model.recompute_num_layers": 1 if whole else None})
    out.update(_optimizer_fields(k))
    return out


def _step_fields(k: Knobs) -> dict[str, Any]:
    """Precision, dispatcher, recompute, CUDA graphs, routing and the overlaps inside a layer's step."""
    kind, backend = DISPATCHER[k.dispatcher]
    full = "full_iteration" in k.cuda_graph_scope
    return {
        "mixed_precision.bf16": True, **PRECISION[k.precision],
        "mixed_precision.grad_reduce_in_fp32": k.main_grads_fp32,
        "model.moe_token_dispatcher_type": kind,
        "model.recompute_granularity": None if k.recompute == "none" else k.recompute,
        "model.recompute_modules": sorted(k.effective_modules) if k.recompute == "selective" else None,
        "model.cuda_graph_impl": ("local" if full else "transformer_engine") if k.cuda_graph_scope else "none",
        # written by no input: its list is no YAML list (emit writes the string a release before 0.16 takes)
        "model.cuda_graph_scope": Scopes(list(k.cuda_graph_scope)) or None,
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
    }


def _param_precision_fields(k: Knobs) -> dict[str, Any]:
    """The LM head's FP8 output and the low-precision weights the memory wall sized."""
    return {
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
    }


def _sharding_fields(k: Knobs) -> dict[str, Any]:
    """How the data-parallel ranks shard the model and its state: torch FSDP2, Megatron FSDP and its buffers, the
    distributed optimizer's copies."""
    return {
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
    }


def _dp_overlap_fields(k: Knobs) -> dict[str, Any]:
    """The gradient-reduce and parameter-gather overlaps, the distributed optimizer, and its CPU offload."""
    adam_sharded = k.distributed_optimizer and k.optimizer == "adam"
    step_overlap_off = k.precision == "mxfp8" or not k.overlap_param_gather  # Knobs turn it off under Muon
    return {
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


def _flex_fields(k: Knobs) -> dict[str, Any]:
    """A flex dispatcher's backend and SM count (none for alltoall and allgather)."""
    _, backend = DISPATCHER[k.dispatcher]
    if not backend:
        return {}
    out = {"model.moe_flex_dispatcher_backend": backend}
    out[f"model.moe_{backend}_num_sms"] = k.num_sms  # the name Bridge's releases set (newer Megatron routes it)
    # newer Megatron-Core routes both per-backend fields into one and refuses two that differ (a recipe's
    # moe_hybridep_num_sms=16 beside a DeepEP plan's 20: "Conflicting deprecated SM-count knobs")
    out[f"model.moe_{'hybridep' if backend == 'deepep' else 'deepep'}_num_sms"] = None
    return out


def _optimizer_fields(k: Knobs) -> dict[str, Any]:
    """The optimizer and its state's precision."""
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
    return {"optimizer.optimizer": name, "optimizer.use_precision_aware_optimizer": aware,
            "optimizer.exp_avg_dtype": moments, "optimizer.exp_avg_sq_dtype": moments,
            "optimizer.main_grads_dtype": grads, "optimizer.main_params_dtype": "float32"}
