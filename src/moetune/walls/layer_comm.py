"""One layer's communication: the TP collectives of its sequence-parallel linear layers (and the QKV gather past the
KV groups), the EP dispatch and combine of a MoE layer, the CP exchange layer_time.layer_time hands in, and the
activation offload's host transfers; raw and left exposed under the layer's compute (layer_time.py adds them to the
layer's time)."""

import numpy as np

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.memo import array_key, remembered
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import LayerKind, ModelSpec
from moetune.walls.activations import offloaded_bytes
from moetune.walls.comms import BF16, alltoall_total, ep_alltoall_parts, nvlink_busy, ring_seconds
from moetune.walls.compute import BWD_GEMM
from moetune.walls.dsa import dsa_tp_seconds
from moetune.walls.flops import is_dsa, qkv_gathered
from moetune.walls.host import layer_cpu_share
from moetune.walls.overlap import ep_overlap_exposed, ep_overlap_hide


def qkv_gather_seconds(spec: ModelSpec, kind: LayerKind, lay: Layout, ctx, gpu: GpuSpec, eff: dict, knobs: Knobs):
    """Seconds of the QKV output's all-gather over TP past the KV groups (flops.qkv_gathered), forward, and its
    reduce-scatter, backward (tensor_parallel/mappings.py _AllGatherFromTensorParallelRegion: its backward is
    _reduce_scatter_along_last_dim); full recompute gathers again. A plain collective in attention.py, which TE's TP
    comm overlap (userbuffers, around the linear layers' GEMMs) does not hide."""
    past = qkv_gathered(spec, lay.tp)
    if kind.mixer != "gqa" or not np.any(past):
        return 0.0
    calls = 2 + (knobs.recompute == "full")
    return calls * past * ring_seconds(ctx.tokens * sum(spec.qkv_widths) * BF16, lay.tp, 1, gpu, eff)


def layer_comm(spec: ModelSpec, kind: LayerKind, lay: Layout, ctx, gpu: GpuSpec, eff: dict, knobs: Knobs,
               compute: dict, cp: tuple, bias_forward=0.0) -> tuple[dict, dict]:
    """Raw and exposed seconds of the TP, EP and CP collectives of one layer (forward + backward); `cp` is the CP
    exchange's (raw, exposed) seconds (context_parallel.layer_cp), `bias_forward` the forward seconds of the experts'
    fc2 bias pass (compute.expert_bias_seconds), which EP overlap pairs with the expert forward."""
    compute_s = sum(compute.values())
    full = ctx.tokens * spec.hidden_size * BF16  # the sequence-gathered activation a TP collective moves
    n_tp = (2 if kind.mixer != "none" else 0) + (2 if kind.mlp == "dense" else 0)
    if kind.mlp == "moe" and spec.moe_shared_expert_intermediate_size:
        n_tp += 2  # shared experts gather and scatter the sequence themselves
    # Recomputing a norm under sequence parallel re-gathers its output for the GEMM that reads it
    # (layernorm recompute keeps only the sharded input): one more all-gather per recomputed norm in backward.
    regather = 0
    if "layernorm" in knobs.effective_modules and knobs.recompute == "selective":
        regather = (kind.mixer != "none") + (kind.mlp == "dense" or (kind.mlp == "moe" and
                                                                    bool(spec.moe_shared_expert_intermediate_size)))
    # full recompute replays the layer's forward, its n_tp/2 all-gathers and n_tp/2 reduce-scatters included
    # (Megatron-Core transformer_block.py _checkpointed_forward: tensor_parallel.checkpoint re-runs the whole layer,
    # the sequence-parallel gathers of its Column/RowParallelLinear with it)
    replay = n_tp if knobs.recompute == "full" else 0
    tp = (2 * n_tp + regather + replay) * ring_seconds(full, lay.tp, 1, gpu, eff)  # forward + backward
    qkv = qkv_gather_seconds(spec, kind, lay, ctx, gpu, eff, knobs)
    if is_dsa(spec, kind):
        qkv = qkv + dsa_tp_seconds(spec, kind, ctx.tokens, lay.tp, gpu, eff, knobs.recompute == "full")
    ep, ep_exposed = 0.0, 0.0
    if kind.mlp == "moe":
        parts, etp = _dispatch_parts(spec, lay, ctx, gpu, eff, knobs, full)
        a2a = alltoall_total(parts)
        replays = 2 if (knobs.recompute == "full" or "moe" in knobs.effective_modules) else 0
        ep = (4 + replays) * (a2a + etp)
        # (Megatron refuses MoE recompute under EP overlap, transformer_config.py; if asked, its replays show whole)
        ep_exposed = ep
        if knobs.ep_overlap:
            eager = layer_cpu_share(kind, knobs.cuda_graph_scope, eff) / layer_cpu_share(kind, (), eff)
            hide = ep_overlap_hide(eff, nvlink_busy(parts), eager)
            ep_exposed = (ep_overlap_exposed(a2a + etp, compute, hide, knobs.delay_wgrad, bias_forward)
                          + replays * (a2a + etp))
    cp, cp_exposed = cp
    # Fine-grained activation offloading: the offloaded inputs go to the host in the forward and come back in
    # the backward over the host link, each direction under that pass's compute (the backward is BWD_GEMM times
    # the forward, compute.py).
    moved = offloaded_bytes(spec, kind, ctx) / (gpu.host_link_gbps * 1e9 * eff["host_link_eff"])
    forward_s = compute_s / (1 + BWD_GEMM)
    raw = {"tp": tp + qkv, "ep_alltoall": ep, "cp": cp, "activation_offload": 2 * moved}
    exposed = {
        "tp": (tp * (1 - eff["tp_overlap_hide"]) if knobs.tp_comm_overlap else tp) + qkv,
        "ep_alltoall": ep_exposed,
        "cp": cp_exposed,  # a ring's steps hide under the attention of the chunks already held
        "activation_offload": np.maximum(moved - forward_s, 0.0) + np.maximum(moved - BWD_GEMM * forward_s, 0.0),
    }
    return raw, exposed


