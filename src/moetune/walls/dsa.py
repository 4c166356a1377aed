"""DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5) on the walls: what one DSA layer saves for backward, the seconds
of its indexer, and its context- and tensor-parallel gathers, as Megatron-Core runs it with dsa_kernel_backend
"cudnn" (the Bridge GLM-5 recipes': FlashMLA sparse forward, cuDNN sparse backward and indexer kernels; Megatron-LM
megatron/core/transformer/experimental_attention_variant/dsa.py, dsa_cudnn_kernels.py, absorbed_mla.py
@ core_v0.19.0). Its FLOPs are flops._dsa_hw. No DSA kernel rate is calibrated on a published run (none publishes
one): the rates are moetune's fused-attention and GEMM rates (docs/time.md, docs/memory.md)."""

import numpy as np

from moetune.layout.dsa_split import flash_mla_heads
from moetune.specs.model import LayerKind, ModelSpec
from moetune.walls.comms import BF16, ring_seconds

FP32 = INT32 = 4
# The cuDNN indexer prices what the recipes' packed THD sequences run (each CP segment's keys cropped to its causal
# prefix); a fixed-length batch under CP takes the PyTorch FP32 score path over every key instead (dsa_cudnn_kernels.py
# _indexer_topk_from_score_chunks -> _compute_indexer_scores_chunk_with_global_rows @ core_v0.19.0), not priced
UNCALIBRATED = ("DeepSeek Sparse Attention: the sparse attention and indexer kernels run at moetune's fused-attention "
                "and GEMM rates, not calibrated on any published run (none publishes its throughput); priced as "
                "packed THD sequences (Megatron Bridge's GLM-5 recipes): under CP a fixed-length batch scores the "
                "indexer in FP32 PyTorch over every key, which is not priced")


def head_padding(spec: ModelSpec, tp, arch: str | None):
    """Heads a TP rank's sparse kernels run over the heads it holds (layout/dsa_split.py flash_mla_heads: GLM-5's 64
    heads at TP 2 run as 64 a rank, twice the work). `tp` may be an array; a count the kernels do not run is refused
    before pricing (dsa_heads)."""
    def one(t) -> float:
        local = spec.num_attention_heads // int(t)
        return (flash_mla_heads(local, arch) or local) / local
    return np.vectorize(one, otypes=[float])(tp) if isinstance(tp, np.ndarray) else one(tp)


def indexer_seconds(spec: ModelSpec, kind: LayerKind, f: dict, tp, r, sparse_rate, causal_rate) -> tuple:
    """(forward, loss) seconds of one DSA layer's indexer on a TP rank, `f` its flops.layer_flops. Every TP rank runs
    the whole indexer on the sequence-gathered rows (parallel_mode "duplicated", dsa.py DSAIndexer): projections at the
    GEMM rate; scores in the cuDNN indexer kernel (BF16 q, k; the Bridge recipes' packed THD crops each CP segment's
    keys to its causal prefix) at the fused-attention rate for the causal keys, their FP32 [rows, keys] matrix written
    and read by the top-k at the HBM rate. The loss (a computing layer with dsa_indexer_loss_coeff > 0) runs once a
    step, in the recompute pass under recompute: the projections' weight gradients (their input is detached: no dgrad),
    the q.k target over the top-k keys on the rank's heads/TP and the indexer backward at the fused-attention rate for
    index_topk keys, and under index sharing a second sparse forward for the target's log-sum-exp
    (FusedQKTopKWithSparseLossFunc)."""
    if not kind.indexer:
        return 0.0, 0.0
    d = spec.dsa
    score_bytes = 2 * FP32 * f["indexer_scores"] / (2 * d.index_n_heads * d.index_head_dim)  # one FP32 a pair
    forward = f["indexer_proj"] / r.gemm + f["indexer_scores"] / causal_rate + score_bytes / r.hbm
    if "indexer_target" not in f:
        return forward, 0.0
    pad = head_padding(spec, tp, r.arch)
    loss = (f["indexer_proj"] / r.gemm + f["indexer_target"] * pad / tp / sparse_rate
            + f["indexer_grads"] / sparse_rate)
    if d.index_topk_freq > 1:
        loss = loss + f["core_attn"] * pad / tp / sparse_rate
    return forward, loss


