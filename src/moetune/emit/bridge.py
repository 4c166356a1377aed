"""Megatron Bridge output: a Python snippet applied to a recipe, and the same as dotted overrides.

The dotted overrides are what scripts/training/run_recipe.py takes after ``--recipe`` (Hydra syntax,
Megatron-Bridge src/megatron/bridge/training/utils/omegaconf_utils.py); new keys such as env_vars
entries need ``++``. moetune's own ``cluster.*`` facts ride along as ``# moetune:`` comment lines so
``moetune check`` reads the whole plan back.
"""

from __future__ import annotations

from typing import Any

from moetune.configio.finalize import DP_OVERLAP, megatron_lm_unstated
from moetune.configio.names import is_megatron_lm
from moetune.configio.release_context import target
from moetune.configio.releases import at_default, has
from moetune.emit import values
from moetune.emit.environment import environment
from moetune.planner.config_map import PLAN_FIELDS
from moetune.planner.from_config import precision_of
from moetune.planner.knob_fields import PRECISION_PRESET

BRIDGE_SECTIONS_SKIPPED = ("cluster", "env")


def bridge_config(config: dict[str, Any]) -> dict[str, Any]:
    """`config` as a Bridge recipe must be told it. A field a Megatron-LM launch leaves out runs at Megatron-LM's
    value (no --recompute-granularity: no recompute; no --mtp-num-layers: no MTP), which a recipe need not hold
    (DeepSeek-V3's recomputes and trains an MTP layer): of the fields a plan writes over a recipe (PLAN_FIELDS), each
    is written as Megatron-LM runs it. A Bridge config's omitted field is its recipe's value, and stays omitted."""
    if not is_megatron_lm(config):
        return config
    unstated = megatron_lm_unstated(config, PLAN_FIELDS)
    if (release := target()) is not None:  # --megatron-core: a field that release lacks is not there to write over
        unstated = {k: v for k, v in unstated.items() if has(release, k)}
    return {**config, **unstated}


def _bridge_items(config: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(k, v) for k, v in sorted(config.items()) if k.split(".", 1)[0] not in BRIDGE_SECTIONS_SKIPPED]


def _dp_overlap(items: dict[str, Any]) -> dict[str, Any]:
    """The plan's DP overlap written onto comm_overlap too: a recipe's CommOverlapConfig that sets its own
    overlap_grad_reduce / overlap_param_gather overrides ddp's with it (Bridge training/comm_overlap.py
    _override_user_cfgs; Kimi-K2's H100 perf recipe turns the grad-reduce overlap off)."""
    return {f: items[f"ddp.{f}"] for f in DP_OVERLAP
            if f"ddp.{f}" in items and f"comm_overlap.{f}" not in items}  # a planned config carries its own


def dotted_overrides(config: dict[str, Any], header: str) -> str:
    lines = [values.comment(header), "# Megatron Bridge dotted overrides: pass after `run_recipe.py --recipe <name>`.",
             "# They assume a recipe with cfg.comm_overlap set, a MixedPrecisionConfig (not a preset-name string),",
             "# and the deprecated cuda_graph_scope (not cuda_graph_modules) and per-backend dispatcher SM fields;",
             "# bridge_overrides.py handles every recipe, and torchrun.sh applies it (run_planned.py)."]
    lines += values.pragmas(config)
    lines += [f"{k}={values.hydra(v)}" for k, v in _bridge_items(config)]
    if any(k.startswith("comm_overlap.") for k in config):
        lines += [f"comm_overlap.{f}={values.hydra(v)}" for f, v in _dp_overlap(config).items()]
    lines += [f"++env_vars.{name}={values.hydra(v)}" for name, (v, _) in _config_environment(config).items()]
    return "\n".join(lines) + "\n"


def _config_environment(config: dict[str, Any]) -> dict:
    """The environment the config carries (ConfigContainer.env_vars, exported before training): none on a targeted
    Bridge release before v0.6.0, which has no such field (cfg.env_vars had raised AttributeError, and Hydra skips the
    unknown ++env_vars keys); env.sh, which torchrun.sh sources, exports them either way."""
    release = target()
    return environment(config) if release is None or has(release, "env_vars") else {}


# Fields the snippet writes through a block of its own, not one assignment each (see _graphs, _sms, _precision)
GRAPH_FIELDS = ("model.cuda_graph_impl", "model.cuda_graph_scope")
SM_FIELDS = ("model.moe_deepep_num_sms", "model.moe_hybridep_num_sms")