_PARTS: dict = {}  # _dispatch_parts by its inputs (moetune/memo.py): every knob set of a batch asks it again


def _dispatch_parts(spec: ModelSpec, lay: Layout, ctx, gpu: GpuSpec, eff: dict, knobs: Knobs, full) -> tuple:
    """_dispatch_parts_of, remembered: it reads the dispatcher, its SMs, the shapes and the routing imbalance alone,
    which most of a search's knob sets share."""
    arrays = (array_key(a) for a in (ctx.tokens, ctx.sp_div, ctx.token_imbalance, lay.ep, lay.etp, full))
    key = (spec.hidden_size, spec.moe_router_topk, spec.num_moe_experts, spec.moe_router_num_groups,
           spec.moe_router_group_topk, knobs.dispatcher, knobs.num_sms, gpu, tuple(sorted(eff.items())), *arrays)
    *parts, etp = remembered(_PARTS, key, lambda: _flat(*_dispatch_parts_of(spec, lay, ctx, gpu, eff, knobs, full)),
                             1024)  # flat, so remembered makes every array in it read-only
    return tuple(parts), etp


def _flat(parts: tuple, etp) -> tuple:
    return (*parts, etp)


def _dispatch_parts_of(spec: ModelSpec, lay: Layout, ctx, gpu: GpuSpec, eff: dict, knobs: Knobs, full) -> tuple:
    """One dispatch's (NVLink, NIC, fixed) seconds (comms.ep_alltoall_parts) and its expert-TP gather's.
    The allgather dispatcher gathers every token of the ETP x EP group, whatever the top-k, and reduce-scatters
    them back (moe/token_dispatcher.py MoEAllGatherTokenDispatcher: tp_ep_group); the others send each token to
    its experts' ranks, then the expert-TP group all-gathers what its ranks received: ETP times one rank's routed
    tokens, as the expert GEMMs count them (compute.forward_seconds)."""
    if knobs.dispatcher == "allgather":
        group = lay.ep * lay.etp
        gather = ring_seconds(full / ctx.sp_div * group, group, 1, gpu, eff)
        return (gather, 0.0 * gather, 0.0 * gather), 0.0
    parts = ep_alltoall_parts(ctx.tokens / ctx.sp_div * ctx.token_imbalance, spec.hidden_size, spec.moe_router_topk,
                              spec.num_moe_experts, lay.ep, lay.etp, gpu, eff, knobs.dispatcher,
                              spec.moe_router_num_groups, spec.moe_router_group_topk, knobs.num_sms)
    # the busiest expert rank gathers its imbalance's share too, as its GEMMs count it
    return parts, ring_seconds(full * spec.moe_router_topk / ctx.sp_div * lay.etp * ctx.token_imbalance, lay.etp, 1,
                               gpu, eff)
