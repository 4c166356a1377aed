"""Context-parallel exchanges of one attention layer, by Megatron's ``cp_comm_type`` (TransformerConfig; Transformer
Engine runs them, transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py):

- ``p2p``: a ring passes each rank's K,V chunk CP-1 times in the forward; the backward passes K,V again and their
  gradients. Asynchronous: each step hides under the attention of the chunk already held.
- ``all_gather``: K,V are gathered before the attention (and again in the backward, dK,dV reduce-scattered). Not
  overlapped.
- ``a2a`` (Ulysses): an all-to-all trades each rank's sequence chunk of Q, K, V for the full sequence of heads/CP
  heads, and another brings the output back; the backward does the same with the gradients. Not overlapped, and the
  head split needs heads and KV groups per TP rank divisible by CP.
- ``a2a+p2p`` (hierarchical, ``hierarchical_context_parallel_sizes`` = [inner, outer]): a2a inside groups of
  `inner` consecutive CP ranks (NVLink), then a p2p ring over the `outer` groups.

Bytes are per TP rank (heads split over TP) for one micro-batch, forward + backward.
"""

from dataclasses import replace

import numpy as np

from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.ranks import job_gpu
from moetune.memo import array_key, remembered
from moetune.specs.model import LayerKind, ModelSpec
from moetune.walls.attention_rate import attention_rate, ring_slowdown
from moetune.walls.comms import BF16, link_bandwidth
from moetune.walls.compute import BWD_ATTN, Rates, rates
from moetune.walls.cp_legal import (
    DSA_EXCHANGES,
    a2a_allows,
    dsa_exchange_refusal,
    exchange_refusal,
    exchanges_that_run,
    hcp_group_checks,
    hcp_inner_size,
    legal_exchanges,
    rank_heads,
)
from moetune.walls.dsa import dsa_cp_seconds
from moetune.walls.flops import is_dsa, kv_groups_per_rank, layer_flops
from moetune.walls.memory import activation_context

# What a plan weighs per layout ("auto"): all_gather moves p2p's bytes without its overlap, so it never wins.
AUTO_OPTIONS: tuple[str, ...] = ("p2p", "a2a", "a2a+p2p")


ATTENTION = ("gqa", "mla")


def widths(spec: ModelSpec, kind: LayerKind, tp) -> tuple:
    """(Q, K+V, O) elements per token of one attention layer, x TP: a rank exchanges a TP-th of each (MLA: the
    up-projected heads that the attention kernel sees, K with its RoPE part; TP past the KV groups: one group's K, V
    a rank, flops.kv_groups_per_rank)."""
    if kind.mixer == "mla":
        m, h = spec.mla, spec.num_attention_heads
        qk = m.q_head_dim
        return h * qk, h * (qk + m.v_head_dim), h * m.v_head_dim
    g, d, q = spec.num_query_groups, spec.kv_channels, spec.query_projection_size
    return q, 2 * kv_groups_per_rank(g, tp) * d * tp, q


# Each ring step and each all-to-all also pays a collective's fixed cost (launch + handshake): efficiency.toml
# a2a_latency_us, the EP all-to-all's, as no published run isolates CP's own. A ring makes 3 (CP-1) steps a layer
# (forward, then K,V and their gradients backward); a2a makes 4 all-to-alls (QKV and O, forward and backward).
# The forward pass's share of an exchange (Transformer Engine context_parallel.py): a ring's forward passes K,V once
# and its backward K,V and their gradients (1 of 3 step sets, as _ring counts them); a2a's forward trades QKV in and
# O out, its backward their gradients (2 of _a2a's 4 all-to-alls)
RING_FORWARD, A2A_FORWARD = 1 / 3, 1 / 2


def _ring(kv, size, stride, gpu, eff):
    steps = 3 * (size - 1)
    return np.where(size > 1, steps * (kv / link_bandwidth(size, stride, gpu, eff) + eff["a2a_latency_us"] * 1e-6),
                    0.0)


def _a2a(q_kv_o, size, stride, gpu, eff, calls: int = 4):
    share = (size - 1) / np.maximum(size, 1)
    return np.where(size > 1, 2 * share * q_kv_o / link_bandwidth(size, stride, gpu, eff)
                    + calls * eff["a2a_latency_us"] * 1e-6, 0.0)


