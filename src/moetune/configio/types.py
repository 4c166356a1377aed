"""Coerce config values to the type megatron_names.csv records, with one-line errors on mismatch.

Values arrive typed (YAML/JSON) or as text (dotted overrides are parsed as YAML scalars first; Megatron-LM
arguments are plain strings). Canonical forms keep the normalized config JSON-friendly and comparable:
dtypes are 'bfloat16' / 'float16' / 'float32'; a CUDA-graph scope is a list of module names ([] = whole
layer, as Bridge's utils/cuda_graph.py reads "full").
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from moetune.errors import MoetuneError
from moetune.layout.knobs import CUDA_GRAPH_SCOPES
from moetune.layout.layout import LAYOUT_SYMBOLS

_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16",
           "float32": "float32", "fp32": "float32", "float": "float32"}
_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def parse_text(text: str) -> Any:
    """A dotted-override value as Hydra would read it: YAML scalar/list, plus 1e-4 style floats."""
    if text.strip() in ("|", ">", "|-", ">-", "|+", ">+"):  # YAML's block-scalar marks would read as "": a value
        return text.strip()                                    # (a one-stage layout string "|") kept as written
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return text
    if isinstance(value, str) and _FLOAT.match(value):
        return float(value)
    return value


def _bool(name: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in _TRUE + _FALSE:
        return v.lower() in _TRUE
    if isinstance(v, int):
        # Megatron reads bool fields by truthiness, and Bridge's own _pretrain_common passes
        # manual_gc_eval=100 (recipes/common.py), so an integer is accepted as its truth value.
        return bool(v)
    raise MoetuneError(f"{name} expects true or false, got {v!r}")


def _int(name: str, v: Any) -> int:
    if isinstance(v, bool):
        raise MoetuneError(f"{name} expects an integer, got {v!r}")
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and re.fullmatch(r"[+-]?\d+", v.strip()):
        return int(v)
    raise MoetuneError(f"{name} expects an integer, got {v!r}")


def _float(name: str, v: Any) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, str) and _FLOAT.match(v.strip()):
        return float(v)
    raise MoetuneError(f"{name} expects a number, got {v!r}")


def _str(name: str, v: Any) -> str:
    if isinstance(v, str):
        return v
    raise MoetuneError(f"{name} expects a string, got {v!r}")


def _dtype(name: str, v: Any) -> str:
    if isinstance(v, dict) and "_target_" in v:  # Bridge YAML dumps dtypes as {_target_: torch.bfloat16}
        v = v["_target_"]
    key = str(v).lower().removeprefix("torch.")
    if key in _DTYPES:
        return _DTYPES[key]
    raise MoetuneError(f"{name} expects a dtype (bfloat16, float16, float32), got {v!r}")


def _list(name: str, v: Any, item: str) -> list:
    if isinstance(v, str):
        v = [s for s in v.strip("[]").split(",") if s.strip()]
    if not isinstance(v, (list, tuple)):
        raise MoetuneError(f"{name} expects a list, got {v!r}")
    conv = {"str": lambda x: _str(name, x.strip() if isinstance(x, str) else x), "int": lambda x: _int(name, x),
            "float": lambda x: _float(name, x)}[item]
    return [conv(x) for x in v]


class Scopes(list):
    """A CUDA-graph scope as module names (the canonical form), with `listed`: the items as the input wrote them in a
    list (a YAML `[attn]`, Hydra's `model.cuda_graph_scope=[attn]`, a Megatron-LM flag's values), or None where it
    wrote one string ('attn', 'attn,moe_router'). Megatron-Core before core_v0.16.0 types cuda_graph_scope as one str
    (transformer_config.py core_v0.15.0:646) and Bridge hands a YAML or Hydra list to it as a list (OmegaConf keeps
    it), so there [attn] is not attn: the rules read which was written (rules/derive.py graph_scope_listed). A plan's
    scope is no input's: None (emit writes it as each release takes it, configio/legacy.py scalar_scope)."""

    def __init__(self, scopes: list[str], listed: tuple[str, ...] | None = None) -> None:
        super().__init__(scopes)
        self.listed = listed


def _scope(name: str, v: Any) -> list[str]:
    if v is None or v == "full":
        return Scopes([])
    items = v.split(",") if isinstance(v, str) else v
    if not isinstance(items, (list, tuple)):
        raise MoetuneError(f"{name} expects module names (attn, moe_router, moe_preprocess, ...), got {v!r}")
    scopes = [str(i).strip().rsplit(".", 1)[-1] for i in items if str(i).strip() not in ("", "full")]
    if bad := [x for x in scopes if x not in CUDA_GRAPH_SCOPES]:  # Megatron-Core's CudaGraphScope names
        raise MoetuneError(f"{name}: unknown CUDA-graph scope(s) {', '.join(bad)}; use {', '.join(CUDA_GRAPH_SCOPES)}")
    # one read already (a plan's knobs, which no input wrote: planner/knob_fields.py) keeps what it says of that
    listed = v.listed if isinstance(v, Scopes) else None if isinstance(v, str) else tuple(str(i).strip() for i in v)
    return Scopes(scopes, listed)


