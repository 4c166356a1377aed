"""The seeds' context-parallel sizing (seeds/002): the 4K-shard target, where long context starts, the CP nearest the
target that Megatron accepts, and the attention share of a hybrid's token mixers that scales it."""

import math
from collections.abc import Callable

from moetune.layout.validate import sequence_refusal

# seeds/002 "Start from a 4K shard target: a good first guess is CP ~= seq_len / 4096". moetune's reading: under
# sequence parallelism TP shards the same tokens (and attention by heads), so the shard is seq / (CP x TP) and the
# guess CP ~= seq_len / (4096 x TP): seeds/002's own Qwen3-235B-A22B 128K NVL72 recipe trades CP for TP at TP4 x CP4
# ("use TP as another lever on NVL72 systems").
SHARD_TOKENS = 4096
SEED_CP_GUESS = "CP ~= seq_len / 4096"  # seeds/002 § Start from a 4K shard target, verbatim

# Where the seeds' long-context guidance starts (seeds/002: "well past the 4K-class regime"; rule longctx.cp_sizing)
LONG_CONTEXT = 16384
CP_POWERS = tuple(2 ** i for i in range(12))


def shard_cp(seq_length: int, tp: int, pp: int = 1, world: int | None = None,
             runs: Callable[[int], bool] | None = None, sp: bool | None = None, share: float = 1.0) -> int:
    """The power-of-two CP nearest the 4K-shard target share x seq / (4096 x TP) that Megatron accepts (ties go to the
    larger CP): the sequence rules (2 x CP divides the sequence; with sequence parallelism, on by default at TP > 1, TP
    divides seq / CP: sequence_refusal), TP x CP x PP divides the world where it is given, and `runs(cp)` where a
    caller knows the model (walls/cp_legal.cp_runs: every check estimate applies, the CP exchange's
    included). `share`: the model's attention share of its token mixers (attention_share; 1 for a transformer)."""
    target = max(1.0, share * seq_length / (SHARD_TOKENS * tp))
    sp = tp > 1 if sp is None else sp
    legal = [c for c in CP_POWERS
             if c == 1 or (sequence_refusal(seq_length, tp, c, sp) is None
                           and (world is None or world % (tp * c * pp) == 0) and (runs is None or runs(c)))]
    return min(legal, key=lambda c: (abs(math.log2(c / target)), -c))


def undersharded_cp(seq_length: int, tp: int, cp: int, target: int, share: float = 1.0) -> bool:
    """seeds/002's long-context warning: past LONG_CONTEXT, a TP x CP shard of more than twice the 4K target, its
    tokens weighed by the attention share (attention_share), while the nearest legal CP (`target`, shard_cp's) is
    larger than the one chosen (rule longctx.cp_sizing, explain's Scale)."""
    return seq_length >= LONG_CONTEXT and share * seq_length / (cp * tp) > 2 * SHARD_TOKENS and target > cp


def attention_share(mixers: tuple[int, int] | None) -> float:
    """The share of a model's token mixers that are softmax attention, from (attention mixers, all mixers); 1 where it
    has no other (a transformer) or a config does not say. The seeds size CP by attention memory (seeds/000 Phase 2,
    seeds/002); a hybrid's Mamba-2 and gated delta-net mixers keep a fixed-size state, no keys and values per token,
    so at a shard it holds the attention memory an all-attention stack holds at this share of it."""
    attention, total = mixers or (1, 1)
    return attention / total if total else 1.0
