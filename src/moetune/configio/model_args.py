"""Megatron-LM's YAML form of a launch: ``ENV_VARS:`` and ``MODEL_ARGS:`` mappings of ``--flag: value``.

Megatron-LM's functional tests write their runs this way (tests/functional_tests/test_cases/*/model_config.yaml)
and so does the Megatron-MoE-ModelZoo (model_configs/benchmarking/*.yaml), whose launcher fills ``${TP}``-style
placeholders from the environment with envsubst before reading the file (interactive_benchmarking.sh). The flags
become arguments as their harness builds them (tests/functional_tests/shell_test_utils/_run_training.sh): ``true``
is the bare switch, a list or a ``[a, b]`` string is several values, an empty value drops the flag; ``false``
drops it too (the harness would pass the word "false", which a switch refuses). Other top-level keys (TEST_TYPE,
LAUNCHER, ...) steer the test harness, not the run, and are not read.

Megatron-LM's MoE recipes (examples/moe_recipes/*/*/*.yaml on its dev branch, 9c5258f109: "ENV_VARS: environment
variables ... ARGS: Megatron-LM training arguments", beside a DEPENDENCIES container build) key the same arguments by
their argparse destination, ``num_layers: 48``: each is read as its flag, ``--num-layers``, with MODEL_ARGS's values;
a destination whose flag turns it off (``overlap_p2p_comm``, set by ``--no-overlap-p2p-communication``) is that flag
where the recipe sets it false, and nothing where it sets it true (its default).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from typing import Any

from moetune.configio.mlm import parse_mlm_words, substitute
from moetune.configio.names import names
from moetune.configio.normalize import Assignment
from moetune.errors import MoetuneError


def is_model_args(data: Any) -> bool:
    return isinstance(data, dict) and ("MODEL_ARGS" in data or "ARGS" in data)


def _flag_of(dest: str) -> tuple[str, bool]:
    """(the flag that sets argparse destination `dest`, whether it stores false): the destination spelled as a flag
    where Megatron-LM has that flag, else its store_false flag (names: a Bridge field of the same name), else the
    spelled flag, which the parser then names as unknown."""
    spelled = "--" + dest.replace("_", "-")
    if names().by_flag.get(spelled) is not None:
        return spelled, False
    for row in names().by_bridge.values():
        if row.mlm_action == "store_false" and row.bridge_name.rsplit(".", 1)[-1] == dest and row.mlm_flags:
            return row.mlm_flags[0], True
    return spelled, False


def _recipe_args(args: Any, origin: str) -> dict:
    """A moe_recipes ARGS mapping (destination: value) as MODEL_ARGS's (--flag: value)."""
    if not isinstance(args, dict):
        raise MoetuneError(f"{origin}: ARGS must be a mapping of argument: value, got {str(args)[:80]!r}")
    out: dict = {}
    for dest, value in args.items():
        flag, stores_false = _flag_of(str(dest))
        if stores_false:  # the flag sets the destination false: given where the recipe sets it false
            value = value is False or str(value).lower() == "false"
        out[flag] = value
    return out


def _values(value: Any) -> list[str] | None:
    """Argument words after a flag for its YAML value (placeholders filled); None drops the flag. The string
    "true"/"false" a placeholder gives counts as the switch (the ModelZoo launcher's yq filter)."""
    if value is True or value == "true":
        return []
    if value is False or value is None or value in ("", "false"):
        return None
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    text = _unescaped(str(value).strip())
    if text.startswith("[") and text.endswith("]"):
        return [v.strip() for v in text[1:-1].replace(",", " ").split()]
    return [text]


def _unescaped(text: str) -> str:
    """A value with backslash escapes as the harness hands it to Megatron-LM: `echo "$value" | xargs` takes one level
    of escapes, the `eval "TRAINING_PARAMS_ARRAY=(...)"` the next (tests/functional_tests/shell_test_utils/
    _run_training.sh :112 and :139 @core_v0.16.0), so the test configs' `Et\\|\\(tt\\|\\)*6mL` runs as
    `Et|(tt|)*6mL` (it had read as a layout with unknown symbols). Only values with a backslash are read this way."""
    if "\\" not in text:
        return text
    try:
        for _ in range(2):
            text = " ".join(shlex.split(text))
    except ValueError as err:
        raise MoetuneError(f"MODEL_ARGS value {text!r}: {err}, as the test harness's shell would read it") from None
    return text


def model_args_words(args: Any, origin: str, env: Mapping[str, str]) -> list[str]:
    """Shell words of a MODEL_ARGS mapping, ``env`` filled into its placeholders first (envsubst)."""
    if not isinstance(args, dict):
        raise MoetuneError(f"{origin}: MODEL_ARGS must be a mapping of --flag: value, got {args!r}")
    words: list[str] = []
    for flag, value in args.items():
        if not str(flag).startswith("--"):
            raise MoetuneError(f"{origin}: MODEL_ARGS key {flag!r} is not a --flag")
        values = _values(substitute(value, env) if isinstance(value, str) else value)
        row = names().by_flag.get(str(flag))
        if values and row is not None and row.mlm_action == "list":  # "a b": the shell's words, as the ModelZoo
            values = [w for v in values for w in v.split()]          # launcher passes them
        if values is not None:
            words += [str(flag), *values]
    return words


def read_model_args(data: dict, origin: str, env: Mapping[str, str] | None = None) -> list[Assignment]:
    """Assignments of a MODEL_ARGS YAML: its ENV_VARS as env.*, its MODEL_ARGS as Megatron-LM arguments."""
    env_vars = data.get("ENV_VARS") or {}
    if not isinstance(env_vars, dict):
        raise MoetuneError(f"{origin}: ENV_VARS must be a mapping of NAME: value, got {env_vars!r}")
    shell = os.environ if env is None else env
    out = [Assignment(key=f"env.{k}", value=substitute(v, shell) if isinstance(v, str) else v, origin=origin)
           for k, v in env_vars.items()]
    args = data["MODEL_ARGS"] if "MODEL_ARGS" in data else _recipe_args(data["ARGS"], origin)
    return parse_mlm_words(model_args_words(args, origin, shell), origin, env, out=out)
