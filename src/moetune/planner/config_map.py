"""moetune's layout and knobs -> the normalized config (Megatron Bridge dotted names, data/megatron_names.csv).

`to_config` turns an estimate or plan result into what `emit` writes and `check` reads: the model's own fields
(model_fields.py), the layout (configio/layout_map.py), the knobs (knob_fields.py, with the precision recipes), the
CP exchange and a Mamba hybrid's pipeline split. from_config.py reads a user's config back the other way.
"""

from typing import Any

from moetune.configio.layout_map import HYBRID_SPLIT, layout_fields
from moetune.errors import MoetuneError
from moetune.layout.pipeline import pipeline_chunks, stage_order
from moetune.layout.ranks import job_nvlink_domain
from moetune.planner.estimate import Estimate
from moetune.planner.knob_fields import knob_fields
from moetune.planner.model_fields import architecture_fields
from moetune.specs.hf_hybrid import HYBRID_SYMBOLS


def _model_fields(e: Estimate) -> dict[str, Any]:
    """The architecture facts rules read (the recipe already sets them; the values are the model's own), and the
    model settings every plan makes."""
    m = e.model
    return {**architecture_fields(m), **_planned_model_fields(bool(m.num_moe_layers), m.vocab_divisor),
            # the router's dtype the step was priced with (Knobs.moe_router_dtype; a plan's: FP32, as seeds/000 FP8
            # Recipe Quick Decision keeps it); to_config writes its None too, over a recipe's FP32 (bf16_router)
            "model.moe_router_dtype": e.knobs.moe_router_dtype if m.num_moe_layers else None,
            # the dropout the activations were counted with (a plan's: none, NO_DROPOUT)
            "model.hidden_dropout": e.knobs.hidden_dropout, "model.attention_dropout": e.knobs.attention_dropout,
            # the DSA kernels the step was priced with (walls/dsa.py; Bridge's GLM-5 recipes set the same): Megatron-
            # Core's default "none" runs the unfused PyTorch path, whose dense scores moetune does not price
            **({"model.dsa_kernel_backend": "cudnn"} if m.dsa else {})}


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
        **layout_fields(e.layout), **knob_fields(e.knobs),
        # both: Bridge's recipe runner resets model.seq_length from the dataset's (recipe_runner.py
        # sync_model_dataset_sequence_length), and ConfigContainer asserts the two match (training/config.py)
        "model.seq_length": e.workload.seq_length, "dataset.seq_length": e.workload.seq_length,
        "train.micro_batch_size": e.workload.micro_batch_size,
        "train.global_batch_size": e.workload.gbs(e.layout),
        # Python's GC collected by hand every 100 steps, as Bridge's recipes set it (recipes/common.py
        # manual_gc=True, manual_gc_interval=100; scripts/performance/utils/overrides.py): Megatron-LM leaves it off
        # (arguments.py --manual-gc), so the launch says it, and rule host.manual_gc (seeds/000 Phase 3) is met
        "train.manual_gc": True, "train.manual_gc_interval": 100,
        **cp_fields(e), **hybrid_fields(e),
    }
    # the op fuser (STATIC_EXPERTS) fuses a GLU expert only under TE's CuTe DSL kernel (rule env.op_fuser_cutedsl), a
    # non-gated one only as the weighted squared ReLU, as Bridge's recipes set beside it (perf_recipes/nemotronh/
    # common.py, */gb200/*.py env_vars @067f987; rule compute.op_fuser_activation)
    if out.get("model.use_transformer_engine_op_fuser") and e.model.gated_linear_unit:
        out["env.NVTE_CUTEDSL_FUSED_GROUPED_MLP"] = 1
    elif out.get("model.use_transformer_engine_op_fuser") and e.model.activation == "relu2":
        out["model.use_fused_weighted_squared_relu"] = True
    # a model whose config.json has MTP layers, trained without them: the recipe's provider would add them back
    dropped_mtp = {"model.mtp_num_layers"} if e.model.mtp_layer_kind is not None and not e.model.mtp_num_layers \
        else set()
    # a MoE model's BF16 router (None): the model bridge may set FP32 (model_fields.py bridge_router_dtype)
    bf16_router = {"model.moe_router_dtype"} if e.model.num_moe_layers else set()
    kept = UNSET_EXPLICITLY | dropped_mtp | bf16_router  # once, not per None (the planner's knob probe asks often)
    return {k: v for k, v in out.items() if v is not None or k in kept}


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
    "model.cuda_graph_scope", "model.dsa_kernel_backend", "model.expert_model_parallel_size",
    "model.expert_tensor_parallel_size",
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
    "train.global_batch_size", "train.manual_gc", "train.manual_gc_interval",
})
