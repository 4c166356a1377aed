"""Whole-model counts from Megatron-Core (TP=PP=EP=1) against published checkpoint counts.

Expected figures (tests/oracle/oracle_refs.py) are exact element counts of the released Hugging
Face checkpoints from cited public sources. Megatron and HF hold the same tensors for these
families when the vocab needs no padding at TP=1 (every vocab here is a multiple of 128),
except where a test says otherwise.
"""

import pytest

pytest.importorskip("megatron.core")

from oracle_refs import (  # noqa: E402
    DEEPSEEK_V3_BF16,
    DEEPSEEK_V3_F8,
    GPT_OSS_20B,
    GPT_OSS_120B,
    MIXTRAL_8X7B,
    QWEN2_57B_A14B,
    QWEN3_30B_A3B,
    QWEN15_MOE_A27B,
    load_config,
)

from moetune.oracle import count_params_per_stage  # noqa: E402


def _whole_model(cfg: dict, **kw) -> int:
    counts = count_params_per_stage(cfg, tp=1, pp=1, ep=1, etp=1, world_size=1,
                                    padded_vocab_size=cfg["vocab_size"], **kw)
    assert len(counts) == 1
    return counts[0]


@pytest.mark.parametrize(("name", "published"), [
    ("mixtral-8x7b", MIXTRAL_8X7B),
    ("qwen3-30b-a3b", QWEN3_30B_A3B),
    ("qwen1.5-moe-a2.7b", QWEN15_MOE_A27B),  # qkv bias + gated shared expert
    ("qwen2-57b-a14b", QWEN2_57B_A14B),
    ("gpt-oss-20b", GPT_OSS_20B),  # qkv/o/router/expert biases + attention sinks
    ("gpt-oss-120b", GPT_OSS_120B),
])
def test_whole_model_matches_checkpoint(name, published):
    assert _whole_model(load_config(name)) == published


def test_deepseek_v3_with_mtp_matches_checkpoint_minus_mtp_copies():
    """HF's MTP layer (model.layers.61) stores its own embed_tokens and shared_head.head;
    Megatron's MTP block reuses the main embedding and output layer, so MCore holds exactly
    2 * vocab * hidden fewer weights than the checkpoint."""
    cfg = load_config("deepseek-v3")
    copies = 2 * cfg["vocab_size"] * cfg["hidden_size"]
    assert _whole_model(cfg) + copies == DEEPSEEK_V3_BF16 + DEEPSEEK_V3_F8