PRELUDE = '''from megatron.bridge.training.comm_overlap import CommOverlapConfig
from megatron.bridge.training.mixed_precision import get_mixed_precision_config

try:  # Bridge's helpers write the current Megatron-Core API (cuda_graph_modules) or, on an older one, the scope
    from megatron.bridge.utils.cuda_graph import set_cuda_graph_modules, set_full_iteration_cuda_graph
except ImportError:  # a Bridge release from before them
    set_cuda_graph_modules = set_full_iteration_cuda_graph = None


def _family(mp):
    """A mixed-precision config's quantized recipe: FP8 with its scaling recipe, FP4, or neither."""
    return bool(mp.fp8), mp.fp8_recipe if mp.fp8 else None, bool(mp.fp4)


def _assign(section, obj, planned, defaults=None):
    """Set fields on one of cfg's sections. A planned field the installed Bridge / Megatron-Core lacks stops the run
    here, as a dotted override does (Hydra struct mode); an attribute assignment alone would add a field nothing
    reads, and the plan would run without it. `defaults` hold Megatron's default, which a release without the field
    runs anyway: set where the field exists."""
    missing = [name for name in planned if not hasattr(obj, name)]
    if missing:
        raise AttributeError(f"cfg.{section} has no field {', '.join(missing)} in this Megatron Bridge / "
                             "Megatron-Core, and the plan sets it: upgrade, or plan without it (`moetune check "
                             "--megatron-bridge X.Y.Z` names each field a release lacks)")
    for name, value in {**(defaults or {}), **planned}.items():
        if name in planned or hasattr(obj, name):
            setattr(obj, name, value)
'''


def _precision(config: dict[str, Any]) -> list[str]:
    """The recipe's precision config where it is of the plan's family (its own tuning stays), else Bridge's preset
    of the plan's: a recipe's FP8 must not survive under a BF16 plan, nor FP8 beside FP4."""
    preset = PRECISION_PRESET[precision_of(config)]
    return [f"    planned = get_mixed_precision_config({preset!r})",
            "    mp = cfg.mixed_precision",
            "    mp = get_mixed_precision_config(mp) if isinstance(mp, str) else mp",
            "    cfg.mixed_precision = planned if mp is None or _family(mp) != _family(planned) else mp"]


def _graphs(config: dict[str, Any]) -> list[str]:
    impl, scope = config.get("model.cuda_graph_impl"), config.get("model.cuda_graph_scope") or []
    full = "full_iteration" in scope
    helper = "set_full_iteration_cuda_graph(cfg.model)" if full else f"set_cuda_graph_modules(cfg.model, {scope!r})"
    return [_assign_line("model", {"model.cuda_graph_impl": impl}),
            "    if set_cuda_graph_modules is None:",
            "    " + _assign_line("model", {"model.cuda_graph_scope": scope or None}),
            "    else:",
            f"        {helper}"]


def _sms(config: dict[str, Any]) -> list[str]:
    """One SM-count field in newer Megatron-Core (the per-backend ones are deprecated there, and refused when they
    differ), the backend's own before it."""
    backend = config.get("model.moe_flex_dispatcher_backend")
    sms = config.get(f"model.moe_{backend}_num_sms") if backend else None
    unset = {k: None for k in SM_FIELDS}
    if sms is None:
        return [_assign_line("model", unset)]
    return ['    if hasattr(cfg.model, "moe_flex_dispatcher_num_sms"):',
            "    " + _assign_line("model", {"model.moe_flex_dispatcher_num_sms": sms, **unset}),
            "    else:",
            "    " + _assign_line("model", {**unset, f"model.moe_{backend}_num_sms": sms})]


def _split(fields: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """FIELDS (dotted keys) as Python source by field name: those the plan sets off Megatron's default, and those it
    holds at the default (configio.releases.at_default; a release without the field runs that)."""
    planned, defaults = {}, {}
    for key, v in fields.items():
        (defaults if at_default(key, v) else planned)[key.split(".", 1)[1]] = values.python(key, v)
    return planned, defaults


def _dict_source(fields: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k!r}: {v}" for k, v in fields.items()) + "}"


