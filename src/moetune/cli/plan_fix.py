"""``moetune plan --fix key=value``: the pins a user gives, each checked and parsed into the `fixed` dict the search
reads (planner/search.py plan; its layouts, enumerate.py, and its knob sets, knob_grid.py)."""

from moetune.cli.flag_checks import scope_words
from moetune.errors import MoetuneError
from moetune.layout.dp_sharding import MEGATRON_FSDP_STRATEGIES
from moetune.layout.knobs import CP1_COMM_TYPES, CP_COMM_TYPES, CUDA_GRAPH_SCOPES, DISPATCHERS, PRECISIONS
from moetune.layout.layout import parse_pipeline_layout
from moetune.layout.modules import parse_modules, parse_offload_modules
from moetune.words import closest

INT_KEYS = ("tp", "cp", "pp", "vpp", "ep", "etp", "mbs")
BOOL_KEYS = ("ep_overlap", "delay_wgrad", "main_grads_fp32", "overlap_grad_reduce", "overlap_param_gather",
             "fp8_output_proj", "tp_comm_overlap")
# the keys that take a word, a list or a fraction (parse_fix reads each below)
OTHER_KEYS = ("precision", "dispatcher", "cuda_graph_scope", "optimizer", "optimizer_offload_fraction", "recompute",
              "recompute_modules", "offload_modules", "cp_comm_type", "megatron_fsdp", "pipeline_layout")


# Choices plan takes as flags of their own (a --fix of them is a slip for the flag; {value}: the value as typed)
OWN_FLAGS = {"routing": "--routing dropless|force-balance", "token_imbalance": "--token-imbalance {value}",
             "seq": "--seq", "seq_length": "--seq", "gbs": "--gbs", "global_batch_size": "--gbs", "gpus": "--gpus"}


def parse_fix(items: tuple[str, ...]) -> dict:
    """--fix key=value pairs: layout sizes, mbs, precision, dispatcher, recompute, cuda_graph_scope, ..."""
    fixed: dict = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise MoetuneError(f"--fix {item!r}: expected key=value, e.g. --fix ep=64")
        if key in fixed:
            raise MoetuneError(f"--fix {item}: {key} is pinned by an earlier --fix already; give each key once")
        if key == "recompute_modules" and fixed.get("recompute") in ("none", "full") \
                or key == "recompute" and value != "selective" and "recompute_modules" in fixed:
            raise MoetuneError(f"--fix {item}: conflicts with an earlier --fix (recompute_modules only with "
                               "recompute=selective)")
        if key in INT_KEYS:
            if not (value.isascii() and value.isdigit()) or len(value) > 9 or int(value) < 1:
                raise MoetuneError(f"--fix {key}={value}: expected a positive integer")
            fixed[key] = int(value)
        elif key in BOOL_KEYS:
            if value.lower() not in ("true", "false"):
                raise MoetuneError(f"--fix {key}={value}: expected true or false")
            fixed[key] = [value.lower() == "true"] if key == "ep_overlap" else value.lower() == "true"
        elif key in ("precision", "dispatcher"):
            choices = PRECISIONS if key == "precision" else DISPATCHERS
            if value not in choices:
                raise MoetuneError(f"--fix {key}={value}: expected one of {', '.join(choices)}")
            fixed[key] = [value]
        elif key == "cuda_graph_scope":
            words = scope_words(value, "--fix cuda_graph_scope=")  # its lines name the pin themselves
            fixed[key] = [_named(key, value, lambda v: _scopes(words))]
        elif key == "optimizer_offload_fraction":
            try:
                fraction = float(value)
            except ValueError:
                fraction = -1.0
            if not 0 <= fraction <= 1:
                raise MoetuneError(f"--fix optimizer_offload_fraction={value}: expected a number in [0, 1]")
            fixed[key] = [fraction]
        elif key == "recompute":
            if value not in ("none", "selective", "full"):
                raise MoetuneError(f"--fix recompute={value}: expected none, selective or full")
            fixed[key] = value
        elif key == "recompute_modules":
            fixed["recompute_modules"] = _named(key, value, parse_modules)
        elif key == "offload_modules":
            fixed["offload_modules"] = _named(key, value, parse_offload_modules)
        elif key == "pipeline_layout":  # one line on unknown symbols; placement is checked later
            parse_pipeline_layout(value, named=f"--fix {key}={value}")
            fixed[key] = value
        elif key == "optimizer":
            if value not in ("adam", "muon"):
                raise MoetuneError(f"--fix optimizer={value}: expected adam or muon (dist_muon: muon under the "
                                   "layer-wise distributed optimizer)")
            fixed[key] = value
        elif key == "megatron_fsdp":  # Megatron FSDP's data_parallel_sharding_strategy (layout/dp_sharding.py)
            if value not in MEGATRON_FSDP_STRATEGIES:
                raise MoetuneError(f"--fix megatron_fsdp={value}: expected a data_parallel_sharding_strategy, one of "
                                   f"{', '.join(MEGATRON_FSDP_STRATEGIES)}")
            fixed[key] = value
        elif key == "cp_comm_type":
            if value not in CP_COMM_TYPES:
                raise MoetuneError(f"--fix cp_comm_type={value}: expected one of {', '.join(CP_COMM_TYPES)}")
            fixed[key] = value
        elif key in OWN_FLAGS:
            raise MoetuneError(f"--fix {key}: set it with {OWN_FLAGS[key].replace('{value}', value)}, not --fix")
        else:
            keys = [*INT_KEYS, *BOOL_KEYS, *OTHER_KEYS]
            guess = f" (did you mean {near}?)" if (near := closest(key, keys)) else ""
            raise MoetuneError(f"--fix {key}: unknown key{guess}; use one of {', '.join(keys)}")
    if fixed.get("cp") == 1 and fixed.get("cp_comm_type", "auto") not in CP1_COMM_TYPES:  # as estimate's at CP 1
        raise MoetuneError(f"--fix cp_comm_type={fixed['cp_comm_type']} sets how context-parallel ranks exchange "
                           "attention inputs; --fix cp=1 leaves nothing to exchange: drop one of the two")
    _refuse_muon_offload(fixed)
    return fixed


def _named(key: str, value: str, parse):
    """parse(value), its error line naming the pin as typed: the parsers are estimate's, whose lines name no flag."""
    try:
        return parse(value)
    except MoetuneError as err:
        raise MoetuneError(f"--fix {key}={value}: {err}") from None


def _scopes(words: tuple[str, ...]) -> tuple[str, ...]:
    if bad := sorted(set(words) - set(CUDA_GRAPH_SCOPES)):
        raise MoetuneError(f"unknown CUDA-graph scope(s) {bad}; choose from {', '.join(CUDA_GRAPH_SCOPES)}, or none")
    return words


def _refuse_muon_offload(fixed: dict) -> None:
    """Muon runs without the optimizer's CPU offload (Megatron builds emerging optimizers apart from the
    precision-aware one offload needs; layout/knobs.py): search.plan leaves it off, and a pin of it is one line."""
    if fixed.get("optimizer") == "muon" and any(f > 0 for f in fixed.get("optimizer_offload_fraction", [0.0])):
        raise MoetuneError("--fix optimizer=muon with optimizer_offload_fraction above 0: Muon runs without the "
                           "optimizer's CPU offload (Megatron builds emerging optimizers apart from the precision-"
                           "aware optimizer offload needs); drop one of the two")
