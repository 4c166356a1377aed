"""Read Megatron-LM command-line arguments into Bridge dotted assignments.

Accepts a bare argument list or a whole launch line/script (``torchrun ... pretrain_gpt.py --tp ...``; a script
is first run through configio/shell.py, which expands its arrays and branches into the training command's words):
parsing starts after the last ``*.py`` token, or at the first ``--flag``. ``NAME=value`` words before
that (``CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun ...``, ``export NAME=value``) become ``env.NAME``.
Every flag must be one Megatron-LM's parser knows (megatron_names.csv lists all of them, dumped from
megatron/training/arguments.py); flags with no Bridge field are read and ignored.
Shell variables in values (``${TP}``, ``$EP``, ``${PP:-8}``) take their value as the shell would: from a
``NAME=value`` word earlier in the script (``TP=${TP:-2}``), else the environment, else the ``:-`` default; one
still unset in a flag moetune reads is an error naming the variable.
"""

from __future__ import annotations

import ast
import difflib
import os
import re
from collections.abc import Mapping
from typing import Any

from moetune.configio.gates import VALUE_DEFAULTS, gate_on
from moetune.configio.names import LAUNCHER, NO_DEFAULT, names
from moetune.configio.normalize import FROM_LAYOUT, Assignment
from moetune.configio.readers import PRAGMA, SHELL_NAME
from moetune.configio.shell import launch_words
from moetune.configio.shell_words import tokens
from moetune.configio.types import coerce, parse_text
from moetune.errors import MoetuneError

_ENV_WORD = re.compile(rf"^({SHELL_NAME})=(.*)$")
_VARIABLE = re.compile(rf"\$\{{({SHELL_NAME})(?::-([^}}]*))?\}}|\$({SHELL_NAME})")
# Megatron-LM flags that set a Bridge field under another name (megatron/training/arguments.py
# validate_args / core_transformer_config_from_args).
SPECIAL = {
    "--recompute-activations": [("model.recompute_granularity", "selective")],
    "--moe-enable-deepep": [("model.moe_token_dispatcher_type", "flex"),
                            ("model.moe_flex_dispatcher_backend", "deepep")],
    "--untie-embeddings-and-output-weights": [("model.share_embeddings_and_output_weights", False)],
    "--te-rng-tracker": [("model.use_te_rng_tracker", True), ("rng.te_rng_tracker", True)],
    # one switch for both: Megatron-LM hands args.use_distributed_optimizer to the DDP and optimizer configs
    "--use-distributed-optimizer": [("ddp.use_distributed_optimizer", True),
                                    ("optimizer.use_distributed_optimizer", True)],
    # BF16 gradient accumulation and reduction: Megatron-LM then leaves accumulate_allreduce_grads_in_fp32 off
    # (arguments.py validate_args), which is Bridge's mixed_precision.grad_reduce_in_fp32=False
    "--grad-reduce-in-bf16": [("mixed_precision.grad_reduce_in_fp32", False)],
}


def _tokens(text: str, origin: str, env: Mapping[str, str] | None = None) -> list[str]:
    """Pragma words, then the words of the launch the script runs, as bash expands them (configio/shell.py)."""
    pragmas = [line.strip()[len(PRAGMA):].strip() for line in text.splitlines()
               if line.strip().startswith(PRAGMA)]
    return ["@pragma:" + p for p in pragmas] + launch_words(text, origin, os.environ if env is None else env)


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


def _flag_value(flag: str, values: list[str], origin: str):
    row = names().by_flag.get(flag)
    if row is None:
        close = difflib.get_close_matches(flag, list(names().by_flag), n=1, cutoff=0.8)
        hint = (f"; did you mean {close[0]}?" if close else
                "; not one of the training arguments (megatron/training/arguments.py) moetune checks: an inference or "
                "export script's own flag, or one newer than megatron_names.csv")
        raise MoetuneError(f"{origin}: unknown Megatron-LM argument {flag}{hint}")
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
            raise MoetuneError(f"{origin}: {flag} takes one value, got {len(values)} ({' '.join(values)!r})")
        value = values[0]
    if not row.bridge_name:
        return None, None
    try:
        return row.bridge_name, coerce(row.bridge_name, row.type, value)
    except MoetuneError as err:
        raise MoetuneError(f"{origin}: {flag}: {err}") from None