def linear_mixer_seconds(spec: ModelSpec, kind: LayerKind, tokens, cp, tp, gpu, eff: dict):
    """Seconds (not hidden) of the all-to-alls a Mamba-2 or gated delta-net layer makes under CP, forward + backward:
    each CP rank trades its sequence chunk of the mixer's inputs for the whole sequence of heads/CP heads before the
    convolution and scan, and the output back after (Megatron-LM megatron/core/ssm/mamba_context_parallel.py: z, x,
    B, C, dt in and y out; ssm/gated_delta_net/common.py: q, k, v in and the output out)."""
    if kind.mixer == "mamba":
        m = spec.mamba
        width, calls = 3 * m.d_inner + 2 * m.n_groups * m.state_size + m.num_heads, 12
    else:
        g = spec.gdn
        width, calls = 2 * g.qk_dim + 2 * g.v_dim, 8
    return _a2a(tokens / np.maximum(tp, 1) * BF16 * width, cp, tp, gpu, eff, calls)


def cp_seconds(spec: ModelSpec, kind: LayerKind, tokens, cp, tp, gpu, eff: dict, comm_type: str, inner=None):
    """(not overlapped, overlapped with attention) seconds of one layer's CP exchanges, forward + backward."""
    tp1 = np.maximum(tp, 1)
    q_w, kv_w, o_w = widths(spec, kind, tp1)
    per_rank = tokens / tp1 * BF16
    kv, qkvo = per_rank * kv_w, per_rank * (q_w + kv_w + o_w)
    if comm_type == "p2p":
        return 0.0, _ring(kv, cp, tp, gpu, eff)
    if comm_type == "all_gather":
        return _ring(kv, cp, tp, gpu, eff), 0.0
    if comm_type == "a2a":
        return _a2a(qkvo, cp, tp, gpu, eff), 0.0
    inner = hcp_inner_size(spec, cp, tp, gpu.nvlink_domain) if inner is None else inner
    outer = cp // np.maximum(inner, 1)
    # after the inner a2a a rank holds `inner` chunks of heads/inner heads: the ring passes as many bytes as p2p's
    return _a2a(qkvo, inner, tp, gpu, eff), _ring(kv, outer, tp * inner, gpu, eff)


def cp_exposed(hard, soft, attn_total):
    """Seconds left exposed: the overlapped part hides under the layer's attention, forward + backward."""
    return hard + np.maximum(soft - attn_total, 0.0)


def ring_ranks(spec: ModelSpec, comm_type: str, cp, tp, nvlink_domain: int, inner=None):
    """Ranks of the p2p ring whose attention calls each see one chunk of the keys (attention_rate.ring_slowdown): CP for
    p2p, the outer group for a2a+p2p; 1 for a2a (whole sequence, heads split) and all_gather (each query chunk
    against the gathered K,V prefix)."""
    if comm_type == "p2p":
        return np.asarray(cp)
    if comm_type == "a2a+p2p":
        inner = hcp_inner_size(spec, cp, tp, nvlink_domain) if inner is None else inner
        return np.asarray(cp) // np.maximum(inner, 1)
    return np.ones_like(np.asarray(cp))


def representative_kind(spec: ModelSpec) -> LayerKind:
    """The attention layer kind with the most attention work per token (gpt-oss: its full-attention layers), whose
    exchanges decide a plan's cp_comm_type for the whole model."""
    kinds = [k for k in dict.fromkeys((*spec.layers, spec.mtp_layer_kind)) if k is not None and k.mixer in ATTENTION]
    return max(kinds, key=lambda k: layer_flops(spec, k, 1, 4096, window=k.window)["core_attn"])


def _option_cost(spec: ModelSpec, kind: LayerKind, ctx, cp, tp, gpu, eff: dict, r: Rates, comm_type: str, attn_total,
                 inner=None) -> tuple:
    """(raw, exposed, attention slowdown, replay) of one exchange: the exchange hides under the attention as its ring's
    chunked calls run it, `attn_total` x the slowdown (attention_rate.ring_slowdown)."""
    if comm_type == "a2a+p2p" and inner is None:  # once, for the ring and the exchange
        inner = hcp_inner_size(spec, cp, tp, gpu.nvlink_domain)
    slow = ring_slowdown(ctx.seq_length, ring_ranks(spec, comm_type, cp, tp, gpu.nvlink_domain, inner), r)
    hard, soft = cp_seconds(spec, kind, ctx.tokens, cp, tp, gpu, eff, comm_type, inner)
    # A recompute that replays core attention replays its forward exchange: the ring's forward third (K,V once; the
    # backward passes K,V and their gradients) under the forward attention, a2a's forward half (QKV in, O out)
    hard_fwd = hard * (RING_FORWARD if comm_type == "all_gather" else A2A_FORWARD)
    replay = cp_exposed(hard_fwd, soft * RING_FORWARD, attn_total / (1 + BWD_ATTN) * slow)
    return hard + soft, cp_exposed(hard, soft, attn_total * slow), slow, replay


