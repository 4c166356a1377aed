"""DeepSeek Sparse Attention on the walls (walls/flops.py _dsa_hw, walls/dsa.py): the FLOPs a GLM-5 layer runs,
derived here by hand from the Megatron-LM source formulas (dsa.py, dsa_cudnn_kernels.py, absorbed_mla.py
@ core_v0.19.0), not from moetune's helpers; what it saves; its CP gathers."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from moetune.specs.hf_config import spec_from_hf
from moetune.walls.activations import ActivationContext, layer_activation_items
from moetune.walls.flops import layer_flops

sys.path.insert(0, str(Path(__file__).parents[1] / "oracle"))
from dsa_configs import GLM5, GLM52_SHARING  # noqa: E402

S, K = 131072, 2048  # GLM-5's 128K recipes, index_topk
H, KL, R, NOPE, V = 64, 512, 64, 192, 256  # heads, kv_lora_rank, rope, qk_nope, v_head_dim
NI, DI, QL, HID = 32, 128, 2048, 6144  # indexer heads, head dim, q_lora_rank, hidden


def _spec(hf=GLM5):
    return spec_from_hf(hf, name="glm5", origin="glm5.json")


# keys query i (1-based) sees: min(i, K) of its top-k, i of the causal prefix the indexer scores
TOPK_PAIRS = K * (K + 1) // 2 + (S - K) * K
CAUSAL_PAIRS = S * (S + 1) // 2


def test_glm5_sparse_attention_at_128k_against_dense_mla():
    """One sequence of 131072 tokens through one layer, forward: FlashMLA's sparse MQA over the 576-wide latent key
    (q.k) and its first 512 channels (p.v), 64 heads, on each query's min(i, 2048) keys; dense MLA would attend all
    i causal keys with q.k over 192 + 64 and p.v over 256. The sparse layer does 1/15 of the dense one's work:
    2032 keys x 1088 against 65536.5 x 768."""
    f = layer_flops(_spec(), _spec().layers[5], S, S)
    sparse = 2 * TOPK_PAIRS * H * ((KL + R) + KL)
    dense = 2 * CAUSAL_PAIRS * H * ((NOPE + R) + V)
    assert f["core_attn"] == pytest.approx(sparse, rel=1e-12)
    # the same layer without DSA takes moetune's dense MLA path, whose count must be the hand formula's too
    plain = layer_flops(replace(_spec(), dsa=None), replace(_spec().layers[5], indexer=False), S, S)
    assert plain["core_attn"] == pytest.approx(dense, rel=1e-12) and f["core_attn"] < dense / 15
    # absorbed MLA's projections: q-absorb (H nope kl) and v-up (H kl v) stand for kv_up (kl H (nope + v))
    mla = HID * QL + QL * H * (NOPE + R) + HID * (KL + R) + KL * H * (NOPE + V) + H * V * HID
    assert f["attn_proj"] == pytest.approx(2 * S * mla, rel=1e-12)


def test_glm5_indexer_forward_and_sparse_loss():
    """The indexer: wq_b (q_lora -> 32 x 128), wk (hidden -> 128), weights_proj (hidden -> 32) a token; scores of
    32 heads x 128 on every causal pair; the sparse KL loss's target (q.k over 576 on all 64 heads, top-k keys) and
    the cuDNN indexer backward (scores again, dq, dk, at 64 padded heads) over the top-k keys."""
    f = layer_flops(_spec(), _spec().layers[5], S, S)
    assert f["indexer_proj"] == 2 * S * (QL * NI * DI + HID * DI + HID * NI)
    assert f["indexer_scores"] == pytest.approx(2 * CAUSAL_PAIRS * NI * DI, rel=1e-12)
    assert f["indexer_target"] == pytest.approx(2 * TOPK_PAIRS * H * (KL + R), rel=1e-12)
    assert f["indexer_grads"] == pytest.approx(3 * 2 * TOPK_PAIRS * 64 * DI, rel=1e-12)


def test_a_layer_that_reuses_its_top_k_runs_no_indexer():
    spec = _spec({**GLM5, **GLM52_SHARING})
    skip = next(k for k in spec.layers if k.mixer == "mla" and not k.indexer)
    f = layer_flops(spec, skip, S, S)
    assert "indexer_proj" not in f and "indexer_target" not in f
    assert f["core_attn"] == pytest.approx(2 * TOPK_PAIRS * H * (KL + R + KL), rel=1e-12)


def test_glm5_saves_the_whole_sequence_latent_key_under_cp():
    """CP 32 at 128K (4096 rows a rank): FlashMLA saves the absorbed query (64 x 576), the latent key gathered over
    CP (131072 x 576), the latent output (64 x 512), lse (64 FP32) and the int32 top-k (2048 + the length); the
    indexer's precomputed gradients (q 32 x 128, k over all 131072 rows, weights 32)."""
    spec = _spec()
    ctx = ActivationContext(seq_length=S, micro_batch_size=1, cp=32)
    items = layer_activation_items(spec, spec.layers[5], ctx)
    t = S // 32
    assert items["attn_qkv"] == 2 * t * H * (KL + R) + 2 * S * (KL + R)
    assert items["dsa_latent_output"] == 2 * t * H * KL
    assert items["attn_softmax_stats"] == 4 * t * H
    assert items["dsa_topk_indices"] == 4 * t * (K + 1)
    assert items["dsa_indexer_grads"] == 2 * (t * NI * DI + S * DI + t * NI)
    assert items["mla_q_nope"] == 2 * t * H * NOPE
