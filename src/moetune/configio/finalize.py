"""What the engine that runs a config fills in where the config is silent, before Megatron-Core validates it:
Megatron Bridge's TransformerConfig.finalize (models/transformer_config.py @067f987) and, for Megatron-LM arguments,
Megatron-Core's own defaults. Readers of a config (rules/derive.py, planner/from_config.py, rules/mcore.py) ask here,
so the two launchers' configs read as each engine runs them."""

from typing import Any

from moetune.configio.names import LAUNCHER


def _size(config: dict[str, Any], key: str) -> int:
    return int(config.get(key) or 1)


def expert_tensor_parallel_size(config: dict[str, Any]) -> int:
    """ETP as it runs: the config's; where it is silent, Bridge's finalize takes 1 under EP > 1
    (_set_moe_expert_tensor_parallel_default: experts scale by EP), Megatron-Core (Megatron-LM) takes TP
    (model_parallel_config.py)."""
    if config.get("model.expert_tensor_parallel_size") is not None:
        return int(config["model.expert_tensor_parallel_size"])
    tp, ep = _size(config, "model.tensor_model_parallel_size"), _size(config, "model.expert_model_parallel_size")
    return 1 if ep > 1 and config.get(LAUNCHER) != "megatron-lm" else tp


def sequence_parallel(config: dict[str, Any]) -> bool | None:
    """Sequence parallelism as it runs: Bridge's finalize turns it off at TP 1 (Megatron-LM's reader does too,
    configio/mlm.py); None where the config is silent."""
    sp = config.get("model.sequence_parallel")
    return False if sp and _size(config, "model.tensor_model_parallel_size") <= 1 else sp


def layer_wise_optimizer(config: dict[str, Any]) -> bool:
    """Whether the optimizer runs under Megatron's layer-wise distributed optimizer: an emerging optimizer's dist_
    name (dist_muon; optimizer/__init__.py _get_megatron_emerging_optimizer maps the prefix to use_layer_wise=True),
    or the switch itself."""
    return str(config.get("optimizer.optimizer") or "adam").lower().startswith("dist_") or bool(
        config.get("optimizer.use_layer_wise_distributed_optimizer"))