def _assign_line(section: str, fields: dict[str, Any]) -> str:
    """One `_assign` call on one line (a few fields)."""
    planned, defaults = _split(fields)
    tail = f", {_dict_source(defaults)})" if defaults else ")"
    return f"    _assign({section!r}, cfg.{section}, {_dict_source(planned)}{tail}"


def _assign_block(section: str, fields: dict[str, Any]) -> list[str]:
    """One `_assign` call over a section's fields, one per line: planned first, then those at Megatron's default."""
    planned, defaults = _split(fields)
    out = [f"    _assign({section!r}, cfg.{section}, {{"] + [f"        {k!r}: {v}," for k, v in planned.items()]
    if not defaults:
        return out + ["    })"]
    return out + ["    }, defaults={"] + [f"        {k!r}: {v}," for k, v in defaults.items()] + ["    })"]


# MixedPrecisionConfig's own tuning (Megatron-Bridge src/megatron/bridge/training/mixed_precision.py:53-61 @v0.6.0):
# where the recipe's config is of the plan's family, it keeps those the config leaves unset. A plan sets
# fp8_param_gather (knob_fields.py: the weights the memory wall sized), so the recipe's is not kept there.
RECIPE_TUNING = ("fp8_dot_product_attention", "fp8_multi_head_attention", "first_last_layers_bf16",
                 "fp8_amax_history_len", "fp8_wgrad", "fp8_param_gather")


def _kept_tuning(items: dict[str, Any]) -> str:
    """The recipe's precision tuning the body leaves alone, named in the file's docstring (it had named
    fp8_param_gather, which a plan's body sets)."""
    return ", ".join(f for f in RECIPE_TUNING if f"mixed_precision.{f}" not in items)


def python_snippet(config: dict[str, Any], header: str) -> str:
    items = dict(_bridge_items(config))
    blocks = {"model": _graphs(items) + _sms(items) if "model.cuda_graph_impl" in items else [],
              "mixed_precision": _precision(items) if "mixed_precision.bf16" in items else []}
    plain = {k: v for k, v in items.items() if k not in GRAPH_FIELDS + SM_FIELDS or not blocks["model"]}
    groups = values.sections(plain)
    uses_torch = any(values.python(f"{s}.{f}", v).startswith("torch.")
                     for s, fields in groups.items() for f, v in fields.items())
    out = [f'"""{header}', "", "Apply to the ConfigContainer a Megatron Bridge recipe returns:",
           "    cfg = apply_overrides(<this model's recipe>())  # e.g. deepseek_v3_pretrain_config()",
           "The overrides carry the model's parameter shapes, not what a recipe holds beside them (rotary base,",
           "activation, tokenizer): start from this model's own recipe, or for a model with none run Megatron-LM.",
           "Within the plan's precision family the recipe keeps its own tuning of what the plan leaves unset",
           f"({_kept_tuning(items) or 'none here'}).",
           "moetune times attention in BF16, whatever fp8_dot_product_attention says.",
           "torchrun.sh applies it through run_planned.py. Equivalent dotted overrides: overrides.txt.\"\"\"", ""]
    if uses_torch:
        out.append("import torch")
    out += [PRELUDE, "", "def apply_overrides(cfg):",
            '    """Set the planned layout and knobs on `cfg` and return it."""']
    for section, fields in groups.items():
        out.append(f"    # {section}")
        if section == "comm_overlap":
            tp = fields.get("tp_comm_overlap", False)
            out += ["    if cfg.comm_overlap is None:",
                    f"        cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap={tp!r})"]
            if dp := _dp_overlap(items):
                out.append("    # ddp's overlap here too: a recipe's own comm_overlap value would override ddp's")
                fields = {**fields, **dp}
        if section == "mixed_precision":
            out += blocks["mixed_precision"] or \
                ['    cfg.mixed_precision = get_mixed_precision_config(cfg.mixed_precision or "bf16_mixed")']
        out += _assign_block(section, {f"{section}.{f}": v for f, v in fields.items()})
        if section == "model":
            out += blocks["model"]
    env = _config_environment(config)
    if env:
        out.append("    # environment (exported before training starts; launcher values take precedence)")
        out.append("    cfg.env_vars.update({")
        out += [f"        {name!r}: {v!r},  # {why}" for name, (v, why) in env.items()]
        out.append("    })")
    out.append("    return cfg")
    return "\n".join(out) + "\n"
