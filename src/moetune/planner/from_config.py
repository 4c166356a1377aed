"""A user's normalized config (Bridge YAML, dotted overrides or Megatron-LM arguments, via configio) read back into
moetune's Layout, Workload and Knobs, Megatron's defaults where it is silent, and the model it trains
(`trained_model`), so `diagnose --config` can predict the run it measured and `estimate --config` can weigh it.

The inverse of `config_map.to_config`: the same field names and precision recipes (knob_fields.PRECISION).
"""

from dataclasses import replace
from typing import Any

from moetune.configio.cluster import config_gpu
from moetune.configio.finalize import (
    distributed_optimizer,
    dropout_rate,
    fsdp_double_buffer,
    fsdp_impl,
    layer_wise_optimizer,
    megatron_fsdp_strategy,
    outer_dp_sharding,
    quantized_params,
    routed_buffer_factor,
    suggested_unit_size,
)
from moetune.configio.layout_map import LAYOUT_FIELDS, layout_settings
from moetune.configio.names import is_megatron_lm
from moetune.errors import MoetuneError
from moetune.layout.knobs import FP8_OUTPUT_PROJ_PRECISION, MEGATRON_FLEX_SMS, Knobs
from moetune.layout.layout import Layout, check_vpp_one
from moetune.layout.modules import parse_modules, parse_offload_modules
from moetune.layout.param_gather import FP4_PARAM_PRECISION, FP8_PARAM_PRECISIONS
from moetune.layout.ranks import ep_group_in_domain, job_gpu
from moetune.layout.validate import Workload
from moetune.planner.knob_fields import PRECISION
from moetune.planner.model_fields import bridge_router_dtype
from moetune.rules.derive import dispatcher_sms, graph_setting
from moetune.specs.model import ModelSpec

MLM_VOCAB_DIVISOR = 128


def trained_model(m: ModelSpec, config: dict) -> ModelSpec:
    """MODEL with the vocabulary padding (model.make_vocab_size_divisible_by; 128 under Megatron-LM arguments that
    leave it out, else the model's Bridge default), the FLOP counter of its launcher, and the MTP depth the config
    trains:
    `model.mtp_num_layers` where the config sets it (None or 0: none);
    none under Megatron-LM arguments that leave it out (`--mtp-num-layers` defaults to None, arguments.py); else
    Bridge's provider's (the model's mtp_num_layers: num_nextn_predict_layers from the config.json; none from MiniMax's
    num_mtp_modules, which Bridge does not read: specs/hf_readers.py)."""
    mlm = is_megatron_lm(config)
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
        mtp = m.mtp_num_layers
    try:
        return m.with_mtp(mtp)
    except ValueError as err:
        raise MoetuneError(f"model.mtp_num_layers ({mtp}): {err}; set it to 0 or leave it out") from None


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
                           f"context_parallel_size ({cp}); e.g. [{min(cp, 2)}, {max(cp // 2, 1)}]",
                           same_as=("cp.hcp_sizes",))
    return int(sizes[0])


def _get(config: dict, key: str, default: Any = None) -> Any:
    value = config.get(key, default)
    return default if value is None else value


def precision_of(config: dict) -> str:
    """The GEMM precision moetune models for a config: BF16, or an FP8/FP4 recipe on top of it. FP16 and pure FP32
    training (Megatron-LM arguments without --bf16) have no rates here, so they are refused by name."""
    if config.get("mixed_precision.fp16"):
        raise MoetuneError("the config trains in FP16 (mixed_precision.fp16 / --fp16); moetune models BF16 mixed "
                           "precision and FP8/FP4 recipes on it: use --bf16")
    if is_megatron_lm(config) and not config.get("mixed_precision.bf16"):
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


def _flex_sms(config: dict, layout: Layout) -> int | None:
    """SMs of a fused dispatcher as the config sets them, else what runs unset under the release targeted (not the
    tuned count: the config did not ask for more), HybridEP's own by whether this layout's EP group lies in one
    NVLink domain of the job; None for the NCCL dispatchers."""
    backend = _dispatcher(config)
    if backend not in MEGATRON_FLEX_SMS:
        return None
    one_domain = True  # no GPU named (a config read without --gpu): its EP group taken to be one domain
    if config.get("cluster.gpu") is not None:
        domain = job_gpu(config_gpu(config), layout.world_size).nvlink_domain
        one_domain = bool(ep_group_in_domain(layout.ep, layout.etp, domain))
    return dispatcher_sms(config, backend, one_domain)


