"""Megatron-LM arguments (pretrain_gpt.py / pretrain_hybrid.py) for a normalized config, one flag per line.

Flags and their argparse actions come from megatron_names.csv (dumped from Megatron-LM
megatron/training/arguments.py). A switch left at Megatron-LM's default is omitted; names with no
Megatron-LM flag are listed as comments so nothing is silently dropped.
"""

from __future__ import annotations

from typing import Any

from moetune.configio.finalize import DP_OVERLAP, gathers_param_shards
from moetune.configio.gates import VALUE_DEFAULTS, gate_on
from moetune.configio.mlm import SPECIAL
from moetune.configio.names import NO_DEFAULT, names
from moetune.configio.normalize import Assignment, expand
from moetune.configio.release_context import spelling
from moetune.configio.types import coerce
from moetune.emit import values
from moetune.emit.launch import entry_point

# Megatron-LM spells dtype choices short (arguments.py: --main-grads-dtype {fp32,bf16}, --exp-avg-dtype ...).
_MLM_DTYPE = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


# Bridge's comm_overlap copy of ddp's DP overlap (configio/finalize.py settle_dp_overlap)
SECTION_DP_OVERLAP = frozenset(f"comm_overlap.{f}" for f in DP_OVERLAP)

def _flag_line(name: str, value: Any) -> tuple[str | None, str | None]:
    """(argument line, comment) for one config entry."""
    row = names().get(name)
    if row is None or not row.mlm_flag:
        return None, f"# no Megatron-LM flag: {name}={values.hydra(value)}"
    flag, action = spelling(row.mlm_flags), row.mlm_action  # --megatron-core: that release's spelling
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
    if name == "model.moe_layer_freq" and isinstance(value, list):
        return f"{flag} {values.argv(freq_expression(value))[0]}", None
    if action == "list":
        return " ".join([flag, *values.argv(value)]), None
    if isinstance(value, (list, tuple, dict)):
        return None, f"# {name}={values.hydra(value)} has no Megatron-LM spelling of {flag}; set it by hand"
    if row.type.startswith("dtype"):
        value = _MLM_DTYPE.get(value, value)
    return f"{flag} {values.argv(value)[0]}", None


def mlm_fix_words(fix: dict[str, Any]) -> str:
    """A rule's fix (config names) as a Megatron-LM launch changes its arguments: the arguments to pass, each name as
    its flag with the value ('--moe-router-dtype fp32', '--no-gradient-accumulation-fusion'), then those to drop (a
    switch or list turned off: '; drop --use-torch-fsdp2'); a name with no Megatron-LM flag as written (name=value)."""
    fix = _recipes_expanded(fix)
    words = [*(_fix_word(k, v) for k, v in fix.items()), *(flag for k, flag in _MLM_NEEDS.items() if fix.get(k))]
    words = list(dict.fromkeys(words))  # twins said once
    passed = " ".join(w for w in words if not w.startswith("drop "))
    # each flag dropped once: the empty recompute list's word drops --recompute-granularity too, which a cleared
    # recompute_granularity beside it drops again
    dropped = ", ".join(dict.fromkeys(f for w in words if w.startswith("drop ") for f in w[len("drop "):].split(", ")))
    return "; ".join(filter(None, (passed, dropped and f"drop {dropped}")))


# A switch whose Megatron-LM argument validate_args refuses without another, and that other: "The optimizer cpu
# offload must be used in conjunction with --use-precision-aware-optimizer" (arguments.py :1671-1675 @core_v0.18.2,
# :1803-1807 @core_v0.19.0), where Bridge takes the offload alone. Emit writes it beside the switch, and a fix that
# turns the switch on names it too.
_MLM_NEEDS = {"optimizer.optimizer_cpu_offload": "--use-precision-aware-optimizer"}


# Fields with no Megatron-LM argument that a Megatron-LM launch sets from another field's: Bridge's comm_overlap copies
# of the DP overlap, which Bridge writes onto ddp's and optimizer's (configio/finalize.py settle_dp_overlap; a
# Megatron-LM launch has only --overlap-*), dist's Megatron FSDP switch, which Bridge syncs with ddp's
# (sync_megatron_fsdp; --use-megatron-fsdp), and the data's sequence length (one --seq-length, _derived_by_megatron_lm).
# A fix to one is said as its twin's argument, not as a field such a launch cannot set.
_MLM_TWIN = {**{f"comm_overlap.{f}": f"ddp.{f}" for f in DP_OVERLAP},
             "comm_overlap.overlap_param_gather_with_optimizer_step":
                 "optimizer.overlap_param_gather_with_optimizer_step",
             "dist.use_megatron_fsdp": "ddp.use_megatron_fsdp", "dataset.seq_length": "model.seq_length"}