def parse_mlm(text: str, origin: str, env: Mapping[str, str] | None = None) -> list[Assignment]:
    """A Megatron-LM argument list or launch script; ``env``: the variables it sees (default: os.environ)."""
    return parse_mlm_words(_tokens(text, origin, env), origin, env)


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
    for w in words[:start]:
        if w.startswith("@pragma:"):
            key, _, value = w[len("@pragma:"):].partition("=")
            # the value as written in an overrides file (hydra: a path is quoted), as overrides_lines reads it
            out.append(Assignment(key=key.strip(), value=parse_text(value.strip()), origin=origin))
        elif m := _ENV_WORD.match(w):
            env[m.group(1)] = substitute(m.group(2), env)
            out.append(Assignment(key=f"env.{m.group(1)}", value=env[m.group(1)], origin=origin))
    words = words[:start] + [substitute(w, env) for w in words[start:]]
    i, raw_vpp_layers = start, None
    while i < len(words):
        word = words[i]
        if not word.startswith("--"):
            raise MoetuneError(f"{origin}: expected a --flag, got {word!r}")
        flag, eq, inline = word.partition("=")
        j = i + 1
        while j < len(words) and not words[j].startswith("--"):
            j += 1
        values = ([inline] if eq else []) + words[i + 1:j]
        i = j
        here = f"{origin} {flag}"
        if flag in SPECIAL:
            out += [Assignment(key=k, value=v, origin=here) for k, v in SPECIAL[flag]]
            continue
        if flag == "--num-layers-per-virtual-pipeline-stage":
            _unset_variable(flag, values, here)
            raw_vpp_layers = (values, here)
            continue
        key, value = _flag_value(flag, values, here)
        if key is not None:
            out.append(Assignment(key=key, value=value, origin=here))
    _validate_args(out)
    _groups_ignored_without_gqa(out, "--group-query-attention" in words[start:])
    out += _precision_default(out, origin) + _distributed_optimizer_default(out, origin) + _mlm_defaults(out, origin)
    out.append(Assignment(key=LAUNCHER, value="megatron-lm", origin=origin, soft=True))
    if raw_vpp_layers is not None:
        out.append(_vpp_from_layers(out, *raw_vpp_layers))
    return out + _vpp_from_layout(out, origin)


def _vpp_from_layout(out: list[Assignment], origin: str) -> list[Assignment]:
    """--pipeline-model-parallel-layout, or --hybrid-layer-pattern with '|' separators, sets VPP = its stages / PP
    (normalize.merge works it out once every input is in: the PP may come from another), and no other VPP flag may
    be given beside it (arguments.py validate_args: "No more than one of the following arguments can be set at the
    same time"; "Virtual pipeline stages are derived from the number of | segments")."""
    given = {a.key: a for a in out}
    layout = given.get("model.pipeline_model_parallel_layout")
    pattern = given.get("model.hybrid_layer_pattern")
    split = layout if layout is not None and layout.value is not None else pattern
    if split is None or split.value is None:
        return []
    flag = "--pipeline-model-parallel-layout" if split is layout else "--hybrid-layer-pattern"
    if "model.virtual_pipeline_model_parallel_size" in given:
        raise MoetuneError(f"{origin}: {flag} sets the virtual pipeline size itself; drop "
                           "--num-virtual-stages-per-pipeline-rank / --num-layers-per-virtual-pipeline-stage "
                           "(Megatron-LM refuses both)")
    return [Assignment(key="model.virtual_pipeline_model_parallel_size", value=FROM_LAYOUT,
                       origin=f"{split.origin} (VPP from {flag}, as Megatron-LM derives it)")]


def _validate_args(out: list[Assignment]) -> None:
    """What Megatron-LM's validate_args changes before training (megatron/training/arguments.py)."""
    tp = next((a.value for a in out if a.key == "model.tensor_model_parallel_size"), 1)
    for a in out:
        if a.key == "model.sequence_parallel" and a.value and tp == 1:
            # "Disabling sequence parallelism because tensor model parallelism is disabled"
            a.value, a.origin = False, f"{a.origin} (off: Megatron-LM disables it at TP=1)"


def _groups_ignored_without_gqa(out: list[Assignment], gqa: bool) -> None:
    """Megatron-LM hands --num-query-groups to the model only under --group-query-attention, else one KV group per
    head (training/argument_utils.py core_transformer_config_from_args: num_query_groups None; its argparse default
    is 1): without the switch the value given, or a log's dumped 1, reads as the heads. This reads the launch; whether
    TP fits the groups is another job (rule shape.query_groups_vs_tp, layout/validate.py _tp_fits_query_groups)."""
    heads = next((a.value for a in out if a.key == "model.num_attention_heads"), None)
    for a in out if not gqa else ():
        if a.key == "model.num_query_groups" and a.value != heads:
            a.value, a.origin = heads, f"{a.origin} (ignored without --group-query-attention: a KV group per head)"


def _distributed_optimizer_default(out: list[Assignment], origin: str) -> list[Assignment]:
    """Megatron-LM without --use-distributed-optimizer keeps every optimizer state on every DP rank (its default is
    off, Bridge's recipes turn it on): say so, so the memory wall counts it."""
    if any(a.key in ("ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer") for a in out):
        return []
    return [Assignment(key=k, value=False, origin=f"{origin} (no --use-distributed-optimizer)", soft=True)
            for k in ("ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer")]


def _precision_default(out: list[Assignment], origin: str) -> list[Assignment]:
    """Megatron-LM without --bf16/--fp16 trains in FP32: say so explicitly so precision rules can decide."""
    given = {a.key for a in out}
    if "mixed_precision.bf16" in given or "mixed_precision.fp16" in given:
        return []
    return [Assignment(key="mixed_precision.bf16", value=False, origin=f"{origin} (no --bf16)", soft=True),
            Assignment(key="mixed_precision.fp16", value=False, origin=f"{origin} (no --fp16)", soft=True)]


