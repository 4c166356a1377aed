"""Read Megatron-LM command-line arguments into Bridge dotted assignments.

Accepts a bare argument list or a whole launch line/script (``torchrun ... pretrain_gpt.py --tp ...``; a script
is first run through configio/shell.py, which expands its arrays and branches into the training command's words):
parsing starts after the last ``*.py`` token, or at the first ``--flag``. ``NAME=value`` words before
that (``CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun ...``, ``export NAME=value``) become ``env.NAME``.
Every flag must be one Megatron-LM's parser knows (megatron_names.csv lists all of them, dumped from
megatron/training/arguments.py); flags with no Bridge field are read and ignored.
Shell variables in values (``${TP}``, ``$EP``, ``${PP:-8}``) take their value as the shell would: from a
``NAME=value`` word earlier in the script (``TP=${TP:-2}``), else the environment, else the ``:-`` default; one
still unset in a flag moetune reads is an error naming the variable. What Megatron-LM's validate_args and defaults
then make of the flags is configio/mlm_validate.py's.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from moetune.configio.extra_args import MAPPED, check_extra, takes
from moetune.configio.mlm_validate import as_megatron_lm_runs
from moetune.configio.names import names
from moetune.configio.normalize import Assignment
from moetune.configio.readers import PRAGMA, SHELL_NAME
from moetune.configio.release_context import note, target
from moetune.configio.releases import dropped_flag_of, old_flag_hint
from moetune.configio.shell import launch_words
from moetune.configio.shell_words import tokens
from moetune.configio.types import coerce, parse_text
from moetune.errors import MoetuneError
from moetune.words import closest

_ENV_WORD = re.compile(rf"^({SHELL_NAME})=(.*)$")
_VARIABLE = re.compile(rf"\$\{{({SHELL_NAME})(?::-([^}}]*))?\}}|\$({SHELL_NAME})")
# Megatron-LM flags that set a Bridge field under another name (megatron/training/arguments.py
# validate_args / core_transformer_config_from_args).
SPECIAL = {
    "--recompute-activations": [("model.recompute_granularity", "selective")],
    # the field itself too: a release before core_v0.16.0 asserts it under flex (cli/release_check.py), and from
    # 0.16 TransformerConfig.__post_init__ turns it into flex + deepep (transformer_config.py @ core_v0.19.0)
    "--moe-enable-deepep": [("model.moe_token_dispatcher_type", "flex"),
                            ("model.moe_flex_dispatcher_backend", "deepep"), ("model.moe_enable_deepep", True)],
    "--untie-embeddings-and-output-weights": [("model.share_embeddings_and_output_weights", False)],
    "--te-rng-tracker": [("model.use_te_rng_tracker", True), ("rng.te_rng_tracker", True)],
    # one switch for both: Megatron-LM hands args.use_distributed_optimizer to the DDP and optimizer configs
    "--use-distributed-optimizer": [("ddp.use_distributed_optimizer", True),
                                    ("optimizer.use_distributed_optimizer", True)],
    # BF16 gradient accumulation and reduction: Megatron-LM then leaves accumulate_allreduce_grads_in_fp32 off
    # (arguments.py validate_args), which is Bridge's mixed_precision.grad_reduce_in_fp32=False
    "--grad-reduce-in-bf16": [("mixed_precision.grad_reduce_in_fp32", False)],
}


def _tokens(text: str, origin: str, env: Mapping[str, str] | None = None, args: Sequence[str] = ()) -> list[str]:
    """Pragma words, then the words of the launch the script runs, as bash expands them (configio/shell.py); `args`:
    the script's own ($1, $2, ...)."""
    pragmas = [line.strip()[len(PRAGMA):].strip() for line in text.splitlines()
               if line.strip().startswith(PRAGMA)]
    return ["@pragma:" + p for p in pragmas] + launch_words(text, origin, os.environ if env is None else env, args)


def has_flags(text: str, origin: str) -> bool:
    """Whether Megatron-LM argument text holds any --flag (comments and quotes read as a shell reads them)."""
    return any(not t.op and t.text.startswith("--") for t in tokens(text, origin))


