"""Megatron's vocabulary padding rule (pure Python, no torch needed).

Mirrors Megatron-LM ``megatron/training/vocab_utils.py::calculate_padded_vocab_size`` (re-exported
by Megatron-Bridge ``megatron/bridge/utils/vocab_utils.py``): the embedding/output rows are
padded up to a multiple of ``make_vocab_size_divisible_by * tensor_model_parallel_size`` so every
TP rank holds the same number of rows.

Which divisor is in force depends on the launcher: Megatron-LM defaults
``--make-vocab-size-divisible-by 128``; Megatron-Bridge's HF bridges pick the largest power of two
<= 128 that divides the HF vocab (``MegatronModelBridge.make_vocab_size_divisible_by``), and some
providers override it (DeepSeek-V3 and Kimi-K2 bridges set 1280).
"""

from __future__ import annotations

from moetune.errors import MoetuneError
from moetune.specs.hf_config import bridge_vocab_divisor
from moetune.walls.rank_params import padded_vocab_size as walls_padded_vocab_size


def padded_vocab_size(vocab: int, tp: int, divisible_by: int = 128) -> int:
    """Smallest multiple of ``divisible_by * tp`` that is >= ``vocab`` (walls/rank_params.py's rule, with its inputs
    checked: the oracle takes them from a caller's hand)."""
    for name, value in (("vocab", vocab), ("tp", tp), ("divisible_by", divisible_by)):
        if not isinstance(value, int) or value <= 0:
            raise MoetuneError(f"padded_vocab_size: {name} must be a positive integer, got {value!r}")
    return walls_padded_vocab_size(vocab, tp, divisible_by)


def bridge_divisible_by(vocab: int) -> int:
    """Megatron-Bridge default divisor: largest power of two <= 128 dividing ``vocab`` (specs.hf_config)."""
    return bridge_vocab_divisor("", vocab)
