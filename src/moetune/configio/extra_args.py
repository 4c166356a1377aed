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
_PAI_DEAD = "is read by no Pai-Megatron-Patch code (@a098ca5): it sets nothing; Megatron-Core's is "
_FROZEN = ("freezes weights (Pai's VLM entry points: no gradient or optimizer state for them), which moetune does not "
           "model: it prices every weight trained; check the run without it")
# Flags that would change what moetune prices with no field to carry it, or that look like a layout knob and set
# nothing (Pai adds them for its legacy models): read silently, they would price another run than the one meant.
REFUSED = {
    "--modelopt-enabled": _MODELOPT_ON + "; check the run without it",
    "--export-kd-teacher-load": _MODELOPT_ON + ", and loads a distillation teacher beside the model, whose memory "
                                "and step time moetune does not count; check the student's run without it",
    "--moe-expert-parallel-size": _PAI_DEAD + "--expert-model-parallel-size",
    "--moe-topk": _PAI_DEAD + "--moe-router-topk",
    "--moe": _PAI_DEAD + "--num-experts",
    "--expert-interval": _PAI_DEAD + "--moe-layer-freq",
    "--num-shared-experts": _PAI_DEAD + "--moe-shared-expert-intermediate-size",
    "--shared-moe-ffn-hidden-size": _PAI_DEAD + "--moe-shared-expert-intermediate-size",
    "--enable-shared-expert": _PAI_DEAD + "--moe-shared-expert-intermediate-size",
    "--qk-nope-head-dim": _PAI_DEAD + "--qk-head-dim",
    "--qk-rope-head-dim": _PAI_DEAD + "--qk-pos-emb-head-dim",
    "--n-head-kv": "sizes the KV heads of Pai's legacy Falcon-40B model only (megatron_patch/model/falcon40b); "
                   "moetune prices Megatron-Core models, whose are --group-query-attention --num-query-groups",
    "--intermediate-size": "sizes the MLP of Pai's legacy and DeepSpeed models only (megatron_patch/model/baichuan, "
                           "examples/*/ds_train_*.py); moetune prices Megatron-Core models, whose is --ffn-hidden-size",
    "--freeze-LM": _FROZEN, "--freeze-ViT": _FROZEN, "--freeze-llm": _FROZEN, "--freeze-clip-vision-tower": _FROZEN,
}
# Extra flags that set a field moetune reads: Pai's --cpu-offloading has the name of a TransformerConfig field, which
# Megatron-LM's core_transformer_config_from_args (training/argument_utils.py) copies from args by name.
MAPPED = {"--cpu-offloading": [("model.cpu_offloading", True)]}


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
