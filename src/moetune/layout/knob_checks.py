"""What a set of Knobs must hold to be a configuration Megatron runs: each value in its vocabulary
(layout/knob_values.py), and the pairs Megatron-LM, Megatron-Core or Bridge refuse, each refused in one line naming the
value and the fix. Knobs.__post_init__ calls these; the values Megatron itself turns on or off (the distributed
optimizer under Megatron FSDP, the overlapped parameter gather without shards) it settles between them."""

from moetune.errors import MoetuneError
from moetune.layout.dp_sharding import MEGATRON_FSDP_STRATEGIES, check_outer_sharding
from moetune.layout.knob_values import (
    CP_COMM_TYPES,
    CUDA_GRAPH_SCOPES,
    DISPATCHERS,
    FP8_OUTPUT_PROJ_PRECISION,
    PRECISIONS,
    ROUTER_DTYPES,
    SWITCHES,
)
from moetune.layout.modules import parse_offload_modules, unsaved_offloads
from moetune.layout.param_gather import PARAM_SWITCHES


def check_optimizer(k) -> None:
    """The switches are switches, and the optimizer's own settings agree."""
    for name in SWITCHES:  # a saved plan edited by hand: "yes" or 1 would read as on
        if not isinstance(getattr(k, name), bool):
            raise MoetuneError(f"{name} is {getattr(k, name)!r}; it takes true or false")
    if k.adam_moments_bytes not in (2, 4):
        raise MoetuneError(f"adam_moments_bytes ({k.adam_moments_bytes!r}) must be 4 (FP32 Adam moments) or 2 "
                           "(BF16, the precision-aware optimizer's)")
    if k.optimizer not in ("adam", "muon"):
        raise MoetuneError(f"optimizer {k.optimizer!r}: moetune models adam and muon (dist_muon: muon with the "
                           "layer-wise distributed optimizer)")
    if k.optimizer == "muon" and (k.adam_moments_bytes == 2 or k.optimizer_offload_fraction > 0):
        raise MoetuneError("Muon runs without the precision-aware optimizer that BF16 moments and optimizer "
                           "offload need (Megatron-LM builds emerging optimizers apart): drop --bf16-moments and "
                           "--optimizer-offload, or use adam")


def check_megatron_fsdp(k) -> None:
    """Megatron FSDP's strategy, its outer (hybrid) sharding and communication unit; never beside torch FSDP2."""
    if k.megatron_fsdp is not None and k.megatron_fsdp not in MEGATRON_FSDP_STRATEGIES:
        raise MoetuneError(f"data_parallel_sharding_strategy {k.megatron_fsdp!r}: Megatron FSDP takes "
                           f"{', '.join(MEGATRON_FSDP_STRATEGIES)}")
    if k.megatron_fsdp and k.torch_fsdp2:  # Bridge's ConfigContainer.validate raises the same
        raise MoetuneError("Megatron FSDP and torch FSDP2 both wrap the model; they are mutually exclusive: keep "
                           "one (use_megatron_fsdp or use_torch_fsdp2)")
    check_outer_sharding(k.outer_dp_sharding_strategy, k.megatron_fsdp,
                         k.num_distributed_optimizer_instances)
    unit = k.suggested_communication_unit_size
    if unit is not None and not (isinstance(unit, int) and not isinstance(unit, bool) and unit > 0):
        raise MoetuneError(f"suggested_communication_unit_size ({unit!r}) must be a whole number of elements > 0, "
                           "or left unset for Megatron FSDP's default")


def check_knobs(k) -> None:
    """Every other value in its vocabulary, and the pairs Megatron refuses."""
    if k.routing not in ("dropless", "force-balance"):
        raise MoetuneError(f"routing {k.routing!r}: choose dropless or force-balance")
    if k.precision not in PRECISIONS:
        raise MoetuneError(f"unknown precision {k.precision!r}; choose from {', '.join(PRECISIONS)}")
    if k.recompute not in ("none", "selective", "full"):
        raise MoetuneError(f"--recompute {k.recompute!r}: choose none, selective or full")
    if k.recompute != "selective" and k.recompute_modules:
        raise MoetuneError("--recompute-modules needs --recompute selective")
    if not 0.0 <= k.optimizer_offload_fraction <= 1.0:
        raise MoetuneError(f"--optimizer-offload ({k.optimizer_offload_fraction}) must be in [0, 1]")
    if not k.distributed_optimizer and (k.adam_moments_bytes == 2 or k.optimizer_offload_fraction > 0):
        # both need Megatron's precision-aware optimizer, which needs the distributed one (optimizer_config.py,
        # optimizer/__init__.py "--use-precision-aware-optimizer only supported with distributed optimizer")
        what = "--bf16-moments" if k.adam_moments_bytes == 2 else "--optimizer-offload"
        raise MoetuneError(f"{what} needs the distributed optimizer (Megatron's precision-aware optimizer runs "
                           "only there): turn it on (Megatron-LM --use-distributed-optimizer; drop "
                           "--no-distributed-optimizer), or drop it")
    check_offloads(k)
    if not (isinstance(k.num_distributed_optimizer_instances, int)
            and k.num_distributed_optimizer_instances >= 1):
        raise MoetuneError(f"num_distributed_optimizer_instances ({k.num_distributed_optimizer_instances!r}) "
                           "must be a whole number of 1 or more")
    for name in ("hidden_dropout", "attention_dropout"):
        if not (isinstance(getattr(k, name), (int, float)) and 0 <= getattr(k, name) < 1):
            raise MoetuneError(f"{name} ({getattr(k, name)!r}) must be a rate in [0, 1)")
    if k.moe_router_dtype not in ROUTER_DTYPES:
        raise MoetuneError(f"moe_router_dtype {k.moe_router_dtype!r}: choose fp32, fp64 or null (the "
                           "activations' BF16; Megatron-Core's TransformerConfig takes those)")
    if k.dispatcher not in DISPATCHERS:
        raise MoetuneError(f"unknown dispatcher {k.dispatcher!r}; choose from {', '.join(DISPATCHERS)}")
    if k.flex_num_sms is not None and not 1 <= k.flex_num_sms <= 160:
        raise MoetuneError(f"flex_num_sms ({k.flex_num_sms}) must be between 1 and the GPU's SM count")
    bad = sorted(set(k.cuda_graph_scope) - set(CUDA_GRAPH_SCOPES))
    if bad:
        raise MoetuneError(f"unknown CUDA-graph scope(s) {bad}; choose from {', '.join(CUDA_GRAPH_SCOPES)}")
    if k.fp8_output_proj and k.precision != FP8_OUTPUT_PROJ_PRECISION:
        raise MoetuneError(f"fp8_output_proj needs --precision {FP8_OUTPUT_PROJ_PRECISION}, got {k.precision} "
                           "(Megatron-Core TransformerConfig refuses it otherwise); drop --fp8-output-proj")
    check_param_switches(k)
    check_cp(k)
    check_token_imbalance(k)
    check_routed_buffer_factor(k)


