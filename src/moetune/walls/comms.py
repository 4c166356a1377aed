"""The communication wall: seconds of every collective, on the link it travels.

A group whose members share an NVLink domain talks over NVLink (per-direction bandwidth x
``nvlink_eff``); once it leaves the domain the scale-out NIC of each GPU is the bottleneck
(``nic_gbps`` x ``nic_eff``). Which share of a group leaves the domain follows Megatron's rank order
(layout/ranks.py). Ring all-gather / reduce-scatter move ``(n-1)/n`` of the full tensor per rank.
The EP all-to-all (dispatch and combine) is ``ep_alltoall_seconds``: each rank sends top-k copies of
its tokens; the share bound for other NVLink domains rides the NIC, the rest NVLink, concurrently.
DeepEP dedups inter-node copies of a token bound for several experts on one node; HybridEP does the
same per NVLink domain (seeds/004).
"""

import numpy as np

from moetune.layout.ranks import cross_domain_fraction, members_in_domain
from moetune.specs.hardware import GpuSpec

BF16 = 2


def link_bandwidth(size, stride, gpu: GpuSpec, eff: dict):
    """Bytes/s per rank of a ring collective over a group: NVLink inside one domain, else the NIC."""
    inside = members_in_domain(size, stride, gpu.nvlink_domain) >= size
    return np.where(inside, gpu.nvlink_gbps * 1e9 * eff["nvlink_eff"], gpu.nic_gbps / 8 * 1e9 * eff["nic_eff"])


def ring_seconds(nbytes, size, stride, gpu: GpuSpec, eff: dict):
    """One all-gather or reduce-scatter of a tensor of ``nbytes`` (full size) over the group."""
    return np.where(size > 1, (size - 1) / np.maximum(size, 1) * nbytes / link_bandwidth(size, stride, gpu, eff), 0.0)


def dedup_factor(ep, etp, topk: int, gpu: GpuSpec):
    """Share of inter-domain token copies that DeepEP/HybridEP still send after deduplicating copies
    bound for the same remote domain: expected remote domains hit over expected remote copies, with
    experts chosen uniformly (N domains in the EP group)."""
    n = np.maximum(ep / members_in_domain(ep, etp, gpu.nvlink_domain), 1)
    remote_copies = topk * (n - 1) / n
    distinct = (n - 1) * (1 - (1 - 1 / n) ** topk)
    return np.where(n > 1, distinct / np.maximum(remote_copies, 1e-12), 1.0)


def ep_alltoall_seconds(tokens_sent, hidden: int, topk: int, ep, etp, gpu: GpuSpec, eff: dict, dispatcher: str):
    """One EP all-to-all (a dispatch or a combine) on one rank; ``tokens_sent`` before top-k copies."""
    copies = tokens_sent * topk * BF16 * hidden * (ep - 1) / np.maximum(ep, 1)
    remote = cross_domain_fraction(ep, etp, gpu.nvlink_domain)
    a2a = eff[f"a2a_eff_{dispatcher}"]
    inter = copies * remote * (dedup_factor(ep, etp, topk, gpu) if dispatcher in ("deepep", "hybridep") else 1.0)
    t_intra = copies * (1 - remote) / (gpu.nvlink_gbps * 1e9 * eff["nvlink_eff"] * a2a)
    t_inter = inter / (gpu.nic_gbps / 8 * 1e9 * eff["nic_eff"] * a2a)
    # NCCL's all-to-all posts one send/recv pair per peer (a setup cost each); the fused kernels reach all at once
    latency = eff["a2a_latency_us"] + (eff["a2a_peer_us"] * (ep - 1) if dispatcher == "alltoall" else 0.0)
    return np.where(ep > 1, np.maximum(t_intra, t_inter) + latency * 1e-6, 0.0)


def cp_kv_seconds(tokens, kv_width: int, cp, tp, gpu: GpuSpec, eff: dict):
    """Ring exchange of K and V chunks over the CP group (forward): each rank passes its chunk cp-1 times."""
    nbytes = 2 * tokens * kv_width / np.maximum(tp, 1) * BF16
    return np.where(cp > 1, (cp - 1) * nbytes / link_bandwidth(cp, tp, gpu, eff), 0.0)
