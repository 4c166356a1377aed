"""Megatron-LM arguments (pretrain_gpt.py) for a normalized config, one flag per line.

Flags and their argparse actions come from megatron_names.csv (dumped from Megatron-LM
megatron/training/arguments.py). A switch left at Megatron-LM's default is omitted; names with no
Megatron-LM flag are listed as comments so nothing is silently dropped.
"""

from __future__ import annotations

from typing import Any

from moetune.configio.mlm import VALUE_DEFAULTS
from moetune.configio.names import NO_DEFAULT, names
from moetune.configio.types import coerce
from moetune.emit import values

# Megatron-LM spells dtype choices short (arguments.py: --main-grads-dtype {fp32,bf16}, --exp-avg-dtype ...).
_MLM_DTYPE = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _flag_line(name: str, value: Any) -> tuple[str | None, str | None]:
    """(argument line, comment) for one config entry."""
    row = names().get(name)
    if row is None or not row.mlm_flag:
        return None, f"# no Megatron-LM flag: {name}={values.hydra(value)}"
    flag, action = row.mlm_flag, row.mlm_action
    if action == "store_true":
        return (flag if value else None), None
    if action == "store_false":
        return (flag if value is False else None), None
    if action == "bool_optional":
        positive = next(f for f in row.mlm_flags if not f.startswith("--no-"))
        negative = next((f for f in row.mlm_flags if f.startswith("--no-")), None)
        return (positive if value else negative), None
    if value is None or value == []:
        return None, None
    if action == "list":
        return " ".join([flag, *values.argv(value)]), None
    if isinstance(value, (list, tuple, dict)):
        return None, f"# {name}={values.hydra(value)} has no Megatron-LM spelling of {flag}; set it by hand"
    if row.type.startswith("dtype"):
        value = _MLM_DTYPE.get(value, value)
    return f"{flag} {values.argv(value)[0]}", None


def megatron_lm_args(config: dict[str, Any], header: str) -> str:
    lines = [f"# {header}", "# Megatron-LM arguments for pretrain_gpt.py (one per line; torchrun.sh joins them)."]
    lines += values.pragmas(config)
    args, notes = [], []
    for name, value in sorted(config.items()):
        if name.split(".", 1)[0] in ("cluster", "env"):
            continue
        if name == "model.virtual_pipeline_model_parallel_size" and (
                config.get("model.pipeline_model_parallel_layout") or config.get("model.hybrid_layer_pattern")):
            continue  # Megatron-LM derives VPP from the layout string or the pattern's '|' and refuses both flags
        line, note = _flag_line(name, value)
        if line:
            args.append(line)
        if note:
            notes.append(note)
    defaults = [line for line in _bridge_defaults(config) if line]
    if defaults:
        defaults.insert(0, "# Megatron Bridge defaults that Megatron-LM spells differently "
                           "(so both engines run alike):")
    return "\n".join(lines + args + defaults + notes) + "\n"


def _bridge_defaults(config: dict[str, Any]) -> list[str | None]:
    """Flags that give Megatron-LM Bridge's default where the two parsers' defaults differ."""
    out = []
    for row in names().by_bridge.values():
        if (row.bridge_name in config or row.role != "used" or row.default in (NO_DEFAULT, None)
                or row.mlm_default in (NO_DEFAULT, None)):
            continue
        switch = row.mlm_action in ("store_true", "store_false", "bool_optional")
        gate = VALUE_DEFAULTS.get(row.bridge_name)
        if not switch and not (gate and config.get(gate)):
            continue
        if coerce(row.bridge_name, row.type, row.mlm_default) != row.default:
            out.append(_flag_line(row.bridge_name, row.default)[0])
    return out
