"""Megatron's rank order and which parallel groups leave the NVLink domain.

Megatron-Core numbers ranks with TP fastest, then CP, EP (expert mesh) / DP, then PP:
``order="tp-cp-ep-dp-pp"`` in parallel_state.initialize_model_parallel (RankGenerator). So a group
of size ``n`` whose consecutive members are ``stride`` ranks apart covers ``stride * n`` consecutive
ranks:

    attention mesh   TP: stride 1        CP: stride TP        DP: stride TP*CP     PP: stride world/PP
    expert mesh     ETP: stride 1        EP: stride ETP       EDP: stride ETP*EP

The job's NVLink domain is ``D`` consecutive ranks (`job_nvlink_domain`): a node on HGX (8); on NVL72 racks the
nodes a Slurm segment keeps in one rack, which need not be 72 (64 for a 256-GPU job). When a group's span and
``D`` are aligned (one divides the other) each member shares its domain with ``min(n, max(1, D // stride))``
members (itself included); otherwise some groups straddle two domains (EP40 in 60-rank domains: ranks 40-79) and
their members in the smaller piece see the fewest peers over NVLink. Every function here takes Python ints or
numpy arrays alike (the planner passes arrays).
"""

import math
from collections.abc import Iterator
from dataclasses import replace
from functools import cache

import numpy as np

from moetune.layout.layout import Layout
from moetune.memo import array_key, remembered
from moetune.specs.hardware import GpuSpec, rack_scale_domain, spans_nodes