def _special_word(name: str, value: Any) -> str | None:
    """A flagless field one of Megatron-LM's SPECIAL switches sets (configio/mlm.py): the switch where VALUE is the one
    it gives ('--use-distributed-optimizer' for optimizer.use_distributed_optimizer=true), 'drop' it where VALUE is
    the other of a boolean ('--untie-embeddings-and-output-weights' left out: tied)."""
    for flag, pairs in SPECIAL.items():
        for key, given in pairs:
            if key == name and value == given:
                return flag
            if key == name and isinstance(given, bool) and value is (not given):
                return f"drop {flag}"
    return None


def _recipes_expanded(fix: dict[str, Any]) -> dict[str, Any]:
    """FIX with a named Bridge mixed-precision recipe (diagnose's 'mixed_precision: bf16_with_mxfp8_mixed') as the
    fields it sets that Megatron-LM has an argument for (configio/normalize.py expand): such a launch has no recipe
    names, and the recipe's dtypes are what --bf16 / --fp16 already give."""
    out: dict[str, Any] = {}
    for name, value in fix.items():
        if name != "mixed_precision" or not isinstance(value, str):
            out[name] = value
            continue
        for a in expand(Assignment(key=name, value=value, origin="fix")):
            if names().mlm_flag(a.key):
                out[a.key] = a.value
    return out


def _fix_word(name: str, value: Any) -> str:
    name = names().canonical(name)  # an alias: the flag is its normalized name's
    name = _MLM_TWIN.get(name, name)
    if name == "model.recompute_modules" and value == []:
        # selective over no module recomputes nothing (transformer_config.py @ core_v0.18.2); --recompute-modules takes
        # one value or more (argument_utils.py nargs '+') and, left out, is core_attn: no recompute says it
        return "drop --recompute-granularity, --recompute-modules"
    if not (flag := names().mlm_flag(name)):
        return _special_word(name, value) or f"{name}={values.hydra(value)}"
    line, comment = _flag_line(name, value)
    if comment:  # a value Megatron-LM cannot spell
        return f"{name}={values.hydra(value)}"
    return line or f"drop {flag}"  # off: a store_true switch left out, an empty list or null unset


def _dsa_data_note(config: dict[str, Any]) -> list[str]:
    """DeepSeek Sparse Attention under CP is priced on packed THD batches (walls/dsa.py UNCALIBRATED): said where the
    launch's data decides it."""
    cp = config.get("model.context_parallel_size") or 1
    if config.get("model.experimental_attention_variant") != "dsa" or cp < 2:
        return []
    return ["# DeepSeek Sparse Attention under CP is priced on packed THD batches (Megatron Bridge's GLM-5",
            "# recipes): with fixed-length ones the indexer scores in FP32 PyTorch over every key, which the plan",
            "# does not price."]


def megatron_lm_args(config: dict[str, Any], header: str) -> str:
    lines = [values.comment(header), f"# Megatron-LM arguments for {entry_point(config)} (one per line, shell-quoted; "
             "torchrun.sh reads them with shlex)."]
    lines += ["# The architecture below sets the parameter shapes Megatron-LM's flags express (not a full-width q/k",
              "# norm, or an attention-output bias without MLP biases); what no shape shows (activation beyond SwiGLU,",
              "# rotary base and scaling, windows and sinks, the tokenizer) comes from the model's own MODEL_ARGS,",
              "# e.g. the Megatron-MoE-ModelZoo's model_configs/benchmarking/*.yaml, in EXTRA_ARGS."]
    lines += _dsa_data_note(config)
    lines += values.pragmas(config)
    switches, covered = _switches(config)
    dropped, why = _refused_by_megatron_lm(config)
    args, notes = list(switches), list(why)
    for name, value in sorted(config.items()):
        if name.split(".", 1)[0] in ("cluster", "env") or name in covered or name in dropped:
            continue
        if name in SECTION_DP_OVERLAP:
            continue  # Bridge's copy of ddp's DP overlap (configio/finalize.py), which --overlap-* flags carry
        if name == "model.virtual_pipeline_model_parallel_size" and (
                config.get("model.pipeline_model_parallel_layout") or config.get("model.hybrid_layer_pattern")):
            continue  # Megatron-LM derives VPP from the layout string or the pattern's '|' and refuses both flags
        line, note = _flag_line(name, value)
        if line:
            args.append(line)
        if note:
            notes.append(note)
    args = list(dict.fromkeys(args))  # a switch both spelled by a field's own flag and by SPECIAL, once
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
        if not switch and not (row.bridge_name in VALUE_DEFAULTS and gate_on(config, row.bridge_name)):
            continue
        if coerce(row.bridge_name, row.type, row.mlm_default) != row.default:
            out.append(_flag_line(row.bridge_name, row.default)[0])
    return out


