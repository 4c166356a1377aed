"""The vocabulary of the training knobs (layout/knobs.py): the values Megatron names for precision recipes, token
dispatchers, CUDA-graph scopes, CP exchanges and router dtypes, and the switches Knobs checks are switches."""

PRECISIONS: tuple[str, ...] = ("bf16", "fp8-blockwise", "fp8-delayed", "fp8-current", "mxfp8", "nvfp4")
DISPATCHERS: tuple[str, ...] = ("alltoall", "deepep", "hybridep", "allgather")
# Knobs that are on or off (Knobs checks their type)
SWITCHES = ("distributed_optimizer", "main_grads_fp32", "ep_overlap", "delay_wgrad", "tp_comm_overlap",
            "overlap_grad_reduce", "overlap_param_gather", "fp8_output_proj", "torch_fsdp2",
            "fsdp2_reshard_after_forward", "fsdp_double_buffer")
# The one recipe under which Megatron-Core builds the LM head as a TE layer (fp8_output_proj; TransformerConfig refuses
# it with any other, megatron/core/transformer/transformer_config.py).
FP8_OUTPUT_PROJ_PRECISION = "mxfp8"
# Megatron-Core's moe_router_dtype values (TransformerConfig: Optional[Literal['fp32', 'fp64']])
ROUTER_DTYPES: tuple[str | None, ...] = ("fp32", "fp64", None)
# Knobs' moe_router_dtype where nothing sets it: what every plan's config sets (planner/config_map.py, seeds/000 FP8
# Recipe Quick Decision); a config that leaves it out runs its model bridge's (planner/model_fields.py
# bridge_router_dtype). estimate's options and a saved result without the knob read it too.
PLAN_ROUTER_DTYPE = "fp32"
CUDA_GRAPH_SCOPES: tuple[str, ...] = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full_iteration")
# Megatron's cp_comm_type values (TransformerConfig; Transformer Engine runs them); "auto" lets a plan pick per layout
CP_COMM_TYPES: tuple[str, ...] = ("p2p", "all_gather", "a2a", "a2a+p2p")
# The exchanges a layout at CP 1 may name: Megatron-Core validates cp_comm_type only at CP > 1 (TransformerConfig
# __post_init__) and reports its unset value as p2p there, as estimate's and plan's JSON do; another is a silent no-op
CP1_COMM_TYPES: tuple[str, ...] = ("auto", "p2p")
