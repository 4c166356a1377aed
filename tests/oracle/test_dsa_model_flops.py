"""Model FLOPs of a DeepSeek Sparse Attention model as Megatron reports them: Bridge @067f987 (flop_utils.py, DSA
since 52fc01b9a, PR #5324) counts top-k attention and the indexer; Megatron-LM main and Bridge before it count dense
MLA (training.py num_floating_point_operations has no DSA term). Written out here as Bridge writes it: whole-model
terms, each 3 x 2 x layers x per-token work, then x tokens."""

import dataclasses

import pytest
from dsa_configs import GLM5, GLM52_SHARING, small

from moetune.specs.hf_config import spec_from_hf
from moetune.walls.model_flops import megatron_model_flops


def _spec(hf: dict):
    return spec_from_hf(hf, name="x", origin="x.json")


def _bridge_self_attention(spec, s: int) -> float:
    """Bridge's self_attn_term for the dsa variant, per token (its caller multiplies by the tokens)."""
    m, d, n, h = spec.mla, spec.dsa, spec.num_attention_heads, spec.hidden_size
    layers = spec.num_layers + spec.mtp_num_layers
    indexers = sum(k.indexer for k in spec.layers) + spec.mtp_num_layers
    dense_ctx = (s + 1) / 2
    k = d.index_topk
    sparse_ctx = dense_ctx if s <= k else k - k * (k - 1) / (2 * s)
    q_term = m.q_lora_rank * (h + n * (m.qk_head_dim + m.qk_pos_emb_head_dim) + 1)
    kv_term = m.kv_lora_rank * (h + n * (m.qk_head_dim + m.v_head_dim) + 1) + h * m.qk_pos_emb_head_dim
    projections = 3 * 2 * layers * (q_term + kv_term + n * m.v_head_dim * h)
    core = 3 * 2 * layers * sparse_ctx * n * (m.kv_lora_rank + m.qk_pos_emb_head_dim + m.kv_lora_rank)
    idx_proj = 4 * indexers * (m.q_lora_rank * d.index_n_heads * d.index_head_dim + h * d.index_head_dim
                                + h * d.index_n_heads)
    unit = d.index_n_heads * (d.index_head_dim + 1)
    scores = 2 * indexers * dense_ctx * unit + 4 * indexers * sparse_ctx * unit
    teacher = 2 * indexers * sparse_ctx * n * (m.kv_lora_rank + m.qk_pos_emb_head_dim)
    return projections + core + idx_proj + scores + teacher


def _dense_mla_self_attention(spec, s: int) -> float:
    """The plain MLA branch (what Megatron-LM counts for the same layers)."""
    m, n, h = spec.mla, spec.num_attention_heads, spec.hidden_size
    layers = spec.num_layers + spec.mtp_num_layers
    q_term = m.q_lora_rank * (h + n * (m.qk_head_dim + m.qk_pos_emb_head_dim) + 1)
    kv_term = m.kv_lora_rank * (h + n * (m.qk_head_dim + m.v_head_dim) + 1) + h * m.qk_pos_emb_head_dim
    core = s * n * (m.qk_head_dim + m.qk_pos_emb_head_dim) / 2 + s * n * m.v_head_dim / 2
    return 3 * 2 * layers * (q_term + kv_term + n * m.v_head_dim * h + core)


@pytest.mark.parametrize("seq", [1024, 2048, 131072])
@pytest.mark.parametrize("sharing", [{}, GLM52_SHARING])
def test_bridge_counts_topk_attention_and_the_indexer(seq, sharing):
    """Against the same model counted as dense MLA under the Megatron-LM convention, the difference is the
    self-attention terms alone (the MLP, MTP and logits terms are the same in both)."""
    spec = _spec({**small(GLM5, layers=12), **sharing})
    mlm = megatron_model_flops(spec, seq, 1, convention="megatron-lm")
    bridge = megatron_model_flops(spec, seq, 1)
    expected = seq * (_bridge_self_attention(spec, seq) - _dense_mla_self_attention(spec, seq))
    assert bridge - mlm == pytest.approx(expected, rel=1e-9)


def test_the_indexer_loss_settings_change_the_count():
    """Without the loss the indexer runs forward only under no_grad: projections 2x, scores forward only, no teacher."""
    spec = _spec(small(GLM5))
    off = dataclasses.replace(spec, dsa=dataclasses.replace(spec.dsa, indexer_loss=False))
    assert megatron_model_flops(off, 8192, 1) < megatron_model_flops(spec, 8192, 1)


def test_older_bridge_counts_dsa_as_dense_mla():
    spec = _spec(small(GLM5))
    assert megatron_model_flops(spec, 4096, 1, convention="bridge-pre-2026-05") == megatron_model_flops(
        spec, 4096, 1, convention="megatron-lm")
