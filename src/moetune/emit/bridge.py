"""Megatron Bridge output: a Python snippet applied to a recipe, and the same as dotted overrides.

The dotted overrides are what scripts/training/run_recipe.py takes after ``--recipe`` (Hydra syntax,
Megatron-Bridge src/megatron/bridge/training/utils/omegaconf_utils.py); new keys such as env_vars
entries need ``++``. moetune's own ``cluster.*`` facts ride along as ``# moetune:`` comment lines so
``moetune check`` reads the whole plan back.
"""

from __future__ import annotations

from typing import Any

from moetune.emit import values
from moetune.emit.environment import environment

BRIDGE_SECTIONS_SKIPPED = ("cluster", "env")


def _bridge_items(config: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(k, v) for k, v in sorted(config.items()) if k.split(".", 1)[0] not in BRIDGE_SECTIONS_SKIPPED]


def dotted_overrides(config: dict[str, Any], header: str) -> str:
    lines = [f"# {header}", "# Megatron Bridge dotted overrides: pass after `run_recipe.py --recipe <name>`.",
             "# comm_overlap.* needs a recipe with cfg.comm_overlap set, and mixed_precision.* a MixedPrecisionConfig",
             "# (not a recipe-name string); bridge_overrides.py handles both cases."]
    lines += values.pragmas(config)
    lines += [f"{k}={values.hydra(v)}" for k, v in _bridge_items(config)]
    lines += [f"++env_vars.{name}={values.hydra(v)}" for name, (v, _) in environment(config).items()]
    return "\n".join(lines) + "\n"


def python_snippet(config: dict[str, Any], header: str) -> str:
    groups = values.sections(dict(_bridge_items(config)))
    uses_torch = any(values.python(f"{s}.{f}", v).startswith("torch.")
                     for s, fields in groups.items() for f, v in fields.items())
    out = [f'"""{header}', "", "Apply to the ConfigContainer a Megatron Bridge recipe returns:",
           "    cfg = apply_overrides(<this model's recipe>())  # e.g. deepseek_v3_pretrain_config()",
           "The overrides carry the model's parameter shapes too, so a recipe of another model is refused by",
           "Megatron-Core's checks or trains this model, not that one; start from this model's recipe.",
           'Equivalent dotted overrides: overrides.txt."""', ""]
    if uses_torch:
        out.append("import torch")
    out += ["from megatron.bridge.training.comm_overlap import CommOverlapConfig",
            "from megatron.bridge.training.mixed_precision import get_mixed_precision_config", "", "",
            "def apply_overrides(cfg):", '    """Set the planned layout and knobs on `cfg` and return it."""']
    for section, fields in groups.items():
        out.append(f"    # {section}")
        if section == "comm_overlap":
            tp = fields.get("tp_comm_overlap", False)
            out += ["    if cfg.comm_overlap is None:",
                    f"        cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap={tp!r})"]
        if section == "mixed_precision":
            out.append('    cfg.mixed_precision = get_mixed_precision_config(cfg.mixed_precision or "bf16_mixed")')
        out += [f"    cfg.{section}.{f} = {values.python(f'{section}.{f}', v)}" for f, v in fields.items()]
    env = environment(config)
    if env:
        out.append("    # environment (exported before training starts; launcher values take precedence)")
        out.append("    cfg.env_vars.update({")
        out += [f"        {name!r}: {v!r},  # {why}" for name, (v, why) in env.items()]
        out.append("    })")
    out.append("    return cfg")
    return "\n".join(out) + "\n"