def _total_cost(option: tuple, attn_total):
    """What an exchange costs a layer: its exposed seconds plus the attention seconds its ring's calls add."""
    _, exposed, slow, _ = option
    return exposed + attn_total * (slow - 1)


def auto_choice(spec: ModelSpec, ctx, cp, tp, gpu, eff: dict, r: Rates):
    """Index into AUTO_OPTIONS of the legal exchange that costs least on the representative layer, its exchange left
    exposed plus what its ring's chunked attention calls add: how a plan sets cp_comm_type per layout (the choice
    barely interacts with the other knobs). Where none is legal the index is 0 (p2p): the planner drops those layouts
    (cp_exchange_exists) and resolve_auto refuses them (exchange_refusal)."""
    kind = representative_kind(spec)
    flops = layer_flops(spec, kind, ctx.tokens, ctx.seq_length, window=kind.window)["core_attn"]
    attn_total = (1 + BWD_ATTN) * flops / tp / attention_rate(spec, ctx.seq_length, None, r)
    legal = legal_exchanges(spec, cp, tp, gpu.nvlink_domain)
    cost = [np.where(legal[t], _total_cost(_option_cost(spec, kind, ctx, cp, tp, gpu, eff, r, t, attn_total),
                                           attn_total), np.inf) for t in AUTO_OPTIONS]
    return np.argmin(np.stack(np.broadcast_arrays(*cost)), axis=0)


def layer_cp(spec: ModelSpec, kind: LayerKind, ctx, cp, tp, gpu, eff: dict, knobs: Knobs, r: Rates, attn_s):
    """(raw, exposed, attention slowdown, replay) of one layer's CP exchanges; `attn_s` is its forward attention in
    one causal call, the slowdown what a p2p ring's chunked calls multiply it by (1 without a ring), the replay the
    exposed seconds of the forward exchange that recomputing the mixer runs again."""
    if not np.any(np.asarray(cp) > 1) or kind.mixer not in (*ATTENTION, "mamba", "gdn"):
        return 0.0, 0.0, 1.0, 0.0
    if is_dsa(spec, kind):  # DSA gathers its keys over CP whatever the plan's cp_comm_type (all_gather: resolve_auto)
        return dsa_cp_seconds(spec, kind, ctx.tokens, cp, tp, gpu, eff)
    if kind.mixer in ("mamba", "gdn"):  # their own all-to-alls, whatever cp_comm_type says (attention's exchange)
        hard = linear_mixer_seconds(spec, kind, ctx.tokens, cp, tp, gpu, eff)
        return hard, hard, 1.0, hard * A2A_FORWARD
    # The planner asks again for every knob set of a layout batch; none of those knobs moves the exchange.
    arrays = (array_key(np.asarray(a, dtype=float)) for a in (ctx.tokens, cp, tp, attn_s))
    key = (spec, kind, gpu.key, gpu.nvlink_domain, knobs.cp_comm_type, knobs.hcp_a2a_size, r.attn, r.attn_hdim64,
           r.attn_keys_half, ctx.seq_length, eff["nvlink_eff"], eff["nic_eff"], eff["a2a_latency_us"], *arrays)
    return remembered(_MEMO, key, lambda: _layer_cp(spec, kind, ctx, cp, tp, gpu, eff, knobs, r, attn_s), 4096)


_MEMO: dict = {}


def _layer_cp(spec: ModelSpec, kind: LayerKind, ctx, cp, tp, gpu, eff: dict, knobs: Knobs, r: Rates, attn_s):
    attn_total = (1 + BWD_ATTN) * attn_s
    if knobs.cp_comm_type == "auto":
        pick = auto_choice(spec, ctx, cp, tp, gpu, eff, r)
        parts = [_option_cost(spec, kind, ctx, cp, tp, gpu, eff, r, t, attn_total) for t in AUTO_OPTIONS]
        return tuple(np.choose(pick, np.broadcast_arrays(*(p[i] for p in parts))) for i in range(4))
    return _option_cost(spec, kind, ctx, cp, tp, gpu, eff, r, knobs.cp_comm_type, attn_total, knobs.hcp_a2a_size)


