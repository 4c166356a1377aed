"""Fields that mean something only under a value of another field, in one table: a default of such a field is
written, or filled in, only where its gate is on. Three readers ask here: the Megatron-LM reader writing a flag's
default (configio/mlm.py _mlm_defaults), the Megatron-LM emitter writing Bridge's (emit/mlm.py _bridge_defaults), and
what a Megatron-LM launch leaves out, filled in for a Bridge config (configio/finalize.py megatron_lm_unstated)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from moetune.configio.names import NO_DEFAULT, names

ANY = "any true value"  # the gate is on at any true value: a switch, an FP8 format, an expert count

# field -> (the field it is read under, the value that turns it on)
ONLY_UNDER: dict[str, tuple[str, Any]] = {
    "mixed_precision.fp8_recipe": ("mixed_precision.fp8", ANY),  # --fp8-recipe without --fp8-format: no FP8
    "optimizer.optimizer_offload_fraction": ("optimizer.optimizer_cpu_offload", ANY),
    "model.moe_token_dispatcher_type": ("model.num_moe_experts", ANY),  # no dispatcher without experts
    # the flex backend (deepep) does nothing off the flex dispatcher (token_dispatcher.py builds it only there), and
    # written beside allgather or alltoall it reads as a backend the user chose and forgot to switch on (rule
    # dispatcher.flex_activation)
    "model.moe_flex_dispatcher_backend": ("model.moe_token_dispatcher_type", "flex"),
    # DeepSeek Sparse Attention's kernels: built only for the dsa variant (experimental_attention_variant_module_specs
    # @ core_v0.19.0); off it the field is not there to write (releases before 0.19 lack it)
    "model.dsa_kernel_backend": ("model.experimental_attention_variant", "dsa"),
}

# The gated value flags (not switches) whose Megatron-LM default the reader writes down wherever their gate is on,
# even where Bridge's default is the same: the dispatcher's is Bridge's too (allgather, transformer_config.py), but
# what moetune reads a MoE config without one as is a recipe's alltoall (planner/from_config.py), while a launch
# without --moe-token-dispatcher-type runs allgather. The flex
# backend is not one: moetune reads a config without one as deepep, Megatron-LM's default already.
VALUE_DEFAULTS = ("mixed_precision.fp8_recipe", "optimizer.optimizer_offload_fraction",
                  "model.moe_token_dispatcher_type")


def gate_on(config: Mapping[str, Any], key: str) -> bool:
    """Whether `key` means something in `config`: it has no gate, or its gate holds the value that turns it on. A
    value gate (not ANY) the config leaves out holds what Megatron runs it at (_unstated)."""
    if key not in ONLY_UNDER:
        return True
    field, on = ONLY_UNDER[key]
    return bool(config.get(field)) if on == ANY else config.get(field, _unstated(field)) == on


def _unstated(field: str) -> Any:
    """A gate field's value where a config leaves it out: its Megatron-LM default (megatron_names.csv mlm_default),
    which Bridge's TransformerConfig shares for the one value gate, the dispatcher (allgather: no flex backend runs).
    Read as on, it had written moe_flex_dispatcher_backend=deepep beside the allgather a launch without
    --moe-token-dispatcher-type runs, which rule dispatcher.flex_activation then flagged in emit's own output."""
    row = names().get(field)
    return None if row is None or row.mlm_default is NO_DEFAULT else row.mlm_default
