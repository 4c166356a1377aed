"""What a Megatron-LM run was, as its log's argument dump says (training/arguments.py print_args, after validate_args
has filled it in): the GPUs, sequence, batch, layout, model shape and the knobs its speed rests on. One table serves
both checks of a log: against a prediction (planner/compare.py log_differences: a log of another job times nothing
the prediction says) and against a config given beside it (cli diagnose: the dump is what ran)."""

from typing import Any

from moetune.configio.mlm import argument_dump_config

# Dotted name (data/megatron_names.csv) -> (the dump's argparse destination, what the dump's None reads as). The
# destination is the flag's own spelling but where validate_args or the flag sets another (VPP from
# --num-virtual-stages-per-pipeline-rank, the FP8/FP4 formats, the world size no flag sets); None is Megatron-LM's
# "unset": one virtual stage, no FP8, no recompute, overlap off
RUN_SHAPE: dict[str, tuple[str, Any]] = {
    "model.seq_length": ("seq_length", None),
    "cluster.num_gpus": ("world_size", None),
    "train.global_batch_size": ("global_batch_size", None),
    "model.tensor_model_parallel_size": ("tensor_model_parallel_size", 1),
    "model.pipeline_model_parallel_size": ("pipeline_model_parallel_size", 1),
    "model.virtual_pipeline_model_parallel_size": ("virtual_pipeline_model_parallel_size", 1),
    "model.context_parallel_size": ("context_parallel_size", 1),
    # TransformerConfig's None is TE's p2p (Megatron-LM core/extensions/transformer_engine.py @ core_v0.18.2
    # TEDotProductAttention); argparse's default is ["p2p"] (training/arguments.py --cp-comm-type)
    "model.cp_comm_type": ("cp_comm_type", "p2p"),
    "model.expert_model_parallel_size": ("expert_model_parallel_size", 1),
    "model.expert_tensor_parallel_size": ("expert_tensor_parallel_size", None),
    "train.micro_batch_size": ("micro_batch_size", None),
    "model.num_layers": ("num_layers", None),
    "model.hidden_size": ("hidden_size", None),
    "model.num_moe_experts": ("num_experts", None),
    "model.moe_token_dispatcher_type": ("moe_token_dispatcher_type", None),
    "model.moe_flex_dispatcher_backend": ("moe_flex_dispatcher_backend", None),
    "mixed_precision.fp8": ("fp8", None),
    "mixed_precision.fp8_recipe": ("fp8_recipe", None),
    "mixed_precision.fp4": ("fp4", None),
    "comm_overlap.overlap_moe_expert_parallel_comm": ("overlap_moe_expert_parallel_comm", False),
    "comm_overlap.delay_wgrad_compute": ("delay_wgrad_compute", False),
    "model.cuda_graph_impl": ("cuda_graph_impl", "none"),
    "model.cuda_graph_scope": ("cuda_graph_modules", None),
    "model.recompute_granularity": ("recompute_granularity", None),
    "model.recompute_modules": ("recompute_modules", None),
    "ddp.overlap_grad_reduce": ("overlap_grad_reduce", False),
    "ddp.overlap_param_gather": ("overlap_param_gather", False),
    "ddp.use_distributed_optimizer": ("use_distributed_optimizer", False),
    "comm_overlap.tp_comm_overlap": ("tp_comm_overlap", False),
    "model.sequence_parallel": ("sequence_parallel", False),
    "model.mtp_num_layers": ("mtp_num_layers", None),
}
# Fields that mean something only where another holds a value (None: any; a callable: one it passes): print_args
# shows Megatron-LM's default recipe for a BF16 run, its backend for a non-flex dispatcher, its default module list
# without selective recompute and its default CP exchange at CP 1 (TransformerConfig.__post_init__ checks
# cp_comm_type only where context_parallel_size > 1, transformer_config.py @ core_v0.18.2)
ONLY_WHERE = {"mixed_precision.fp8_recipe": ("mixed_precision.fp8", None),
              "model.moe_flex_dispatcher_backend": ("model.moe_token_dispatcher_type", "flex"),
              "model.recompute_modules": ("model.recompute_granularity", "selective"),
              "model.cuda_graph_scope": ("model.cuda_graph_impl", "transformer_engine"),
              "model.cp_comm_type": ("model.context_parallel_size", lambda cp: cp > 1)}
# Lists that are per layer, compared in order: the others (module lists) compare as sets
PER_LAYER = {"model.cp_comm_type"}


def dumped_run(args: dict[str, str]) -> dict[str, Any]:
    """RUN_SHAPE's fields the dump ARGS state, in dotted names and their types (configio's argument_dump_config, which
    leaves out a value the field refuses); a None at what it reads as."""
    read = argument_dump_config(args)
    out = {key: unset if read[key] is None else read[key] for key, (_, unset) in RUN_SHAPE.items() if key in read}
    out |= {key: unset for key, (dest, unset) in RUN_SHAPE.items() if key not in read and args.get(dest) == "None"}
    return _graphs(out)


def _graphs(run: dict[str, Any]) -> dict[str, Any]:
    """RUN as Megatron-Core 0.18 normalizes its CUDA graphs (arguments.py _normalize_cuda_graph_modules_args): the
    deprecated local implementation over a full_iteration scope is the full_iteration implementation, which emit
    writes for releases before it; and a per-layer CP exchange list of one type as that type (argument_utils.py hands a
    one-item --cp-comm-type list over as its item; TEDotProductAttention takes each layer's from either)."""
    cp = run.get("model.cp_comm_type")
    if isinstance(cp, list) and cp and all(x == cp[0] for x in cp):
        run = run | {"model.cp_comm_type": cp[0]}
    if run.get("model.cuda_graph_impl") == "local" and "full_iteration" in (run.get("model.cuda_graph_scope") or ()):
        return run | {"model.cuda_graph_impl": "full_iteration", "model.cuda_graph_scope": []}
    return run


def config_run(config: dict[str, Any]) -> dict[str, Any]:
    """RUN_SHAPE's fields a dotted config holds, a None at what it reads as."""
    return _graphs({k: (unset if config[k] is None else config[k]) for k, (_, unset) in RUN_SHAPE.items()
                    if k in config})


def run_differences(ran: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """The RUN_SHAPE fields that both give and that differ, in RUN_SHAPE's order (a field of ONLY_WHERE only where
    both hold its gate's value); module lists compare as sets, per-layer lists (PER_LAYER) in order."""
    def same(key: str) -> bool:
        a, b = ran[key], other[key]
        listed = isinstance(a, list) and isinstance(b, list) and key not in PER_LAYER
        return sorted(a) == sorted(b) if listed else a == b

    def holds(value: Any, on: Any) -> bool:
        return value is not None and (on is None or (on(value) if callable(on) else value == on))

    def gated_off(key: str) -> bool:
        gate, on = ONLY_WHERE.get(key, (None, None))
        return gate is not None and not all(holds(r.get(gate), on) for r in (ran, other))

    return [k for k in RUN_SHAPE if k in ran and k in other and not gated_off(k) and not same(k)]