def _switches(config: dict[str, Any]) -> tuple[list[str], set[str]]:
    """Megatron-LM switches for fields with no flag of their own (configio.mlm.SPECIAL, read the other way): the
    switch where the config holds those fields at its values (--use-distributed-optimizer for
    optimizer.use_distributed_optimizer, --untie-embeddings-and-output-weights), and --group-query-attention, without
    which Megatron-LM ignores --num-query-groups and builds full multi-head attention (arguments.py)."""
    out, covered = [], set()
    for flag, pairs in SPECIAL.items():
        flagless = [(k, v) for k, v in pairs if not names().mlm_flag(k)]
        if flagless and all(config.get(k) == v for k, v in flagless):
            out.append(flag)
            covered |= {k for k, _ in flagless}
    groups, heads = config.get("model.num_query_groups"), config.get("model.num_attention_heads")
    if groups and heads and groups < heads and not config.get("model.multi_latent_attention"):
        out.append("--group-query-attention")
    if config.get("model.seq_length"):  # a Megatron-LM-only flag: no Bridge field holds it
        # validate_args requires it (arguments.py); positions beyond the trained sequence are the model's MODEL_ARGS
        out.append(f"--max-position-embeddings {config['model.seq_length']}")
    if "model.position_embedding_type" not in config:
        # Megatron-LM defaults to learned absolute positions (a table of parameters); the models here use rotary
        # embeddings, Mamba hybrids none (rotary scaling such as YaRN is the model's own: MODEL_ARGS)
        out.append(f"--position-embedding-type {'none' if config.get('model.is_hybrid_model') else 'rope'}")
    out += [flag for key, flag in _MLM_NEEDS.items() if config.get(key)]
    return out, covered


def _refused_by_megatron_lm(config: dict[str, Any]) -> tuple[set[str], list[str]]:
    """Fields a Bridge config may hold that Megatron-LM's validate_args refuses, left off with a comment saying why
    (arguments.py): --overlap-param-gather needs --overlap-grad-reduce and something whose shards it gathers (the
    distributed optimizer, Megatron FSDP or, from core_v0.17.0, dist_muon: :1003-1006 @core_v0.18.2), and
    --overlap-param-gather-with-optimizer-step needs --overlap-param-gather; --tp-comm-overlap needs sequence
    parallelism, which Megatron-LM turns off at TP=1 (Bridge drops the overlap silently there). Selective recompute
    over no module recomputes nothing (transformer_config.py @ core_v0.18.2), which Megatron-LM cannot spell
    (--recompute-modules takes one value or more, and left out is core_attn): its granularity is left off too."""
    left, notes = set(), []
    sharded = gathers_param_shards(config)
    if config.get("ddp.overlap_param_gather") and not (config.get("ddp.overlap_grad_reduce") and sharded):
        left.add("ddp.overlap_param_gather")
        notes.append("# left off: --overlap-param-gather (Megatron-LM asserts it needs --overlap-grad-reduce and the "
                     "distributed optimizer, Megatron FSDP or dist_muon; Bridge ran it)")
    if config.get("optimizer.overlap_param_gather_with_optimizer_step") and (
            "ddp.overlap_param_gather" in left or not config.get("ddp.overlap_param_gather")):
        left.add("optimizer.overlap_param_gather_with_optimizer_step")
        notes.append("# left off: --overlap-param-gather-with-optimizer-step (Megatron-LM asserts it needs "
                     "--overlap-param-gather)")
    tp = config.get("model.tensor_model_parallel_size") or 1
    if config.get("comm_overlap.tp_comm_overlap") and (tp < 2 or not config.get("model.sequence_parallel")):
        left.add("comm_overlap.tp_comm_overlap")
        notes.append(f"# left off: --tp-comm-overlap (Megatron-LM asserts sequence parallelism, off at TP={tp}; "
                     "Bridge turns the overlap off there)")
    if config.get("model.recompute_granularity") == "selective" and config.get("model.recompute_modules") == []:
        left.add("model.recompute_granularity")
        notes.append("# left off: --recompute-granularity selective (over no module it recomputes nothing; "
                     "--recompute-modules cannot be given empty, and left out it is core_attn)")
    return left, notes


def freq_expression(layers: list[int]) -> str:
    """A per-layer moe_layer_freq list in Megatron-LM's expression form, runs collapsed: [0,0,0,1,...] ->
    "([0]*3+[1]*58)" (arguments.py moe_freq_type evaluates it)."""
    runs: list[list[int]] = []
    for x in layers:
        if runs and runs[-1][0] == x:
            runs[-1][1] += 1
        else:
            runs.append([x, 1])
    return "(" + "+".join(f"[{x}]*{n}" for x, n in runs) + ")"
