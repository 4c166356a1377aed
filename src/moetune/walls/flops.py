"""Per-layer *hardware* forward FLOPs of the work the GPU really does (router GEMM, the real Mamba inner width,
exact causal pair counts), for the time wall: ``layer_flops`` / ``logits_flops`` and the weight GEMM shapes. The
count Megatron reports is walls/model_flops.py. See docs/flops.md.
"""

import numpy as np

from moetune.specs.model import LayerKind, ModelSpec
from moetune.walls.rank_params import model_padded_vocab

LAYER_CLASSES = ("attn_proj", "core_attn", "mixer_proj", "mixer_scan", "dense_mlp", "router",
                 "routed_experts", "shared_experts")
_SSD_CHUNK = 128  # Mamba-2 SSD chunk length (Nemotron-H config chunk_size; mamba_ssm ssd_combined)
_GDN_CHUNK = 64  # chunk length of FLA's chunked gated delta rule kernel (chunk_gated_delta_rule)


def all_layers(spec: ModelSpec) -> tuple[LayerKind, ...]:
    """Decoder layers plus MTP layers; Megatron builds each MTP layer like the last decoder layer."""
    mtp = spec.mtp_layer_kind or spec.layers[-1]
    return spec.layers + (mtp,) * spec.mtp_num_layers


def causal_context(seq_length: int, window: int | None = None) -> float:
    """Mean number of keys a query attends to under Bridge's causal convention: s/2 for full attention;
    for a window W < s the exact mean W - W(W-1)/(2s) (flop_utils.py, PR #3947)."""
    if window is None or window >= seq_length:
        return seq_length / 2
    return window - window * (window - 1) / (2 * seq_length)


def attended_keys(seq_length: int, window: int | None = None) -> float:
    """Exact mean keys per query of a causal (optionally windowed) mask: query i sees min(i+1, W) keys."""
    if window is None or window >= seq_length:
        return (seq_length + 1) / 2
    return causal_context(seq_length, window)


# ---- weight GEMMs: shapes (hardware FLOPs, tile quantization) -----------------------------------------

def gemm_shapes(spec: ModelSpec, kind: LayerKind) -> dict[str, list[tuple[int, int, str]]]:
    """Per op class, the (K, N, split) of each weight GEMM of one layer, x[T,K] @ W[K,N]; `split` names the
    dimension tensor parallelism divides ("n": column-parallel, "k": row-parallel, "-": whole on every rank)."""
    h, n = spec.hidden_size, spec.num_attention_heads
    out: dict[str, list] = {"attn_proj": [], "mixer_proj": [], "dense_mlp": [], "shared_experts": [],
                            "routed_experts": []}
    if kind.mixer == "mamba":  # in_proj to (z, x, B, C, dt), out_proj from the inner width
        m = spec.mamba
        out["mixer_proj"] = [(h, m.in_proj_dim, "n"), (m.d_inner, h, "k")]
    elif kind.mixer == "gdn":  # in_proj to (q, k, v, z, beta, alpha), out_proj from the value width
        g = spec.gdn
        out["mixer_proj"] = [(h, g.in_proj_dim, "n"), (g.v_dim, h, "k")]
    if kind.mixer == "gqa":
        out["attn_proj"] = [(h, sum(spec.qkv_widths), "n"), (spec.query_projection_size, h, "k")]
    elif kind.mixer == "mla":
        m = spec.mla
        qk = m.q_head_dim
        q = [(h, n * qk, "n")] if m.q_lora_rank is None else [(h, m.q_lora_rank, "-"), (m.q_lora_rank, n * qk, "n")]
        out["attn_proj"] = q + [(h, m.kv_down_dim, "-"), (m.kv_lora_rank, n * m.kv_up_head_dim, "n"),
                                (n * m.v_head_dim, h, "k")]
    f = 2 if spec.gated_linear_unit else 1
    if kind.mlp == "dense":
        out["dense_mlp"] = [(h, f * spec.ffn_hidden_size, "n"), (spec.ffn_hidden_size, h, "k")]
    elif kind.mlp == "moe":
        i, s = spec.moe_ffn_hidden_size, spec.moe_shared_expert_intermediate_size
        out["routed_experts"] = [(h, f * i, "n"), (i, h, "k")]
        if s:
            out["shared_experts"] = [(h, (2 if spec.shared_expert_gated else 1) * s, "n"), (s, h, "k")]
    return out


