"""Fused attention's rate: the kernel rates of efficiency.toml (cuDNN's measured ones, per GPU family) by head shape,
the keys each query sees, a sliding window's tile band, DeepSeek Sparse Attention's top-k and a CP ring's chunks;
and the attention a chunked model (Llama 4) never runs. walls/compute.py divides attention FLOPs by these rates."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from moetune.specs.model import ModelSpec
from moetune.walls.flops import all_layers, attended_keys, layer_flops

if TYPE_CHECKING:
    from moetune.walls.compute import Rates


def head_dim_factor(spec: ModelSpec, r: Rates) -> float:
    """Fused attention's rate at the model's head shape over its rate at head dim 128 (attn_eff): smaller heads do less
    math per byte of Q, K, V they stream, `attn_eff_hdim64` at 64, linear in between; MLA's 192-wide query-key and
    128-wide value heads at their own measured `attn_eff_mla` (efficiency.toml, cuDNN's benchmark dsv3 case)."""
    if spec.mla:
        return r.attn_mla / r.attn
    return float(np.interp(spec.kv_channels, (64, 128), (r.attn_hdim64 / r.attn, 1.0)))


# attn_eff is measured at 4k: 2,048 keys per query on average under the causal mask
ATTN_REF_KEYS = 2048


def keys_factor(keys, r: Rates):
    """Fused attention's rate at `keys` per query over its rate at 4k: each query tile's fixed work (load Q, rescale,
    write O) is spread over the keys it loops through, L / (L + attn_keys_half), the curve cuDNN's causal forward and
    backward follow from 2k to 32k tokens in NVIDIA's cudnn-frontend benchmark (efficiency.toml attn_keys_half); a
    64k-key causal context runs at 1.25 of the 4k rate (a sliding window: attention_rate)."""
    def tile(k):
        return k / (k + r.attn_keys_half)
    return tile(keys) / tile(ATTN_REF_KEYS)


def attention_span(spec: ModelSpec, seq_length: int) -> int:
    """The sequence each attention call runs over: Llama 4's chunk where the sequence is longer (Megatron Bridge folds
    the chunks into the batch, llama4_utils.py chunkify), else the whole sequence. Every layer alike, its no-RoPE
    layers too: Bridge's Llama4SelfAttention (llama4_utils.py @v0.3.1) chunks before it reads is_nope_layer, which
    only skips RoPE and the q/k L2 norm (HF's Llama 4 attends over the whole sequence on those layers instead)."""
    return min(seq_length, spec.attention_chunk or seq_length)


def chunked_attention_flops(spec: ModelSpec, seq_length: int, tokens: float) -> float:
    """Training FLOPs (forward + backward) of the attention a whole-sequence count includes but chunked attention
    (attention_span) never runs, over `tokens` tokens of every layer: Megatron's FLOP counters know no chunks."""
    span = attention_span(spec, seq_length)
    if span == seq_length:
        return 0.0
    # 3 x the forward: forward and a backward of twice its FLOPs, as Megatron's counter takes it
    # (model_flops.megatron_model_flops); each distinct layer kind once, times the layers of that kind
    unrun = {k: layer_flops(spec, k, tokens, seq_length)["core_attn"] - layer_flops(spec, k, tokens, span)["core_attn"]
             for k in set(all_layers(spec))}
    return sum(3 * unrun[k] for k in all_layers(spec))


def attention_rate(spec: ModelSpec, seq_length: int, window: int | None, r: Rates):
    """FLOP/s of fused attention for this model's head shape and the keys each query sees. A sliding window W shorter
    than the sequence computes the band of its query tile: W + attn_window_tile keys a query, at that many keys'
    rate, W of them useful (a 128-key window on GB200: 0.067 of the peak, cuDNN measures 0.070; efficiency.toml)."""
    useful = attended_keys(seq_length, window)
    if window is None or window >= seq_length:
        return r.attn * head_dim_factor(spec, r) * keys_factor(useful, r)
    done = useful + r.attn_window_tile
    return r.attn * head_dim_factor(spec, r) * keys_factor(done, r) * useful / done


def sparse_attention_rate(spec: ModelSpec, seq_length: int, r: Rates):
    """FLOP/s of DeepSeek Sparse Attention's kernels over the top-k keys a query gathers (min(i + 1, index_topk)):
    the 128-wide head's rate (attn_eff) at that many keys. No window band: the kernel gathers exactly the keys the
    top-k names (FlashMLA sparse forward, dsa_cudnn_kernels.py @ core_v0.19.0); and not MLA's measured 192/128 rate,
    which is the unabsorbed kernel's (the absorbed one runs 576-wide keys and 512-wide values, measured nowhere)."""
    return r.attn * keys_factor(attended_keys(seq_length, spec.dsa.index_topk), r)


def ring_slowdown(seq_length: int, ring, r: Rates):
    """Attention seconds under a CP p2p ring of `ring` ranks over the same FLOPs in one causal call (>= 1). Transformer
    Engine splits the sequence into 2 x ring chunks and runs one attention call per ring step (context_parallel.py
    AttnFuncWithCPAndKVP2P: a causal "diagonal" call on the rank's own two chunks, then "lower-triangle" calls of both
    query chunks against one K,V chunk and "upper-triangle" calls of one query chunk against two); the steps run in
    lockstep, so each takes its slowest call's time, one chunk (seq / (2 x ring)) of keys per query: 1/ring of the
    whole sequence's causal mean, at keys_factor's rate for it."""
    full = attended_keys(seq_length)
    return keys_factor(full, r) / keys_factor(full / np.maximum(ring, 1), r)