# words a launch line holds before the script's arguments: the launcher and its own options
_LAUNCHER_WORD = re.compile(r"^(export|torchrun|python3?|-m|-u|--?[\w-]+(=\S*)?|\d+|\S*/\S*)$")


def _start(words: list[str]) -> int:
    scripts = [i for i, w in enumerate(words) if w.endswith(".py")]
    if scripts:
        return scripts[-1] + 1
    flags = [i for i, w in enumerate(words) if w.startswith("--")]
    return flags[0] if flags else len(words)


def substitute(word: str, env: Mapping[str, str]) -> str:
    """``word`` with each shell variable that ``env`` sets (or whose ``${NAME:-default}`` gives one) replaced;
    unset ones stay as written, for _flag_value to name."""
    def value(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        if name in env:
            return env[name]
        return m.group(2) if m.group(2) is not None else m.group(0)
    return _VARIABLE.sub(value, word)


def _unset_variable(flag: str, values: list[str], origin: str) -> None:
    for v in values:
        if m := _VARIABLE.search(v):
            name = m.group(1) or m.group(3)
            raise MoetuneError(f"{origin}: {flag} is {v!r} and {name} is not set; set it as the launcher would "
                               f"({name}=... moetune ...) or write the value into the file")


# characters an unquoted shell word loses or splits at; one left in a value (the `*` of `*30mL`) shows the shell cut it
_SHELL_CHARS = re.compile(r"[|&;<>()*?\[\]]")


def _split_hint(flag: str, values: list[str], origin: str) -> str:
    """Where one value came in pieces because the shell split it: a pipeline layout (`Et|(tt|)*30mL`, whose `|` and
    parentheses are shell operators, and which holds no space: parse_str_to_list in Megatron-LM
    megatron/core/transformer/pipeline_parallel_layer_layout.py @ d98e8a6 refuses any other character than E t m L,
    commas, | ( ) * and digits) or a value still holding such a character."""
    layout = flag == "--pipeline-model-parallel-layout"
    if not layout and not any(_SHELL_CHARS.search(v) for v in values):
        return ""
    example = "Et|(tt|)*30mL" if layout else "..."
    where = (f"inside --mlm-args, e.g. --mlm-args \"... {flag} '{example}'\"" if origin.startswith("--mlm-args")
             else "where the file passes it")
    return f"; the shell splits an unquoted value at | ( ) ; & < > and spaces: quote it {where}"


def _flag_value(flag: str, values: list[str], origin: str, entry: str | None = None):
    row = names().by_flag.get(flag)
    if row is None and dropped_flag_of(target(), flag):
        return None, None  # a flag main dropped that the release the user targets has: read and ignored, as its own
    if row is None or not check_extra(flag, row, entry, origin):
        known = [f for f, r in names().by_flag.items() if takes(r, entry)]
        close = closest(flag, known, cutoff=0.8)
        hint = (f"; did you mean {close}?" if close else
                "; not one of the training arguments (megatron/training/arguments.py) moetune checks: an inference or "
                "export script's own flag, or one newer than Megatron-LM d98e8a6 (2026-08-22, which megatron_names.csv "
                "lists) or removed before it")
        raise MoetuneError(f"{origin}: unknown Megatron-LM argument {flag}{old_flag_hint(flag) or hint}")
    if row.bridge_name and any(_VARIABLE.search(v) for v in values):
        if row.role == "used":  # a field moetune reads: its value must be known
            _unset_variable(flag, values, origin)
        return None, None  # a field moetune passes through, its value left to the launcher (a run name, a path)
    action = row.mlm_action
    if action in ("store_true", "store_false", "bool_optional"):
        if values:
            raise MoetuneError(f"{origin}: {flag} is a switch and takes no value (got {' '.join(values)!r})")
        value = action != "store_false" and not (action == "bool_optional" and flag.startswith("--no-"))
    elif action == "list":
        if not values:
            raise MoetuneError(f"{origin}: {flag} needs at least one value")
        value = values
        if row.type == "any":  # e.g. --moe-aux-loss-coeff: float or list of floats
            parsed = [parse_text(v) for v in values]
            value = parsed[0] if len(parsed) == 1 else parsed
    else:
        if len(values) != 1:
            raise MoetuneError(f"{origin}: {flag} takes one value, got {len(values)} ({' '.join(values)!r})"
                               f"{_split_hint(flag, values, origin)}")
        value = values[0]
    if not row.bridge_name:
        return None, None
    try:
        return row.bridge_name, coerce(row.bridge_name, row.type, value)
    except MoetuneError as err:
        raise MoetuneError(f"{origin}: {flag}: {err}") from None


def parse_mlm(text: str, origin: str, env: Mapping[str, str] | None = None,
              args: Sequence[str] = ()) -> list[Assignment]:
    """A Megatron-LM argument list or launch script; ``env``: the variables it sees (default: os.environ); ``args``:
    the script's positional arguments (Pai-Megatron-Patch's run_mcore_*.sh take their layout as $1 .. $27)."""
    return parse_mlm_words(_tokens(text, origin, env, args), origin, env)


def parse_mlm_words(words: list[str], origin: str, env: Mapping[str, str] | None = None,
                    out: list[Assignment] | None = None) -> list[Assignment]:
    """Assignments of shell words: ``NAME=value`` words (and pragmas) up to the script's arguments, then --flags."""
    start = _start(words)
    stray = [w for w in words[:start] if not (w.startswith("@pragma:") or _ENV_WORD.match(w) or w.endswith(".py")
                                              or _LAUNCHER_WORD.match(w))]
    if start == len(words) and stray:  # words, and not one --flag among them: not Megatron-LM arguments
        raise MoetuneError(f"{origin}: no Megatron-LM --flags, only {' '.join(stray[:3])!r}...; pass arguments as "
                           "pretrain_gpt.py takes them (--tensor-model-parallel-size 2 ...)")
    out, env = list(out or []), dict(os.environ if env is None else env)
    out += _launch_words(words[:start], env, origin)
    args = [substitute(w, env) for w in words[start:]]
    entry = os.path.basename(words[start - 1]) if start and words[start - 1].endswith(".py") else None
    flags, vpp_layers = _flags(args, origin, entry)
    return as_megatron_lm_runs(out + flags, origin, gqa="--group-query-attention" in args, vpp_layers=vpp_layers)


def _launch_words(words: list[str], env: dict[str, str], origin: str) -> list[Assignment]:
    """The pragmas and ``NAME=value`` words before the script's arguments; each variable set is added to `env`."""
    out = []
    for w in words:
        if w.startswith("@pragma:"):
            key, _, value = w[len("@pragma:"):].partition("=")
            # the value as written in an overrides file (hydra: a path is quoted), as overrides_lines reads it
            out.append(Assignment(key=key.strip(), value=parse_text(value.strip()), origin=origin))
        elif m := _ENV_WORD.match(w):
            env[m.group(1)] = substitute(m.group(2), env)
            out.append(Assignment(key=f"env.{m.group(1)}", value=env[m.group(1)], origin=origin))
    return out


def _flags(words: list[str], origin: str,
           entry: str | None = None) -> tuple[list[Assignment], tuple[list[str], str] | None]:
    """(assignments, the values and origin of --num-layers-per-virtual-pipeline-stage or None) of the script's
    --flags, their shell variables substituted; `entry`: the *.py they are handed to (configio/extra_args.py)."""
    out, i, raw_vpp_layers = [], 0, None
    while i < len(words):
        word = words[i]
        if not word.startswith("--"):
            if unset := re.fullmatch(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", word):  # a variable configio/shell.py kept
                raise MoetuneError(f"{origin}: expected a --flag, got {word!r}: {unset.group(1)} is not set (the "
                                   "launch splices in the flags it holds); set it as the launcher would, or pass "
                                   "its flags with --mlm-args")
            raise MoetuneError(f"{origin}: expected a --flag, got {word!r}")
        flag, eq, inline = word.partition("=")
        j = i + 1
        while j < len(words) and not words[j].startswith("--"):
            j += 1
        values = ([inline] if eq else []) + words[i + 1:j]
        i = j
        here = f"{origin} {flag}"
        note([flag], flags=True)  # for --megatron-core: the flags the launch passes (configio/release_context.py)
        # a flag given again takes its last value, as argparse does (launch lines append overrides to a base list)
        out = [a for a in out if a.origin != here]
        if flag in SPECIAL:
            out += [Assignment(key=k, value=v, origin=here) for k, v in SPECIAL[flag]]
            continue
        if flag == "--num-layers-per-virtual-pipeline-stage":
            _unset_variable(flag, values, here)
            raw_vpp_layers = (values, here)
            continue
        key, value = _flag_value(flag, values, here, entry)  # an extra flag: refused where its entry does not add it
        if key is not None:
            out.append(Assignment(key=key, value=value, origin=here))
        out += [Assignment(key=k, value=v, origin=here) for k, v in MAPPED.get(flag, ())]
    return out, raw_vpp_layers


# Destinations the dump prints under another name than their flag's: validate_args' own (the world size, no flag's;
# VPP, from --num-virtual-stages-per-pipeline-rank or the layout string) and dest= renames (--fp8-format's fp8)
DUMP_DESTS = {"fp8": "--fp8-format", "fp4": "--fp4-format",
              "virtual_pipeline_model_parallel_size": "--num-virtual-stages-per-pipeline-rank"}
# print_args shows an enum as Python's repr: "[<CudaGraphModule.attn: 1>, ...]" (cuda_graph_modules, core_v0.18)
_ENUM_REPR = re.compile(r"<\w+\.(\w+): -?\d+>")


def argument_dump_config(args: Mapping[str, str]) -> dict[str, Any]:
    """Bridge dotted names of a Megatron-LM log's argument dump (training/arguments.py print_args: one
    ``name ..... value`` line per argparse destination, the value as Python prints it). A destination is read where it
    is its flag's own spelling (``overlap_grad_reduce`` is ``--overlap-grad-reduce``; ``--no-...`` switches are not) or
    one DUMP_DESTS names; None where the field takes none, and a value the field's type refuses, are left out: the dump
    tells what ran, it is not checked here."""
    out: dict[str, Any] = {}
    for dest, text in args.items():
        row = names().by_flag.get(DUMP_DESTS.get(dest) or "--" + dest.replace("_", "-"))
        if row is None or not row.bridge_name or text == "None" and not row.type.endswith("?"):
            continue
        if dest == "num_virtual_stages_per_pipeline_rank" and "virtual_pipeline_model_parallel_size" in args:
            continue  # validate_args' VPP, set from it or from a layout string, is what ran
        try:
            value = ast.literal_eval(_ENUM_REPR.sub(r"'\1'", text)) if len(text) <= 1000 else text
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            value = text
        if dest == "cp_comm_type" and isinstance(value, list) and len(value) == 1:
            value = value[0]  # argparse's nargs='+' list; one type is every layer's (argument_utils.py)
        try:
            out[row.bridge_name] = coerce(row.bridge_name, row.type, value)
        except (MoetuneError, ValueError, OverflowError):  # text the field refuses, a number past Python's limits
            continue
        if dest == "use_distributed_optimizer":  # Megatron-LM hands it to the DDP and optimizer configs (SPECIAL)
            out["optimizer.use_distributed_optimizer"] = out[row.bridge_name]
    if "model.num_query_groups" in out and args.get("group_query_attention") == "False":  # mlm_validate.py's GQA rule
        out["model.num_query_groups"] = out.get("model.num_attention_heads")
    world = args.get("world_size", "")
    if world.isascii() and world.isdigit() and int(world) > 0:  # validate_args sets it: the GPUs that ran (no flag)
        out["cluster.num_gpus"] = int(world)
    if "virtual_pipeline_model_parallel_size" not in args and out.get("model.pipeline_model_parallel_layout"):
        out.pop("model.virtual_pipeline_model_parallel_size", None)  # the layout's stages set it (normalize derives it)
    return out
