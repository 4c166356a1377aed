"""Flags a training entry point adds on top of Megatron-LM's own parser (its ``extra_args_provider``).

megatron_names.csv lists them with role ``extra_args`` and the file that adds them in verified_in: ModelOpt's
megatron/post_training/arguments.py add_modelopt_args (Megatron-LM@d98e8a6: pretrain_gpt.py and pretrain_hybrid.py
pass it when nvidia-modelopt imports; pretrain_mamba.py runs pretrain_hybrid.py) and Pai-Megatron-Patch's
megatron_patch/arguments.py get_patch_args (Pai-Megatron-Patch@a098ca5: its examples/*/pretrain_*.py pass it). Most
are read and ignored (their notes say why); the few that would change what moetune prices, with nothing in the
config to carry it, are refused here. A flag handed to one of Megatron-LM's own entry points that does not add it is
an error there too (argparse: unrecognized arguments), named as such; one handed to any other script is unknown,
as it was before these rows.
"""

from __future__ import annotations

from moetune.configio.names import Name, data_csv
from moetune.errors import MoetuneError

_MODELOPT = "Megatron-LM:megatron/post_training/arguments.py"
_PAI = "Pai-Megatron-Patch:megatron_patch/arguments.py"
# who adds each file's flags, for the error lines
PROVIDERS = {
    _MODELOPT: "a ModelOpt flag (Megatron-LM megatron/post_training/arguments.py add_modelopt_args)",
    _PAI: "a Pai-Megatron-Patch flag (megatron_patch/arguments.py get_patch_args)",
}


def _entries() -> dict[str, set[str]]:
    """Each training entry point (its *.py name) -> the providers whose flags it parses: data/extra_args_entries.csv,
    read from Megatron-LM@d98e8a6 and Pai-Megatron-Patch@a098ca5 (its header says where)."""
    return {r["entry"]: {r["provider"]} if r["provider"] else set() for r in data_csv("extra_args_entries.csv")}


ENTRIES = _entries()

_MODELOPT_ON = ("turns ModelOpt on (post_training/utils.py maybe_enable_modelopt), whose model builder "
                "(post_training/model_builder.py) moetune does not price")
_FROZEN = ("freezes weights (Pai's VLM entry points: no gradient or optimizer state for them), which moetune does not "
           "model: it prices every weight trained; check the run without it")
_PAI_SHARED = ("sizes the shared experts of Pai's own Qwen1.5/Qwen2 TransformerConfig subclasses "
               "(megatron_patch/model/qwen2/transformer_config.py), which Megatron-LM's "
               "core_transformer_config_from_args fills from args by name; moetune prices Megatron-Core's, set by "
               "--moe-shared-expert-intermediate-size")
# Flags that would change what moetune prices with no field to carry it: read silently, they would price another run
# than the one meant. (Pai's look-alike knobs that nothing reads, --moe-topk, --moe-expert-parallel-size,
# --qk-nope-head-dim ..., are read and ignored: its DeepSeek-V3 and Moonlight scripts pass them beside the real ones.)
REFUSED = {
    "--modelopt-enabled": _MODELOPT_ON + "; check the run without it",
    "--export-kd-teacher-load": _MODELOPT_ON + ", and loads a distillation teacher beside the model, whose memory "
                                "and step time moetune does not count; check the student's run without it",
    "--enable-shared-expert": _PAI_SHARED, "--shared-moe-ffn-hidden-size": _PAI_SHARED,
    "--num-shared-experts": _PAI_SHARED,
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


def takes(row: Name, entry: str | None) -> bool:
    """Whether the entry point `entry` (the launch's *.py; None for bare arguments, which any may take) parses the
    flag of `row`: Megatron-LM's own flags always; an extra one where `entry` is unknown to ENTRIES only without
    an entry, as the reader cannot tell what another script's parser adds."""
    source = provider(row)
    return not source or entry is None or source in ENTRIES.get(entry, ())


def check_extra(flag: str, row: Name, entry: str | None, origin: str) -> bool:
    """False where `entry` is no entry point known to add the extra flag (the caller's unknown-argument line
    stands); an error where a known one does not take it, or where it changes what moetune prices."""
    source = provider(row)
    if not source:
        return True
    if not takes(row, entry):
        if entry not in ENTRIES:
            return False
        raise MoetuneError(f"{origin}: {flag} is {PROVIDERS[source]}, which {entry} does not take (it stops on it: "
                           "unrecognized arguments); drop it, or run the entry point that adds it")
    if flag in REFUSED:
        raise MoetuneError(f"{origin}: {flag} {REFUSED[flag]}")
    return True