def tp_shard(k, n, split: str, tp):
    """(K, N) of the shard of a gemm_shapes weight one TP rank holds, and so multiplies and steps: column-parallel
    weights split their outputs, row-parallel their inputs; "-" ones (MLA's down-projections) are whole on every
    rank. `tp`: ETP for the routed experts (tp_size), TP for the rest; it may be an array."""
    return (k / tp, n) if split == "k" else ((k, n / tp) if split == "n" else (k, n))


def tp_size(op_class: str, tp, etp):
    """The tensor-parallel size that splits a gemm_shapes class: expert TP for the routed experts (Parallel Folding
    gives the experts their own TP), TP for every other class."""
    return etp if op_class == "routed_experts" else tp


def kv_groups_per_rank(groups: int, tp):
    """KV groups whose K and V one TP rank's attention holds: groups/TP, or one where TP is a multiple of the groups
    (Megatron-Core core_v0.16.0 and later, f7dfb99795, transformer/attention.py get_query_key_value_tensors: each rank
    all-gathers the QKV projection's output over TP and keeps one group, its TP peers holding copies). `tp` may be an
    array (the planner's layouts)."""
    return np.maximum(groups // tp, 1) if isinstance(tp, np.ndarray) else max(groups // tp, 1)


def qkv_gathered(spec: ModelSpec, tp):
    """Whether TP runs past the KV groups (kv_groups_per_rank): then the whole QKV projection's output is gathered
    over TP each GQA layer, forward (all-gather) and backward (its reduce-scatter). Bool or bool array."""
    return tp > spec.num_query_groups


def _macs(shapes: list[tuple[int, int, str]]) -> float:
    """Multiply-adds per token of a class's weight GEMMs."""
    return sum(k * n for k, n, _ in shapes)


# ---- hardware forward FLOPs ---------------------------------------------------------------------

# Heads the cuDNN indexer backward computes at least (Megatron-LM dsa_cudnn_kernels.py _pad_indexer_heads_for_backward,
# indexer heads zero-padded to 64 for its kernel, @ core_v0.19.0): GLM-5's 32 indexer heads run as 64
INDEXER_BWD_HEADS = 64


def is_dsa(spec: ModelSpec, kind: LayerKind) -> bool:
    """Whether `kind` is a DeepSeek Sparse Attention layer (its MLA runs the sparse kernels, _dsa_hw; walls/dsa.py)."""
    return spec.dsa is not None and kind.mixer == "mla"


def _dsa_hw(spec: ModelSpec, kind: LayerKind, gemms: dict, tokens: float, seq: int) -> dict:
    """A DeepSeek Sparse Attention layer as Megatron-Core runs it with dsa_kernel_backend "cudnn" (Megatron-LM dsa.py,
    dsa_cudnn_kernels.py, absorbed_mla.py @ core_v0.19.0; docs/flops.md). Absorbed MLA: the q-absorb and v-up einsums
    replace linear_kv_up_proj at the same FLOPs a token, so attn_proj is MLA's; the attention is MQA over the shared
    latent key (kv_lora_rank + rope wide; the value its first kv_lora_rank channels) of the min(index_topk, causal)
    keys each query's top-k keeps (attended_keys with index_topk as the window). A layer that computes its own top-k
    adds the indexer: its three projections, its scores (index_n_heads x index_head_dim a pair) over the causal keys,
    and with the KL loss on, the loss's q.k target over the top-k keys on every head and the indexer's backward (scores
    recomputed, dq, dk) over the top-k keys on at least INDEXER_BWD_HEADS heads, all run inside the forward. Every
    figure counts all heads; a TP rank runs the attention's and the target's heads/TP and the indexer whole."""
    m, d, n, h = spec.mla, spec.dsa, spec.num_attention_heads, spec.hidden_size
    sparse, causal = attended_keys(seq, d.index_topk), attended_keys(seq)
    qk = m.kv_down_dim
    out = {"attn_proj": 2 * tokens * _macs(gemms["attn_proj"]),
           "core_attn": 2 * tokens * sparse * n * (qk + m.kv_lora_rank)}
    if kind.indexer:
        ni, di = d.index_n_heads, d.index_head_dim
        out["indexer_proj"] = 2 * tokens * ((m.q_lora_rank or h) * ni * di + h * di + h * ni)
        out["indexer_scores"] = 2 * tokens * causal * ni * di
        if d.indexer_loss:
            out["indexer_target"] = 2 * tokens * sparse * n * qk
            out["indexer_grads"] = 3 * 2 * tokens * sparse * max(ni, INDEXER_BWD_HEADS) * di
    return out


def _attention_hw(spec: ModelSpec, kind: LayerKind, gemms: dict, tokens: float, seq: int,
                  window: int | None) -> dict:
    if is_dsa(spec, kind):
        return _dsa_hw(spec, kind, gemms, tokens, seq)
    n, ctx = spec.num_attention_heads, attended_keys(seq, window)
    if kind.mixer == "gqa":
        width = 2 * spec.kv_channels
    else:
        m = spec.mla
        width = m.q_head_dim + m.v_head_dim
    return {"attn_proj": 2 * tokens * _macs(gemms["attn_proj"]), "core_attn": 2 * tokens * ctx * n * width}


def _gdn_hw(spec: ModelSpec, gemms: dict, tokens: float) -> dict:
    g = spec.gdn
    # per value head: intra-chunk q.k and attn.v (chunk/2 causal mean), plus state read, decay-update, output
    scan = g.conv_kernel * g.conv_dim + g.num_value_heads * (
        _GDN_CHUNK / 2 * (g.key_head_dim + g.value_head_dim) + 3 * g.key_head_dim * g.value_head_dim)
    return {"mixer_proj": 2 * tokens * _macs(gemms["mixer_proj"]), "mixer_scan": 2 * tokens * scan}


def _mamba_hw(spec: ModelSpec, gemms: dict, tokens: float) -> dict:
    """Mamba-2 with its real inner width heads*head_dim and the SSD chunked algorithm."""
    m = spec.mamba
    # SSD per token: C.B^T per group, its masked product with x, chunk-state write and read per head
    scan = m.conv_kernel * m.conv_dim + m.n_groups * _SSD_CHUNK * m.state_size + m.num_heads * (
        _SSD_CHUNK * m.head_dim + 2 * m.state_size * m.head_dim)
    return {"mixer_proj": 2 * tokens * _macs(gemms["mixer_proj"]), "mixer_scan": 2 * tokens * scan}


def _mlp_hw(spec: ModelSpec, kind: LayerKind, gemms: dict, tokens: float) -> dict:
    if kind.mlp == "dense":
        return {"dense_mlp": 2 * tokens * _macs(gemms["dense_mlp"])}
    if kind.mlp != "moe":
        return {}
    shared = _macs(gemms["shared_experts"])
    shared += spec.hidden_size if spec.moe_shared_expert_gate and shared else 0  # the shared-expert gate, h -> 1
    return {"router": 2 * tokens * spec.hidden_size * spec.num_moe_experts,
            "routed_experts": 2 * tokens * spec.moe_router_topk * _macs(gemms["routed_experts"]),
            "shared_experts": 2 * tokens * shared}


def layer_flops(spec: ModelSpec, kind: LayerKind, tokens: float, seq_length: int, *,
                window: int | None = None) -> dict[str, float]:
    """Forward FLOPs of one decoder layer on `tokens` tokens of `seq_length`-long causal sequences,
    by op class (keys: LAYER_CLASSES; a DSA layer adds its indexer's, _dsa_hw). `window`: this layer's sliding
    window, if any (layer_windows)."""
    out, gemms = dict.fromkeys(LAYER_CLASSES, 0.0), gemm_shapes(spec, kind)
    if kind.mixer in ("gqa", "mla"):
        out.update(_attention_hw(spec, kind, gemms, tokens, seq_length, window))
    elif kind.mixer == "gdn":
        out.update(_gdn_hw(spec, gemms, tokens))
    elif kind.mixer == "mamba":
        out.update(_mamba_hw(spec, gemms, tokens))
    out.update(_mlp_hw(spec, kind, gemms, tokens))
    return out


def layer_windows(spec: ModelSpec) -> tuple[int | None, ...]:
    """Sliding window of every decoder layer then every MTP layer (None: full causal attention); MTP follows the
    last layer."""
    return tuple(k.window for k in all_layers(spec))


def mtp_proj_flops(spec: ModelSpec, tokens: float) -> float:
    """Forward FLOPs of one MTP module's eh_proj (2h -> h); its layer is layer_flops(mtp_layer_kind)."""
    return 2 * tokens * 2 * spec.hidden_size * spec.hidden_size


def logits_flops(spec: ModelSpec, tokens: float, *, tp: int = 1) -> float:
    """Forward FLOPs of the output layer: the GEMM runs over the padded vocabulary."""
    return 2 * tokens * spec.hidden_size * model_padded_vocab(spec, tp)

