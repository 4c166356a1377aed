"""Flags a training entry point adds on top of Megatron-LM's own parser (its ``extra_args_provider``).

megatron_names.csv lists them with role ``extra_args`` and the file that adds them in verified_in: ModelOpt's
megatron/post_training/arguments.py add_modelopt_args (Megatron-LM@d98e8a6: pretrain_gpt.py and pretrain_hybrid.py
pass it when nvidia-modelopt imports; pretrain_mamba.py runs pretrain_hybrid.py) and Pai-Megatron-Patch's
megatron_patch/arguments.py get_patch_args (Pai-Megatron-Patch@a098ca5: its examples/*/pretrain_*.py pass it). Most
are read and ignored (their notes say why); the few that would change what moetune prices, with nothing in the
config to carry it, are refused here. A flag handed to one of Megatron-LM's own entry points that does not add it is
an error there too (argparse: unrecognized arguments), named as such.
"""

from __future__ import annotations

from moetune.configio.names import Name
from moetune.errors import MoetuneError

_MODELOPT = "Megatron-LM:megatron/post_training/arguments.py"
_PAI = "Pai-Megatron-Patch:megatron_patch/arguments.py"
# who adds each file's flags, for the error lines
PROVIDERS = {
    _MODELOPT: "a ModelOpt flag (Megatron-LM megatron/post_training/arguments.py add_modelopt_args)",
    _PAI: "a Pai-Megatron-Patch flag (megatron_patch/arguments.py get_patch_args)",
}
# Megatron-LM's own entry points (Megatron-LM@d98e8a6) and the extra flags each takes: pretrain_gpt.py :526 and
# pretrain_hybrid.py :543 pass add_modelopt_args; the others pass no provider of these.
MEGATRON_LM_ENTRIES = {
    "pretrain_gpt.py": {_MODELOPT}, "pretrain_hybrid.py": {_MODELOPT}, "pretrain_mamba.py": {_MODELOPT},
    "pretrain_vlm.py": set(), "train_rl.py": set(), "pretrain_bert.py": set(), "pretrain_t5.py": set(),
}

_MODELOPT_ON = ("turns ModelOpt on (post_training/utils.py maybe_enable_modelopt), whose model builder "
                "(post_training/model_builder.py) moetune does not price")
REFUSED = {
    "--modelopt-enabled": _MODELOPT_ON + "; check the run without it",
    "--export-kd-teacher-load": _MODELOPT_ON + ", and loads a distillation teacher beside the model, whose memory "
                                "and step time moetune does not count; check the student's run without it",
}


def provider(row: Name) -> str:
    """The file a row's extra flag comes from (a PROVIDERS key), or '' for Megatron-LM's own flags."""
    return next((p for p in PROVIDERS if row.verified_in.startswith(p)), "") if row.role == "extra_args" else ""


def check_extra(flag: str, row: Name, entry: str | None, origin: str) -> None:
    """Refuse an extra flag that `entry` (the launch's *.py, or None when unknown) does not take, or that changes
    what moetune prices."""
    source = provider(row)
    if not source:
        return
    taken = MEGATRON_LM_ENTRIES.get(entry or "")
    if taken is not None and source not in taken:
        raise MoetuneError(f"{origin}: {flag} is {PROVIDERS[source]}, which {entry} does not take (Megatron-LM stops "
                           "on it: unrecognized arguments); drop it, or run the entry point that adds it")
    if flag in REFUSED:
        raise MoetuneError(f"{origin}: {flag} {REFUSED[flag]}")