def dsa_items(spec: ModelSpec, kind: LayerKind, ctx) -> dict:
    """Bytes one DSA layer saves for backward on a rank beside MLA's latents (activations._mla_latents), with the cuDNN
    backend (FusedIndexerSparseAttnFunc / FusedSparseAttentionFunc save_for_backward, dsa_cudnn_kernels.py @
    core_v0.19.0): the absorbed query (q_flat, heads/TP), the latent key of the WHOLE sequence (kv_flat: gathered over
    CP and TP), the latent output and the log-sum-exp per head, the top-k indices and lengths (int32), and on a layer
    with the loss the indexer gradients its forward already computed. Plus the q-absorb einsum's input (q_nope) and
    linear_proj's (the v-up output). core_attn recompute checkpoints all of DSAttention: it keeps the absorbed query and
    the rank's latent key alone. Index sharing holds each computing layer's top-k for the layers that reuse it (dsa.py
    topk_holder)."""
    m, d, n = spec.mla, spec.dsa, spec.num_attention_heads
    t, tp, rows = ctx.tokens, ctx.tp, ctx.tokens * ctx.cp
    qk = m.kv_down_dim
    items = {}
    if "core_attn" in ctx.recompute_modules:
        items["attn_qkv"] = BF16 * t * (n * qk // tp + qk)
    else:
        items["attn_qkv"] = BF16 * t * n * qk // tp + BF16 * rows * qk
        items["attn_softmax_stats"] = FP32 * t * n // tp
        items["dsa_latent_output"] = BF16 * t * n * m.kv_lora_rank // tp
        items["dsa_topk_indices"] = INT32 * t * (d.index_topk + 1)
        if kind.indexer and d.indexer_loss:
            ni, di = d.index_n_heads, d.index_head_dim
            items["dsa_indexer_grads"] = BF16 * (t * ni * di + rows * di + t * ni)
    if "mla_up_proj" in ctx.recompute_modules:
        items.pop("attn_qkv")
    else:
        items["mla_q_nope"] = BF16 * t * n * m.qk_head_dim // tp
    if kind.indexer and d.index_topk_freq > 1:
        items["dsa_topk_holder"] = INT32 * t * d.index_topk
    items["attn_proj_input"] = BF16 * t * n * m.v_head_dim // tp
    return items


def dsa_cp_seconds(spec: ModelSpec, kind: LayerKind, tokens, cp, tp, gpu, eff: dict) -> tuple:
    """(raw, exposed, ring slowdown, replay) of one DSA layer's CP exchange (cp_comm_type allgather, the only one DSA
    runs: transformer_config.py @ core_v0.19.0). Forward: the latent key (kv_lora_rank + rope) and, on a computing
    layer, the indexer key (index_head_dim) all-gathered over CP (dsa.py); backward: their gradients reduce-scattered,
    the indexer key's only with the loss on (otherwise it ran under no_grad). Not overlapped; the forward's runs again
    where the attention is recomputed."""
    m, d = spec.mla, spec.dsa
    rows, qk = tokens * cp, m.kv_down_dim
    idx = d.index_head_dim if kind.indexer else 0
    grads = idx if d.indexer_loss else 0
    fixed = eff["a2a_latency_us"] * 1e-6

    def exchange(extra: int):  # the latent key and `extra` indexer-key channels: a collective (its launch) each
        launches = np.where(cp > 1, fixed * (1 + bool(extra)), 0.0)
        return ring_seconds(rows * BF16 * (qk + extra), cp, tp, gpu, eff) + launches

    fwd, bwd = exchange(idx), exchange(grads)
    return fwd + bwd, fwd + bwd, 1.0, fwd


def dsa_tp_seconds(spec: ModelSpec, kind: LayerKind, tokens, tp, gpu, eff: dict, full_recompute: bool):
    """Seconds of a DSA layer's own TP collectives (sequence parallel, which absorbed MLA needs at TP > 1): the latent
    key all-gathered (absorbed_mla.py; reduce-scattered back in backward), the indexer's inputs x and q latent
    all-gathered detached (dsa.py DSAIndexer: no backward), and with the loss the FP32 top-k target all-reduced (heads
    are split). Full recompute gathers again. Not hidden by TP comm overlap (plain collectives)."""
    m, d, h = spec.mla, spec.dsa, spec.hidden_size
    qk = m.kv_down_dim
    idx_in = (h + (m.q_lora_rank or h)) if kind.indexer else 0
    fwd = ring_seconds(tokens * BF16 * (qk + idx_in), tp, 1, gpu, eff)
    out = (2 if full_recompute else 1) * fwd + ring_seconds(tokens * BF16 * qk, tp, 1, gpu, eff)
    if kind.indexer and d.indexer_loss:
        out = out + 2 * ring_seconds(tokens * FP32 * d.index_topk, tp, 1, gpu, eff)
    return out
