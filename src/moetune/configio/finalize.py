"""What the engine that runs a config fills in where the config is silent, before Megatron-Core validates it:
Megatron Bridge's TransformerConfig.finalize (models/transformer_config.py @067f987) and, for Megatron-LM arguments,
Megatron-Core's own defaults. Readers of a config (rules/derive.py, planner/from_config.py, rules/mcore.py) ask here,
so the two launchers' configs read as each engine runs them."""

from typing import Any

from moetune.configio.gates import gate_on
from moetune.configio.names import NO_DEFAULT, Name, is_megatron_lm, names
from moetune.configio.types import coerce
from moetune.errors import MoetuneError
from moetune.layout.config_sizes import data_parallel_size, parallel_size


def expert_tensor_parallel_size(config: dict[str, Any]) -> int:
    """ETP as it runs: the config's; where it is silent, Bridge's finalize takes 1 under EP > 1
    (_set_moe_expert_tensor_parallel_default: experts scale by EP), Megatron-Core (Megatron-LM) takes TP
    (model_parallel_config.py)."""
    if config.get("model.expert_tensor_parallel_size") is not None:
        return int(config["model.expert_tensor_parallel_size"])
    tp = parallel_size(config, "model.tensor_model_parallel_size")
    ep = parallel_size(config, "model.expert_model_parallel_size")
    return 1 if ep > 1 and not is_megatron_lm(config) else tp


def sequence_parallel(config: dict[str, Any]) -> bool | None:
    """Sequence parallelism as it runs: Bridge's finalize turns it off at TP 1 (Megatron-LM's reader does too,
    configio/mlm.py); None where the config is silent."""
    sp = config.get("model.sequence_parallel")
    return False if sp and parallel_size(config, "model.tensor_model_parallel_size") <= 1 else sp


def layer_wise_optimizer(config: dict[str, Any]) -> bool:
    """Whether the optimizer runs under Megatron's layer-wise distributed optimizer: an emerging optimizer's dist_
    name (dist_muon; optimizer/__init__.py _get_megatron_emerging_optimizer maps the prefix to use_layer_wise=True),
    or the switch itself."""
    return str(config.get("optimizer.optimizer") or "adam").lower().startswith("dist_") or bool(
        config.get("optimizer.use_layer_wise_distributed_optimizer"))


def muon(config: dict[str, Any]) -> bool:
    """Whether the optimizer is Muon (muon, dist_muon) or runs under the layer-wise distributed optimizer."""
    return "muon" in str(config.get("optimizer.optimizer") or "adam").lower() or layer_wise_optimizer(config)


def quantized_params(config: dict[str, Any], kind: str) -> bool | None:
    """Whether the config keeps its weights in `kind` ("fp8" or "fp4"), None where it says nothing. Bridge's
    MixedPrecisionConfig.__setattr__ copies each assignment of {kind}_param or {kind}_param_gather onto the other, and
    both its dataclass __init__ and the YAML/Hydra override path (utils/omegaconf_utils.py _apply_overrides, in field
    order) assign {kind}_param_gather last, so where the two disagree the gather wins; a {kind}_param alone is read as
    a script's cfg.mixed_precision.{kind}_param = True leaves both (finalize copies the gather into a None
    {kind}_param; training/mixed_precision.py @067f987). setup hands {kind}_param to TransformerConfig and the gather
    to the DDP config; Megatron-LM has only --{kind}-param-gather and sets {kind}_param from it (argument_utils.py)."""
    value = config.get(f"mixed_precision.{kind}_param_gather")
    return config.get(f"mixed_precision.{kind}_param") if value is None else value


def megatron_fsdp(config: dict[str, Any]) -> bool:
    """Whether Megatron FSDP wraps the model: Bridge takes dist.use_megatron_fsdp or ddp.use_megatron_fsdp and turns
    both on (training/config.py ConfigContainer.validate, _validate_and_apply_megatron_fsdp_configs @067f987);
    Megatron-LM's --use-megatron-fsdp is ddp's."""
    return bool(config.get("ddp.use_megatron_fsdp") or config.get("dist.use_megatron_fsdp"))