def _router_dtype(config: dict, model: ModelSpec | None) -> str | None:
    """moe_router_dtype as the config sets it (null: the activations' BF16); left out, what runs: Megatron's None
    under Megatron-LM arguments (--moe-router-dtype defaults to None, arguments.py) or with no MODEL to read, else
    MODEL's Bridge model bridge's (model_fields.bridge_router_dtype: FP32 for DeepSeek's, None for gpt-oss')."""
    if "model.moe_router_dtype" in config:
        # "bf16" is what Bridge's DeepSeek-V3 GB300 perf recipe writes (perf_recipes/deepseek/gb300/deepseek_v3.py);
        # Megatron-Core's router changes dtype for fp32 and fp64 only (moe/router.py), so it runs as None
        value = config["model.moe_router_dtype"]
        return None if value == "bf16" else value
    if model is None or is_megatron_lm(config):
        return None
    return bridge_router_dtype(model)


def from_config(config: dict[str, Any], model: ModelSpec | None = None) -> tuple[Layout, Workload, Knobs]:
    """Layout, workload and knobs of a normalized config (Megatron's defaults where a name is absent; MODEL's model
    bridge's for a Bridge config's router dtype)."""
    if "cluster.num_gpus" not in config:
        raise MoetuneError("the config does not say how many GPUs: pass --gpus N")
    settings = layout_settings(config)
    if config.get(LAYOUT_FIELDS["vpp"]) == 1 and config.get(LAYOUT_FIELDS["pipeline_layout"]):
        check_vpp_one(settings["pipeline_layout"], settings["pp"])  # Layout reads VPP 1 as unset
    layout = Layout(world_size=config["cluster.num_gpus"], **settings)
    workload = Workload(seq_length=_get(config, "model.seq_length", _get(config, "dataset.seq_length", 4096)),
                        micro_batch_size=_get(config, "train.micro_batch_size", 1),
                        global_batch_size=config.get("train.global_batch_size"))
    recompute, precision = _get(config, "model.recompute_granularity", "none"), precision_of(config)
    if recompute == "selective" and config.get("model.recompute_modules") == []:
        # an empty list recomputes nothing: Megatron-Core's core_attn default is for None alone (transformer_config.py
        # @ core_v0.18.2), where Knobs reads no modules as that default (Knobs.effective_modules)
        recompute = "none"
    knobs = Knobs(
        precision=precision, recompute=recompute,
        recompute_modules=_named("model.recompute_modules", parse_modules, _get(config, "model.recompute_modules", []))
        if recompute == "selective" else frozenset(),
        distributed_optimizer=_distributed(config), optimizer=_optimizer(config),
        torch_fsdp2=bool(config.get("dist.use_torch_fsdp2")),
        fsdp2_reshard_after_forward=bool(config.get("dist.torch_fsdp2_reshard_after_forward", True)),
        megatron_fsdp=megatron_fsdp_strategy(config), outer_dp_sharding_strategy=outer_dp_sharding(config),
        fsdp_double_buffer=fsdp_double_buffer(config),
        suggested_communication_unit_size=suggested_unit_size(config),
        num_distributed_optimizer_instances=int(_get(config, "ddp.num_distributed_optimizer_instances", 1)),
        hidden_dropout=dropout_rate(config, "model.hidden_dropout"),
        attention_dropout=dropout_rate(config, "model.attention_dropout"),
        optimizer_offload_fraction=float(_get(config, "optimizer.optimizer_offload_fraction", 0.0))
        if config.get("optimizer.optimizer_cpu_offload") else 0.0,
        main_grads_fp32=_main_grads_fp32(config),
        # low-precision moments only under the precision-aware optimizer (rule
        # optimizer.low_precision_state_needs_precision_aware refuses them otherwise)
        adam_moments_bytes=2 if config.get("optimizer.exp_avg_dtype") in ("bf16", "bfloat16") and
        config.get("optimizer.use_precision_aware_optimizer") else 4,
        dispatcher=_dispatcher(config), flex_num_sms=_flex_sms(config, layout),
        cuda_graph_scope=_graph_scope(config),
        ep_overlap=bool(config.get("comm_overlap.overlap_moe_expert_parallel_comm")),
        delay_wgrad=bool(config.get("comm_overlap.delay_wgrad_compute")),
        tp_comm_overlap=bool(config.get("comm_overlap.tp_comm_overlap")),
        overlap_grad_reduce=bool(config.get("ddp.overlap_grad_reduce")),  # Megatron's default: off
        overlap_param_gather=bool(config.get("ddp.overlap_param_gather")),
        routing="force-balance" if config.get("model.moe_router_force_load_balancing") else "dropless",
        # Megatron refuses it outside MXFP8; `check` reports that (rule precision.fp8_output_proj_needs_mxfp8)
        fp8_output_proj=bool(config.get("model.fp8_output_proj")) and precision == FP8_OUTPUT_PROJ_PRECISION,
        fp8_param_gather=_param_gather(config, "fp8", precision in FP8_PARAM_PRECISIONS),
        fp4_param_gather=_param_gather(config, "fp4", precision == FP4_PARAM_PRECISION),
        cp_comm_type=_cp_comm_type(config), hcp_a2a_size=_hcp_a2a_size(config),
        offload_modules=_offload_modules(config), moe_router_dtype=_router_dtype(config, model),
        routed_buffer_factor=routed_buffer_factor(config))
    return layout, workload, knobs