def resolve_auto(spec: ModelSpec, lay, wl, knobs: Knobs, gpu, eff: dict) -> Knobs:
    """The concrete cp_comm_type (and a2a+p2p's inner size) a plan's "auto" stands for on this layout, so estimate,
    explain and emit name what Megatron will run; p2p, Megatron's default, when CP is 1, whatever was asked (there is
    no exchange, and a config leaves the field out: config_map.cp_fields)."""
    if lay.cp == 1:
        return knobs if (knobs.cp_comm_type, knobs.hcp_a2a_size) == ("p2p", None) else replace(
            knobs, cp_comm_type="p2p", hcp_a2a_size=None)
    if spec.dsa is not None:  # Megatron's default p2p too: Bridge's DSA providers set allgather (glm5_bridge.py)
        if knobs.cp_comm_type not in ("auto", *DSA_EXCHANGES):
            raise MoetuneError(f"cp_comm_type {knobs.cp_comm_type} at CP {lay.cp}: "
                               f"{dsa_exchange_refusal(spec, knobs.cp_comm_type)}; use --cp-comm-type all_gather")
        return replace(knobs, cp_comm_type="all_gather", hcp_a2a_size=None)
    if knobs.cp_comm_type == "a2a+p2p":
        return replace(knobs, hcp_a2a_size=_hcp_size(spec, lay, knobs.hcp_a2a_size, job_gpu(gpu, lay.world_size)))
    if knobs.cp_comm_type == "a2a" and not a2a_allows(spec, lay.cp, lay.tp):
        # Transformer Engine's all-to-all CP splits each TP rank's heads and KV groups over CP: it cannot run here
        groups = kv_groups_per_rank(spec.kv_groups, lay.tp)  # one past the groups
        instead = exchanges_that_run(spec, lay.cp, [lay.tp], job_gpu(gpu, lay.world_size).nvlink_domain, "a2a")
        raise MoetuneError(f"cp_comm_type a2a at CP {lay.cp}: the {spec.num_attention_heads // lay.tp} heads and "
                           f"{groups} KV groups of a TP {lay.tp} rank must each split over CP "
                           f"(CP <= KV groups a rank); use {instead + ', or ' if instead else ''}a smaller CP or TP",
                           same_as=("cp.a2a_heads",))  # what that rule says where the config states the shapes
    if knobs.cp_comm_type != "auto":
        return knobs
    gpu = job_gpu(gpu, lay.world_size)
    if why := exchange_refusal(spec, lay.cp, lay.tp, gpu.nvlink_domain):  # auto names only an exchange that runs
        raise MoetuneError(why)
    ctx = activation_context(lay, wl, knobs)
    r = rates(gpu, knobs.precision, eff, fp8_head=knobs.fp8_output_proj)
    choice = AUTO_OPTIONS[int(auto_choice(spec, ctx, lay.cp, lay.tp, gpu, eff, r))]
    inner = int(hcp_inner_size(spec, lay.cp, lay.tp, gpu.nvlink_domain)) if choice == "a2a+p2p" else None
    return replace(knobs, cp_comm_type=choice, hcp_a2a_size=inner)


def _hcp_size(spec: ModelSpec, lay, size: int | None, gpu) -> int:
    """a2a+p2p's a2a group: the one given, checked, or the largest the heads allow inside NVLink; its errors count the
    KV groups of a TP rank (rank_heads), what the all-to-all splits, as the other CP errors do."""
    heads_tp, groups_tp = rank_heads(spec, lay.tp)
    if size is None:
        size = int(hcp_inner_size(spec, lay.cp, lay.tp, gpu.nvlink_domain))
        if size == 1:
            why = (f"CP {lay.cp} leaves no ring beside an a2a group of 2 or more" if lay.cp < 4 else
                   f"no a2a group of 2 or more that divides CP, splits the {groups_tp} KV groups of a TP {lay.tp} rank "
                   f"and fits the {gpu.nvlink_domain}-GPU NVLink domain")
            instead = exchanges_that_run(spec, lay.cp, [lay.tp], gpu.nvlink_domain, "a2a+p2p")
            raise MoetuneError(f"a2a+p2p at CP {lay.cp}: {why}; use {instead or 'a smaller CP or TP'}")
    # A group of CP leaves a p2p ring of 1, which runs: Transformer Engine's attn_forward_func_with_cp hands a2a+p2p
    # with a one-rank p2p group to plain a2a over cp_group[0] (since v1.12), priced so here (the ring costs nothing)
    checks = hcp_group_checks(heads_tp, groups_tp, lay.cp, size)
    words = {"divides": f"divide CP ({lay.cp})", "splits": f"split the {groups_tp} KV groups of a TP {lay.tp} rank"}
    failed = [words[name] for name, holds in checks.items() if not holds]
    if failed:  # the head split is what rule cp.hcp_a2a_heads says where the config states the shapes
        raise MoetuneError(f"hierarchical CP sizes: the a2a group ({size}) must {' and '.join(failed)}; pick another "
                           "a2a size (--hcp-a2a-size, or model.hierarchical_context_parallel_sizes [a2a, p2p])",
                           same_as=() if checks["splits"] else ("cp.hcp_a2a_heads",))
    return size