def _mlm_defaults(out: list[Assignment], origin: str) -> list[Assignment]:
    """For the knobs moetune reads (role "used"), write Megatron-LM's default down where it differs from
    Megatron Bridge's: e.g. Megatron-LM fuses gradient accumulation unless --no-gradient-accumulation-fusion,
    defaults --fp8-recipe to delayed and --optimizer-offload-fraction to 1.0; a VALUE_DEFAULTS flag's default is
    written wherever its gate is on (configio/gates.py), even where Bridge's is the same. The normalized config then
    describes the run Megatron-LM would make, not Bridge's defaults.
    """
    given = {a.key: a.value for a in out}  # a key given twice to two values is refused (normalize.resolve)
    filled = []
    for row in names().by_bridge.values():
        if row.bridge_name in given or row.role != "used" or row.mlm_default in (NO_DEFAULT, None):
            continue
        switch = row.mlm_action in ("store_true", "store_false", "bool_optional")
        gated = row.bridge_name in VALUE_DEFAULTS
        if not switch and not (gated and gate_on(given, row.bridge_name)):
            continue
        value = coerce(row.bridge_name, row.type, row.mlm_default)
        if value != row.default or gated:
            filled.append(Assignment(key=row.bridge_name, value=value, origin=f"{origin} (Megatron-LM default)",
                                     soft=True))
    return filled


def _vpp_from_layers(out: list[Assignment], values: list[str], origin: str) -> Assignment:
    """--num-layers-per-virtual-pipeline-stage L  ->  VPP = layers / (PP * L), the embedding and the loss counting
    as a layer each under --account-for-embedding/loss-in-pipeline-split (arguments.py validate_args)."""
    given = {a.key: a.value for a in out}
    layers, pp = given.get("model.num_layers"), given.get("model.pipeline_model_parallel_size", 1)
    if any(given.get(f"model.num_layers_in_{end}_pipeline_stage") is not None for end in ("first", "last")):
        # validate_args: "please use --num-virtual-stages-per-pipeline-rank to specify virtual pipeline parallel
        # degree when enable uneven pipeline parallelism" (arguments.py:529-531 @core_v0.16.0)
        raise MoetuneError(f"{origin} with uneven first/last stages (--decoder-first/last-pipeline-num-layers): "
                           "Megatron-LM asserts the other VPP flag there; use --num-virtual-stages-per-pipeline-rank")
    if len(values) != 1 or not values[0].isdigit() or not layers:
        raise MoetuneError(f"{origin}: needs one integer and --num-layers; "
                           "or use --num-virtual-stages-per-pipeline-rank")
    layers += bool(given.get("model.account_for_embedding_in_pipeline_split")) + bool(
        given.get("model.account_for_loss_in_pipeline_split"))
    per_stage = int(values[0])
    if per_stage < 1 or not isinstance(pp, int) or pp < 1:
        raise MoetuneError(f"{origin}: layers per virtual stage ({per_stage}) and --pipeline-model-parallel-size "
                           f"({pp}) must be at least 1")
    if layers % (pp * per_stage):
        raise MoetuneError(f"{origin}: {layers} layers (with the embedding/loss the split accounts for) are not "
                           f"divisible by PP {pp} x {per_stage}")
    return Assignment(key="model.virtual_pipeline_model_parallel_size", value=layers // (pp * per_stage), origin=origin)


def argument_dump_config(args: Mapping[str, str]) -> dict[str, Any]:
    """Bridge dotted names of a Megatron-LM log's argument dump (training/arguments.py print_args: one
    ``name ..... value`` line per argparse destination, the value as Python prints it). A destination is read where it
    is its flag's own spelling (``overlap_grad_reduce`` is ``--overlap-grad-reduce``; ``--no-...`` switches are not);
    None where the field takes none, and a value the field's type refuses, are left out: the dump tells what ran, it
    is not checked here."""
    out: dict[str, Any] = {}
    for dest, text in args.items():
        row = names().by_flag.get("--" + dest.replace("_", "-"))
        if row is None or not row.bridge_name or text == "None" and not row.type.endswith("?"):
            continue
        try:
            value = ast.literal_eval(text) if len(text) <= 1000 else text
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            value = text
        try:
            out[row.bridge_name] = coerce(row.bridge_name, row.type, value)
        except (MoetuneError, ValueError, OverflowError):  # text the field refuses, a number past Python's limits
            continue
        if dest == "use_distributed_optimizer":  # Megatron-LM hands it to the DDP and optimizer configs (SPECIAL)
            out["optimizer.use_distributed_optimizer"] = out[row.bridge_name]
    if "model.num_query_groups" in out and args.get("group_query_attention") == "False":  # _groups_ignored_without_gqa
        out["model.num_query_groups"] = out.get("model.num_attention_heads")
    return out