# Megatron-LM's optimizer names moetune models: the emerging optimizers' dist_ prefix is Muon under the layer-wise
# distributed optimizer (optimizer/__init__.py _get_megatron_emerging_optimizer: use_layer_wise = True)
OPTIMIZERS = {"adam": "adam", "muon": "muon", "dist_muon": "muon"}


def _optimizer(config: dict) -> str:
    name = str(_get(config, "optimizer.optimizer", "adam")).lower()
    if name not in OPTIMIZERS:
        raise MoetuneError(f"optimizer.optimizer {name!r}: moetune models adam, muon and dist_muon (their optimizer "
                           "states); set one of them")
    return OPTIMIZERS[name]


def _distributed(config: dict) -> bool:
    """Whether optimizer state is sharded over DP: Muon's layer-wise distributed optimizer (dist_muon, or
    use_layer_wise_distributed_optimizer), else the distributed optimizer's field, else DDP's (Megatron-LM's one switch
    sets both), else on as Bridge's recipes set it on when either says so, as Bridge syncs them; a side the config
    leaves out is the recipe's (on)."""
    if _optimizer(config) == "muon":
        return layer_wise_optimizer(config)
    return distributed_optimizer(config)


def _param_gather(config: dict, kind: str, on: bool) -> bool | None:
    """Whether a config keeps its weights in `kind` ("fp8" or "fp4"), as `check` hands Megatron-Core its fp8_param
    (configio/finalize.py quantized_params: the gather wins over {kind}_param), else off as Bridge's
    MixedPrecisionConfig and Megatron-LM default it (a preset sets it: the config then says so). None where the recipe
    is not one of `kind` (`on` false), where Megatron-Core refuses it."""
    if not on:
        return None
    if kind == "fp8" and is_megatron_lm(config) and fsdp_impl(config) == "Torch-FSDP2":
        # validate_args turns it off under FSDP2 with TE >= 2.0 (arguments.py:625-631 @core_v0.16.0, :1030-1036
        # @core_v0.18.2; rule fsdp.torch_fsdp2_drops_fp8_params), after the config said it: the rules read the config
        return False
    return bool(quantized_params(config, kind))


def _main_grads_fp32(config: dict) -> bool:
    """Whether gradients accumulate and reduce in FP32: Bridge's mixed_precision.grad_reduce_in_fp32; Megatron-LM
    turns it on only where --main-grads-dtype stays fp32 and --grad-reduce-in-bf16 is off (arguments.py
    validate_args)."""
    if is_megatron_lm(config) and config.get("optimizer.main_grads_dtype") not in (None, "float32"):
        return False
    return bool(_get(config, "mixed_precision.grad_reduce_in_fp32", True))


def _named(key: str, parse, value) -> frozenset[str]:
    """Megatron module names a config gives, each one Megatron knows (parse: modules.parse_modules or
    parse_offload_modules), the error naming the config field."""
    try:
        return parse(value)
    except MoetuneError as err:
        raise MoetuneError(f"{key}: {err}", same_as=err.same_as) from None


def _offload_modules(config: dict) -> frozenset[str]:
    """Fine-grained activation offloading's modules; switched on with none named is Megatron-Core's error."""
    if not config.get("model.fine_grained_activation_offloading"):
        return frozenset()
    modules = _named("model.offload_modules", parse_offload_modules, _get(config, "model.offload_modules", []) or [])
    if not modules:
        raise MoetuneError("model.fine_grained_activation_offloading is on with no model.offload_modules; name the "
                           "modules (e.g. [expert_fc1, moe_act]) or turn it off")
    return modules
