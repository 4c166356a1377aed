"""Exactness oracle: Megatron-Core itself builds the model on ``meta`` and we count parameters.

Public API (see docs/oracle.md):

* ``count_params_per_stage(hf_config, *, tp, pp, ep, etp, cp=1, vpp=None, world_size,
  padded_vocab_size, ...) -> list[int]`` - params on the first rank of each pipeline stage.
* ``count_params_breakdown(...) -> dict[str, int]`` - {MCore param name: numel} for one rank.
* ``padded_vocab_size(vocab, tp, divisible_by=128)`` - Megatron's vocab padding rule.
* ``muon_adam_per_stage(hf_config, *, pp, ...) -> list[dict]`` - per stage, what Megatron's Muon leaves to Adam.
* ``quantized_per_stage(hf_config, *, pp, ...) -> list[int]`` - per stage, the elements TE quantizes under FP8/FP4.
* ``hf_to_mcore(hf_config)`` - the HF -> TransformerConfig field mapping used by the oracle.

Importing this package needs neither torch nor megatron; calling the counters needs both.
"""

from moetune.oracle.families import FAMILIES
from moetune.oracle.fp8_split import quantized_per_stage
from moetune.oracle.hf_to_mcore import McoreModelArgs, hf_to_mcore
from moetune.oracle.mcore import SPECS, count_params_breakdown, count_params_per_stage
from moetune.oracle.muon_split import muon_adam_per_stage
from moetune.oracle.vocab import bridge_divisible_by, padded_vocab_size

__all__ = [
    "FAMILIES",
    "SPECS",
    "McoreModelArgs",
    "bridge_divisible_by",
    "count_params_breakdown",
    "count_params_per_stage",
    "hf_to_mcore",
    "muon_adam_per_stage",
    "padded_vocab_size",
    "quantized_per_stage",
]
