"""How one config value is spelled in each target: Hydra overrides, Python, Megatron-LM argv, shell."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import yaml

from moetune.configio.names import LAUNCHER, names

_PLAIN = re.compile(r"^[A-Za-z_][\w.\-/]*$")


def hydra(value: Any) -> str:
    """A value as Hydra's override grammar reads it (Megatron Bridge omegaconf_utils.parse_hydra_overrides)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _PLAIN.match(text) and yaml.safe_load(text) == text:
        return text
    return json.dumps(text)


# Megatron's short dtype names (Megatron-LM --*-dtype choices, Bridge's str_to_dtype) -> torch's
TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp8": "uint8"}


def python(name: str, value: Any) -> str:
    """A value as Python source; dtype fields become torch dtypes as Bridge recipes write them."""
    row = names().get(name)
    if row is not None and row.type.startswith("dtype") and isinstance(value, str):
        return f"torch.{TORCH_DTYPES.get(value, value)}"
    return repr(value)


def argv(value: Any) -> list[str]:
    """Megatron-LM argument value tokens (shell-quoted)."""
    items = value if isinstance(value, (list, tuple)) else [value]
    return [shlex.quote(str(v)) for v in items]


def double_quoted(value: Any) -> str:
    """Text safe inside a bash double-quoted ``"${NAME:-...}"`` expansion."""
    if isinstance(value, bool):
        value = int(value)
    return re.sub(r'([\\"$`}])', r"\\\1", str(value))


def sections(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Config keys grouped by section (model, train, ...), in a stable order."""
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(config):
        section, _, field = key.partition(".")
        out.setdefault(section, {})[field] = config[key]
    return out


def comment(header: str) -> str:
    """HEADER (emit's lines naming the run, emit_all) as `#` comment lines, for the shell and text files."""
    return "\n".join(f"# {line}" for line in header.splitlines())


def pragmas(config: dict) -> list[str]:
    """moetune's own cluster facts as ``# moetune: key=value`` comment lines, which check reads back; not the
    launcher, which the reader of each emitted file sets itself (one config emits both Bridge and Megatron-LM)."""
    return [f"# moetune: {k}={hydra(v)}" for k, v in sorted(config.items())
            if k.startswith("cluster.") and k != LAUNCHER]