def job_nvlink_domain(world: int, gpus_per_node: int, nvlink_domain: int) -> int:
    """Consecutive ranks that share an NVLink domain in a job of `world` GPUs. Where a domain spans several nodes
    (NVL72: 18 nodes of 4), the job is split into equal Slurm segments of the most nodes that divide the job and fit
    a rack, as Megatron Bridge's launcher does for GB200 (scripts/performance/utils/executors.py: `--segment` =
    the node count up to 18 nodes, else its largest divisor <= 18): 64 GPUs -> one domain of 64, 256 -> 64,
    240 -> 60, 144 -> 72. One domain per node elsewhere (HGX: 8)."""
    if not spans_nodes(nvlink_domain, gpus_per_node):  # a node holds one domain or more (a cluster file may say so)
        return min(world, nvlink_domain)
    per_rack = nvlink_domain // gpus_per_node
    nodes = -(-world // gpus_per_node)
    if nodes <= per_rack:
        return min(world, nvlink_domain)
    return gpus_per_node * max(d for d in range(1, per_rack + 1) if nodes % d == 0)


def job_gpu(gpu: GpuSpec, world: int) -> GpuSpec:
    """The GPU as a job of `world` GPUs sees it: its NVLink domain in consecutive ranks (idempotent). A job smaller
    than a node (6 of an HGX node's 8 GPUs) is one node of its own size, and one of part-nodes inside a rack (6 GB200s:
    4 + 2) a domain of whole part-nodes: nothing leaves the domain either way, and GpuSpec's check that domains are
    whole nodes holds."""
    domain = job_nvlink_domain(int(world), gpu.gpus_per_node, gpu.nvlink_domain)
    if domain == gpu.nvlink_domain:
        return gpu
    several = spans_nodes(gpu.nvlink_domain, gpu.gpus_per_node)
    node = math.gcd(domain, gpu.gpus_per_node) if several else min(domain, gpu.gpus_per_node)
    return replace(gpu, nvlink_domain=domain, gpus_per_node=node)


def _aligned_members(size, stride, domain, least=min, most=max):
    """Members sharing a domain for a group shape whose span and the domain are aligned (the module's formula): with
    Python's min and max for ints, so the scalar path stays numpy-free, or numpy's elementwise ones for arrays."""
    return least(size, most(1, domain // stride))


@cache
def _members_in_domain(size: int, stride: int, domain: int) -> int:
    """members_in_domain of one group shape, in Python ints (the array path's aligned and straddling cases)."""
    span = size * stride
    if domain % span and span % domain:
        return _straddled_fewest(size, stride, domain)
    return _aligned_members(size, stride, domain)


@cache
def _straddled_fewest(size: int, stride: int, domain: int) -> int:
    """Least, over every member of every group, of the members sharing its domain, for a group shape whose span
    (size*stride) and the domain are not aligned. Groups tile the ranks in blocks of the span, domains in blocks of
    `domain`: the pattern repeats every lcm of the two."""
    fewest = size
    for base in range(0, math.lcm(size * stride, domain), size * stride):
        for offset in range(stride):
            _, counts = np.unique((base + offset + stride * np.arange(size)) // domain, return_counts=True)
            fewest = min(fewest, int(counts.min()))
    return fewest


def members_in_domain(size, stride, domain):
    """Members of a group (itself included) that share one NVLink domain, for the worst-placed member: a collective
    runs at the pace of its slowest member, and the step at that of the slowest group. Ints in, int out."""
    if type(size) is int and type(stride) is int and type(domain) is int:  # the scalar estimate's case, without numpy
        return _members_in_domain(size, stride, domain)
    # the planner asks again with the same shape arrays for every knob set of a batch (walls/comms.py link_bandwidth)
    key = (array_key(size), array_key(stride), array_key(domain))
    return remembered(_MEMBERS, key, lambda: _members_in_domain_arrays(size, stride, domain), 256)


_MEMBERS: dict = {}


def ep_group_in_domain(ep, etp, domain):
    """Whether an EP group lies in one NVLink domain of `domain` consecutive ranks (a bool, or one per row for
    arrays): expert ranks are laid out ETP-fastest, so the group spans ETP*EP consecutive ranks and leaves the domain
    when wider than it or when it straddles two (EP40 in 60-rank domains)."""
    return members_in_domain(ep, etp, domain) >= ep


def _members_in_domain_arrays(size, stride, domain):
    size, stride, domain = (np.asarray(x, dtype=np.int64) for x in np.broadcast_arrays(size, stride, domain))
    # aligned shapes (the usual case): every group alike
    out = np.array(_aligned_members(size, stride, domain, np.minimum, np.maximum))
    span = size * stride
    odd = (domain % span != 0) & (span % domain != 0)
    if odd.any():  # one enumeration per distinct straddling group shape
        packed = (size[odd] << 40) | (stride[odd] << 20) | domain[odd]  # each below 2**20 ranks
        keys, inverse = np.unique(packed, return_inverse=True)
        fewest = [_straddled_fewest(int(k >> 40), int((k >> 20) & 0xFFFFF), int(k & 0xFFFFF)) for k in keys]
        out[odd] = np.array(fewest)[inverse]
    return int(out) if out.ndim == 0 else out


def hybridep_spans(ep, etp, nvlink_domain: int, job_domain: int):
    """Whether HybridEP runs this EP group (a bool, or one per row for arrays of EP and ETP): across HGX nodes it
    reaches the other nodes by RDMA, but on a rack-scale NVLink domain Megatron Bridge runs it only inside the domain
    (it refuses EP past the 72-rank rack: scripts/performance/utils/utils.py apply_target_topology_environment), here
    the job's (its Slurm segment). Which backend then runs is platform policy (specs/platform.py spanning_backend)."""
    return not rack_scale_domain(nvlink_domain) or ep_group_in_domain(ep, etp, job_domain)


def hybridep_spans_on(gpu: GpuSpec, world: int, ep, etp):
    """hybridep_spans for a job of `world` GPUs of this GPU: its NVLink domain, and the job's (job_nvlink_domain)."""
    domain = job_nvlink_domain(int(world), gpu.gpus_per_node, gpu.nvlink_domain)
    return hybridep_spans(ep, etp, gpu.nvlink_domain, domain)


def in_domain_eps(ep: int, etp: int, domain: int, experts: int = 0, world: int = 0, pp: int = 1) -> Iterator[int]:
    """EP sizes from `ep` down to 1, largest first, whose every group lies in one NVLink domain of the job (`domain`
    consecutive ranks), that divide the experts (`experts`; 0: unknown) and tile the `world` ranks with ETP and PP
    (0: unknown): the seeds' in-domain EP (seeds/000: keep hot communication inside the NVLink domain)."""
    for size in range(ep, 0, -1):  # the integer tests first: the domain's is numpy's
        if not (experts and experts % size) and not (world and world % (size * etp * pp)) \
                and int(members_in_domain(size, etp, domain)) == size:
            yield size


def cross_domain_fraction(size, stride, domain):
    """Share of a member's peers that sit outside its NVLink domain (0 when the group fits in one)."""
    inside = members_in_domain(size, stride, domain)
    return np.where(size > 1, (size - inside) / np.maximum(size - 1, 1), 0.0)


def group_strides(layout: Layout) -> dict[str, tuple[int, int]]:
    """(size, stride) of every parallel group of a layout."""
    return {
        "tp": (layout.tp, 1),
        "cp": (layout.cp, layout.tp),
        "dp": (layout.dp, layout.tp * layout.cp),
        "pp": (layout.pp, layout.world_size // layout.pp),
        "etp": (layout.etp, 1),
        "ep": (layout.ep, layout.etp),
        "edp": (layout.edp, layout.etp * layout.ep),
    }


def groups_leaving_domain(layout: Layout, domain: int) -> dict[str, float]:
    """For each group of size > 1: the share of its peers outside the NVLink domain."""
    return {name: float(cross_domain_fraction(size, stride, domain))
            for name, (size, stride) in group_strides(layout).items() if size > 1}