def sync_megatron_fsdp(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with ddp.use_megatron_fsdp on where dist's switch turns Megatron FSDP on, as Bridge sets it: the rules
    and the Megatron-LM arguments emit writes read ddp's."""
    return {**config, "ddp.use_megatron_fsdp": True} if megatron_fsdp(config) else config


def gathers_param_shards(config: dict[str, Any]) -> bool:
    """Whether some parameter shards are there for --overlap-param-gather to gather, in the terms of Megatron-LM's
    assert (arguments.py:597-599 @core_v0.16.0, :1003-1006 @core_v0.18.2, checked before Megatron FSDP turns the
    distributed optimizer on): either switch of the distributed optimizer as written, Megatron FSDP, or (from
    core_v0.17.0) dist_muon. Rule overlap.param_gather_needs_dist_opt and emit/mlm.py ask it."""
    written = any(config.get(k) for k in ("ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer"))
    return written or megatron_fsdp(config) or config.get("optimizer.optimizer") == "dist_muon"


def megatron_fsdp_strategy(config: dict[str, Any]) -> str | None:
    """Megatron FSDP's data_parallel_sharding_strategy where it wraps the model (None under Megatron's DDP or torch
    FSDP2); left out, optim_grads_params: Megatron-LM's --data-parallel-sharding-strategy default from core_v0.18.0
    (arguments.py:2805 @core_v0.18.2; no_shard up to core_v0.17), and what Bridge's recipes set (recipes/common.py,
    scripts/performance/utils/overrides.py _set_megatron_fsdp_overrides for --use_megatron_fsdp @067f987)."""
    if not megatron_fsdp(config):
        return None
    return str(config.get("ddp.data_parallel_sharding_strategy") or "optim_grads_params")


def outer_dp_sharding(config: dict[str, Any]) -> str:
    """What Megatron FSDP's copies shard between them (ddp.outer_dp_sharding_strategy, Megatron-LM
    --outer-dp-sharding-strategy; layout/dp_sharding.py OUTER_DP_SHARDING): read under Megatron FSDP with more than
    one copy alone, where Megatron-Core builds its hybrid groups (mcore_fsdp_adapter.py _init_dist_index
    @core_v0.19.0); elsewhere it shards nothing, whatever the config says."""
    if not megatron_fsdp(config) or int(config.get("ddp.num_distributed_optimizer_instances") or 1) < 2:
        return "no_shard"
    return str(config.get("ddp.outer_dp_sharding_strategy") or "no_shard")


def fsdp_double_buffer(config: dict[str, Any]) -> bool:
    """Whether Megatron FSDP keeps double buffers (layout/dp_sharding.py): ddp.fsdp_double_buffer, which NCCL user
    buffers turn on (Megatron-LM arguments.py --use-nccl-ub under Megatron FSDP; Megatron-Core asserts it beside
    nccl_ub, fsdp/src/megatron_fsdp/param_and_grad_buffer.py :2508-2512 @core_v0.19.0) as does the max-pool allocator
    (distributed_data_parallel_config.py __post_init__ :273-275)."""
    names = ("ddp.fsdp_double_buffer", "ddp.nccl_ub", "ddp.megatron_fsdp_max_pool_double_buffer")
    return megatron_fsdp(config) and any(config.get(name) for name in names)


def suggested_unit_size(config: dict[str, Any]) -> int | None:
    """ddp.suggested_communication_unit_size as a whole number of elements, read under Megatron FSDP alone (the
    elements its collectives move at once; megatron_fsdp.py reads it, DDP does not, @core_v0.19.0), None where unset
    or under DDP, or one line naming it."""
    value = config.get("ddp.suggested_communication_unit_size")
    if value is None or not megatron_fsdp(config):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise MoetuneError(f"ddp.suggested_communication_unit_size={value!r}: expected a whole number of elements, "
                           "or leave it unset") from None


# Megatron-Core's moe_paged_stash_buffer_size_factor_cuda default (transformer_config.py @ core_v0.18.2)
MCORE_STASH_FACTOR = 1.10


def routed_buffer_factor(config: dict[str, Any]) -> float | None:
    """The routed-expert buffers a full-iteration graph keeps for backward, over the mean tokens (Knobs): the paged
    stash's CUDA buffer (its factor's sign picks the mean or the actual maximum to size from, its magnitude the
    headroom: transformer_config.py @ core_v0.18.2), else the capacity HybridEP pads every expert rank's tokens to;
    None where the config sets neither. Bridge's recipes set their own: 1.2 over a 1.5 capacity (perf_recipes/deepseek/
    common.py), 1.0 over 1.2 (qwen3_235b_a22b_pretrain_128gpu_gb300_fp8mx_paged_stash_dev_config), no stash at a
    capacity of 5 (gpt_oss_20b_pretrain_8gpu_b300_fp8mx_config), all @067f987."""
    if config.get("model.moe_paged_stash"):
        factor = config.get("model.moe_paged_stash_buffer_size_factor_cuda")
        factor = abs(float(MCORE_STASH_FACTOR if factor is None else factor))
    elif config.get("model.moe_expert_rank_capacity_factor") is not None:
        factor = float(config["model.moe_expert_rank_capacity_factor"])
    else:
        return None
    return factor if factor > 0 else None


def dropout_rate(config: dict[str, Any], key: str) -> float:
    """model.hidden_dropout / model.attention_dropout as the run has it: as the config sets it, else Megatron-LM's 0.1
    under its arguments (arguments.py --hidden-dropout, --attention-dropout), else the 0 Megatron Bridge's MoE model
    bridges set (planner/model_fields.py NO_DROPOUT)."""
    value = config.get(key)
    return float(value) if value is not None else 0.1 if is_megatron_lm(config) else 0.0


def fsdp_impl(config: dict[str, Any]) -> str:
    """Which FSDP wraps the model, named as Megatron-LM's validate_args names it (fsdp_impl, arguments.py:930-931
    @core_v0.16.0, :1401-1402 @core_v0.18.2): "Torch-FSDP2" (dist.use_torch_fsdp2), "Megatron-FSDP"
    (megatron_fsdp), "" under Megatron's DDP."""
    if config.get("dist.use_torch_fsdp2"):
        return "Torch-FSDP2"
    return "Megatron-FSDP" if megatron_fsdp(config) else ""


DP_OVERLAP = ("overlap_grad_reduce", "overlap_param_gather")


def distributed_optimizer(config: dict[str, Any]) -> bool:
    """Whether DDP runs under Megatron's distributed optimizer: on where ddp's or the optimizer's switch says so
    (Bridge turns both on when either is, training/config.py _validate_and_sync_distributed_optimizer_settings), a
    switch the config leaves out being its recipe's: on with Adam (distributed_fused_adam_with_cosine_annealing), off
    with Muon's, plain or layer-wise (Muon's OptimizerConfig leaves it at Megatron's False; Muon shards its state
    under the layer-wise optimizer, not Adam's element-wise one); planner/from_config.py reads the same. Megatron FSDP
    turns it on whatever the switches say (Megatron-LM arguments.py:1112-1118 @core_v0.18.2; Bridge config.py
    _validate_and_apply_megatron_fsdp_v1_configs @067f987)."""
    if megatron_fsdp(config):
        return True
    silent = not muon(config)
    return any(silent if config.get(k) is None else bool(config[k])
               for k in ("ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer"))


def synced_optimizer_switches(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with ddp's and the optimizer's distributed-optimizer switches both as the run has them
    (distributed_optimizer): advice that asks either switch reads what Bridge syncs, not a side the config left out."""
    on = distributed_optimizer(config)
    return {**config, "ddp.use_distributed_optimizer": on, "optimizer.use_distributed_optimizer": on}


def settle_dp_overlap(config: dict[str, Any]) -> dict[str, Any]:
    """ddp.overlap_grad_reduce / overlap_param_gather as a Bridge run has them: where the config has a comm_overlap
    section and the distributed optimizer (distributed_optimizer), Bridge writes its own DP overlap onto ddp, the
    section's value where set, else on for DP > 1 (training/comm_overlap.py setup, _get_optimizer_overlap_cfgs,
    _override_user_cfgs: "Data parallel overlap is only available with ... Distributed optimizer"); without it ddp's
    own values stand (Kimi-K2's Muon recipes)."""
    if is_megatron_lm(config) or not any(k.startswith("comm_overlap.") for k in config) \
            or not distributed_optimizer(config):
        return config
    dp, out = data_parallel_size(config), dict(config)
    for field in DP_OVERLAP:
        mine = config.get(f"comm_overlap.{field}")
        settled = mine if mine is not None else (dp > 1 if dp is not None else config.get(f"ddp.{field}"))
        if settled is not None:
            out[f"ddp.{field}"] = settled
    return out


def _derived_by_megatron_lm(config: dict[str, Any]) -> dict[str, Any]:
    """What Megatron-LM's validate_args derives for a field its arguments leave out (megatron/training/arguments.py)."""
    fp32_main_grads = config.get("optimizer.main_grads_dtype") in (None, "float32")
    out = {"model.expert_tensor_parallel_size": expert_tensor_parallel_size(config),  # ETP = TP
           # BF16 accumulates and all-reduces gradients in FP32 unless --grad-reduce-in-bf16 or BF16 main grads
           "mixed_precision.grad_reduce_in_fp32": bool(config.get("mixed_precision.bf16")) and fp32_main_grads}
    if config.get("model.seq_length") is not None:  # one --seq-length for the model and its data
        out["dataset.seq_length"] = config["model.seq_length"]
    dp, mbs = data_parallel_size(config), config.get("train.micro_batch_size")
    if dp and mbs:  # micro batch x data parallel size
        out["train.global_batch_size"] = int(mbs) * dp
    graphs, layers = config.get("model.cuda_graph_impl") or "none", config.get("model.transformer_impl")
    if graphs != "none" and "transformer_engine" in (graphs, layers or "transformer_engine"):
        out.update({"model.use_te_rng_tracker": True, "rng.te_rng_tracker": True})  # TE's RNG tracker for the graphs
    return out


def _megatron_lm_default(row: Name) -> Any:
    """A flag's argparse default as the reader takes the flag given (configio/mlm.py _flag_value: a one-word list of
    any type is the word, --cp-comm-type's ["p2p"] being "p2p"); None as it is (no recompute, no MTP, no graph
    scope)."""
    value = row.mlm_default
    if row.mlm_action == "list" and row.type == "any" and isinstance(value, list) and len(value) == 1:
        value = value[0]
    return None if value is None else coerce(row.bridge_name, row.type, value)


def megatron_lm_unstated(config: dict[str, Any], fields: frozenset[str]) -> dict[str, Any]:
    """Each of `fields` a Megatron-LM launch leaves out, as Megatron-LM runs it: derived as validate_args derives it,
    else its argument's default (megatron_names.csv mlm_default: no --recompute-granularity is no recompute, no
    --mtp-num-layers no MTP); a value whose gate is off (configio/gates.py: --fp8-recipe without FP8, the flex backend
    off flex) and a field with no Megatron-LM argument are left out."""
    derived, out = _derived_by_megatron_lm(config), {}
    for key in sorted(fields - config.keys()):
        row = names().get(key)
        if key in derived:
            out[key] = derived[key]
        elif row is not None and row.mlm_flags and row.mlm_default is not NO_DEFAULT and gate_on(config, key):
            out[key] = _megatron_lm_default(row)
    return out