def check_offloads(k) -> None:
    """The activation offloads: names Megatron knows, and the recompute they need."""
    parse_offload_modules(tuple(k.offload_modules))
    if "attn_proj" in k.offload_modules and "core_attn" not in k.offload_modules:
        raise MoetuneError("--offload-modules attn_proj needs core_attn too (Megatron-Core: attn_proj cannot be "
                           "offloaded alone without core_attn, transformer_config.py)")
    if k.recompute != "full" and (inside := unsaved_offloads(k.recompute, k.recompute_modules,
                                                                 k.offload_modules)):
        raise MoetuneError(f"--offload-modules {','.join(inside)} with 'moe' recompute: recomputing the whole MoE "
                           "layer saves nothing inside it to offload (Megatron-Core asserts, "
                           "transformer_config.py); drop 'moe' from the recompute modules or those offloads")
    if k.offload_modules and k.recompute == "full":
        raise MoetuneError("--offload-modules with --recompute full: full recompute keeps only layer inputs, "
                           "so there is nothing fine-grained to offload; use selective recompute")


def check_cp(k) -> None:
    """The CP exchange, and hierarchical CP's group sizes beside it."""
    if k.cp_comm_type not in (*CP_COMM_TYPES, "auto"):
        raise MoetuneError(f"unknown cp_comm_type {k.cp_comm_type!r}; choose from {', '.join(CP_COMM_TYPES)}")
    if k.hcp_a2a_size is not None and k.hcp_a2a_size < 1:
        raise MoetuneError(f"hierarchical CP sizes: the a2a group ({k.hcp_a2a_size}) must be 1 or more")
    if k.hcp_a2a_size is not None and k.cp_comm_type != "a2a+p2p":  # the CLI says it with its flags first
        raise MoetuneError(f"hierarchical CP sizes (a2a group {k.hcp_a2a_size}) size the groups of cp_comm_type "
                           f"a2a+p2p, but cp_comm_type is {k.cp_comm_type}: set a2a+p2p, or drop the sizes")


# what a measured token imbalance is: a ratio of token counts (nan and inf are no measurement)
TOKEN_IMBALANCE_RANGE = "a number >= 1, the busiest expert rank's tokens over the mean (1: every rank gets the mean)"


def token_imbalance_in_range(value: float | None) -> bool:
    """Whether a measured token imbalance (None: not given) is TOKEN_IMBALANCE_RANGE's: the one test of Knobs and of
    plan's --token-imbalance option."""
    return value is None or 1.0 <= value < float("inf")


def check_token_imbalance(k) -> None:
    """A measured token imbalance: a dropless routing's factor, at least 1."""
    if k.token_imbalance is not None and k.routing == "force-balance":
        raise MoetuneError(f"--token-imbalance ({k.token_imbalance:g}) weighs dropless routing; force-balanced "
                           "routing sends every expert rank the mean: drop it or pass --routing dropless")
    if not token_imbalance_in_range(k.token_imbalance):
        raise MoetuneError(f"token_imbalance ({k.token_imbalance}) must be {TOKEN_IMBALANCE_RANGE}")


def check_routed_buffer_factor(k) -> None:
    """A saved result's routed_buffer_factor (a config's own full-iteration buffers, configio/finalize.py
    routed_buffer_factor) scales memory: a hand-edited string had raised TypeError, and a negative one sized the
    buffers below nothing."""
    factor = k.routed_buffer_factor
    if factor is not None and not (isinstance(factor, (int, float)) and not isinstance(factor, bool)
                                   and 0 < factor < float("inf")):
        raise MoetuneError(f"routed_buffer_factor ({factor!r}) must be a number > 0 (the routed-expert buffers "
                           "over the mean tokens), or null for a plan's paged stash")


def check_param_switches(k) -> None:
    """Each PARAM_SWITCHES switch is true, false or null, and on only where Megatron takes it (its needs)."""
    for name, switch in PARAM_SWITCHES.items():
        value = getattr(k, name)
        if value is not None and not isinstance(value, bool):
            raise MoetuneError(f"{name} is {value!r}; it takes true, false or null (the recipe preset's)")
        for need in switch.needs if value else ():
            if need.refuses(k):
                raise MoetuneError(need.message(k), same_as=need.same_as)