_SYMBOL_OF = {name: symbol for symbol, name in LAYOUT_SYMBOLS.items()}  # Megatron-Core LayerType name -> symbol


def _layout(name: str, v: Any) -> str:
    """A pipeline layout as Megatron's string: Bridge recipes give a list of stages, each a list of layer names
    ([["embedding", "decoder"], ["decoder", "loss"]]), which Megatron-Core accepts beside the string."""
    if isinstance(v, str):
        return v
    if not isinstance(v, (list, tuple)) or not all(isinstance(stage, (list, tuple)) for stage in v):
        raise MoetuneError(f"{name} expects a layout string (\"Et|(tt|)*30mL\") or a list of stages, each a list "
                           f"of layer names, got {v!r}")
    unknown = sorted({str(x) for stage in v for x in stage if str(x).strip().lower() not in _SYMBOL_OF})
    if unknown:
        raise MoetuneError(f"{name}: unknown layer names {unknown}; a stage lists "
                           f"{', '.join(_SYMBOL_OF)} (Megatron-Core LayerType)")
    return "|".join("".join(_SYMBOL_OF[str(x).strip().lower()] for x in stage) for stage in v)


_FREQ_TERM = re.compile(r"\[([01](?:\s*,\s*[01])*)\]\s*(?:\*\s*(\d+))?")


_REPEATED = re.compile(r"\((.*)\)\s*\*\s*(\d+)")


def _freq_pattern(text: str) -> list[int] | None:
    """A 0/1 pattern in Megatron-LM's expression form, or None: '+'-joined [..] or [..]*N terms, in parentheses or in
    parentheses repeated N times ("([1]*3+[0]*2)*2", moe_freq_type's docstring example)."""
    text = text.strip()
    if m := _REPEATED.fullmatch(text):
        inner = _freq_pattern(m.group(1))
        return None if inner is None else inner * int(m.group(2))
    text = text[1:-1] if text.startswith("(") and text.endswith(")") else text
    out: list[int] = []
    for term in (t.strip() for t in text.split("+")):
        if not (m := _FREQ_TERM.fullmatch(term)):
            return None
        out += [int(x) for x in m.group(1).split(",")] * int(m.group(2) or 1)
    return out


def _moe_freq(name: str, v: Any) -> int | list[int]:
    """moe_layer_freq: every N-th layer MoE (an int >= 1) or one 0/1 per layer (1 = MoE), given as a list or in
    Megatron-LM's expression form "([0]*3+[1]*58)" (arguments.py moe_freq_type evaluates it; read here without
    eval: '+'-joined [..] or [..]*N terms)."""
    if isinstance(v, str) and not v.strip().lstrip("-").isdigit():
        text = v.strip()
        # quoted once more for the shell that expands it (Megatron-MoE-ModelZoo's Kimi-K2.yaml: "'([0]*1+[1]*60)'")
        text = text[1:-1].strip() if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"" else text
        out = _freq_pattern(text)
        if out is None:
            raise MoetuneError(f"{name} = {v!r}: expected an integer, a list of 0/1 or Megatron-LM's form "
                               "\"([0]*3+[1]*58)\" (or \"([1]*3+[0]*2)*2\")")
        return out
    if isinstance(v, list):
        if not v or any(x not in (0, 1) or isinstance(x, bool) for x in v):
            raise MoetuneError(f"{name} = {v!r}: a per-layer list holds 0 (dense) or 1 (MoE) for each layer")
        return [int(x) for x in v]
    n = _int(name, v)
    if n < 1:
        raise MoetuneError(f"{name} = {v!r}: every N-th layer MoE needs N >= 1")
    return n


def coerce(name: str, type_: str, value: Any) -> Any:
    """``value`` converted to ``type_`` (megatron_names.csv grammar) or a MoetuneError naming ``name``."""
    optional = type_.endswith("?")
    base = type_.rstrip("?")
    if value is None or (isinstance(value, str) and value in ("None", "null") and base != "str"):
        if optional or base in ("any", "scope"):
            return [] if base == "scope" else None
        raise MoetuneError(f"{name} cannot be null")
    if base == "any":
        return value
    if base.startswith("choice("):
        choices = base[len("choice("):-1].split("|")
        if value not in choices:
            raise MoetuneError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
        return value
    if base.startswith("list["):
        return _list(name, value, base[len("list["):-1])
    simple = {"int": _int, "float": _float, "bool": _bool, "str": _str, "dtype": _dtype, "scope": _scope,
              "layout": _layout, "moe_freq": _moe_freq}
    if base not in simple:
        return value
    return simple[base](name, value)
