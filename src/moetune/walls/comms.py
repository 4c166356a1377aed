"""The communication wall: seconds of every collective, on the link it travels.

A group whose members share an NVLink domain talks over NVLink (per-direction bandwidth x
``nvlink_eff``); once it leaves the domain the scale-out NIC of each GPU is the bottleneck
(``nic_gbps`` x ``nic_eff``). Which share of a group leaves the domain follows Megatron's rank order
(layout/ranks.py). Ring all-gather / reduce-scatter move ``(n-1)/n`` of the full tensor per rank.
The EP all-to-all (dispatch and combine) is ``ep_alltoall_parts`` (``alltoall_total`` adds them up): each rank
sends top-k copies of its tokens; the share bound for other NVLink domains rides the NIC, the rest NVLink, concurrently.
DeepEP and HybridEP send a token once per destination rank (and once per remote domain, forwarded inside
it), not once per expert: ``fused_copies``.
"""

import math

import numpy as np

from moetune.layout.ranks import cross_domain_fraction, members_in_domain
from moetune.memo import array_key, remembered
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import ModelSpec

BF16 = 2


def link_bandwidth(size, stride, gpu: GpuSpec, eff: dict):
    """Bytes/s per rank of a ring collective over a group: NVLink inside one domain, else the NIC."""
    inside = members_in_domain(size, stride, gpu.nvlink_domain) >= size
    return np.where(inside, gpu.nvlink_gbps * 1e9 * eff["nvlink_eff"], gpu.nic_gbps / 8 * 1e9 * eff["nic_eff"])


def ring_seconds(nbytes, size, stride, gpu: GpuSpec, eff: dict):
    """One all-gather or reduce-scatter of a tensor of ``nbytes`` (full size) over the group."""
    return np.where(size > 1, (size - 1) / np.maximum(size, 1) * nbytes / link_bandwidth(size, stride, gpu, eff), 0.0)


def _miss(targets, pool, draws: int):
    """C(pool - targets, draws) / C(pool, draws): no draw (without replacement) lands on one of `targets`."""
    miss = np.ones_like(np.asarray(targets, dtype=float))
    for i in range(draws):
        miss = miss * np.maximum(pool - targets - i, 0) / (pool - i)
    return miss


def _hit_probability(experts_per_target, num_experts: int, topk: int, groups: int = 1, group_topk: int = 1):
    """Chance that a token's top-k experts include at least one of a target's ``experts_per_target`` (contiguous)
    experts. Uniform routing: 1 - C(E - L, k) / C(E, k). Group-limited routing (DeepSeek-V3: 8 groups, the best 4
    a token): the k experts are drawn from `group_topk` of `groups` groups, so a target is hit only through its
    groups that are chosen: sum over j chosen of P(j) x (1 - C(pool - j x its experts per group, k) / C(pool, k))."""
    if groups <= 1 or group_topk >= groups:
        return 1.0 - _miss(experts_per_target, num_experts, topk)
    size = num_experts / groups
    pool = group_topk * size
    spans = np.maximum(np.rint(np.asarray(experts_per_target) / size), 1).astype(int)  # groups the target covers
    per_group = np.minimum(experts_per_target, size)
    table = np.array([[math.comb(n, k) for k in range(group_topk + 1)] for n in range(groups + 1)], dtype=float)
    spans = np.minimum(spans, groups)
    hit = np.zeros_like(per_group, dtype=float)
    for j in range(1, group_topk + 1):  # C(spans, j) x C(groups - spans, topk - j) / C(groups, topk), from a table
        chosen_j = table[spans, j] * table[groups - spans, group_topk - j] / math.comb(groups, group_topk)
        hit = hit + chosen_j * (1.0 - _miss(j * per_group, pool, topk))
    return hit


_COPIES: dict[tuple, tuple] = {}  # fused_copies by its inputs (moetune/memo.py)


def fused_copies(num_experts: int, topk: int, ep, etp, gpu: GpuSpec, groups: int = 1, group_topk: int = 1) -> tuple:
    """(NVLink, NIC) token copies per token that DeepEP / HybridEP move in one dispatch or combine.

    Both send a token once per destination rank, whatever number of its experts live there, and expand it to
    experts on arrival (Megatron's _DeepepManager / _HybridEPManager permute after the dispatch and unpermute
    before the combine, token_dispatcher.py); across NVLink domains a token travels once per remote domain and
    is forwarded inside it over NVLink to each rank it needs (DeepEP internode kernels, seeds/004). Memoized: the
    result depends on these inputs only (read-only arrays; the planner's batches repeat them)."""
    key = (num_experts, topk, array_key(ep), array_key(etp), gpu.nvlink_domain, groups, group_topk)
    return remembered(_COPIES, key, lambda: _fused_copies(num_experts, topk, ep, etp, gpu.nvlink_domain, groups,
                                                          group_topk), 512)


def _fused_copies(num_experts: int, topk: int, ep, etp, domain: int, groups: int, group_topk: int) -> tuple:
    m = members_in_domain(ep, etp, domain)
    n = np.maximum(ep / m, 1)
    local = num_experts / np.maximum(ep, 1)
    p_rank = _hit_probability(local, num_experts, topk, groups, group_topk)
    p_domain = _hit_probability(local * m, num_experts, topk, groups, group_topk)
    nvlink = (m - 1) * p_rank + (n - 1) * (m - 1) * p_rank  # direct sends + forwarding inside remote domains
    return nvlink, (n - 1) * p_domain


def fused_nvlink_rate(gpu: GpuSpec, eff: dict, a2a: float, num_sms: int) -> float:
    """Bytes/s one rank's HybridEP kernel moves over NVLink: the link's achievable share, or what its ``num_sms``
    SMs can push (each SM copies at about ``a2a_gbps_per_sm``), whichever is lower. With the HybridEP default of
    16 SMs an NVLink5 GPU (900 GB/s a direction) is SM-bound; Megatron Bridge's perf scripts raise it to 32
    (scripts/performance/utils/overrides.py). 0 SMs: no SM bound (NCCL paths, and DeepEP, whose SM bound no
    published run pins)."""
    link = gpu.nvlink_gbps * 1e9 * eff["nvlink_eff"] * a2a
    return min(link, num_sms * eff["a2a_gbps_per_sm"] * 1e9) if num_sms else link


def _sm_bound(dispatcher: str, num_sms: int) -> int:
    """The SMs that bound a fused dispatcher's NVLink rate: only HybridEP's bound is pinned by published runs (16 vs
    32 SMs on NVLink5); DeepEP's is not, so it is unbounded (0)."""
    return num_sms if dispatcher == "hybridep" else 0


def dispatch_price(dispatcher: str, num_sms: int, gpu: GpuSpec, eff: dict) -> tuple:
    """What the step model reads of a dispatcher and its SMs, as a key: DeepEP and HybridEP send the same copies
    (fused_copies) at the same latency and both cast the routing probabilities to FP32 (compute.fp32_probs_source),
    so they differ only in their a2a_eff and SM-bound NVLink rate. Where a platform's constants make those equal,
    the two price alike and the planner times them once (walls/batch_keys.py): on A100 and Hopper (data/efficiency.toml
    a2a_eff 1.187 for both, and HybridEP's 32 SMs push 467 GB/s, more than an H100's NVLink share of 401), not on
    NVLink5, where those SMs bind. tests/walls/test_batch_keys.py holds the step times equal wherever the prices are."""
    if dispatcher not in ("deepep", "hybridep"):
        return (dispatcher,)
    a2a = eff[f"a2a_eff_{dispatcher}"]
    return ("fused", a2a, fused_nvlink_rate(gpu, eff, a2a, _sm_bound(dispatcher, num_sms)))


def ep_alltoall_parts(tokens_sent, hidden: int, topk: int, num_experts: int, ep, etp, gpu: GpuSpec, eff: dict,
                      dispatcher: str, groups: int = 1, group_topk: int = 1, num_sms: int = 0) -> tuple:
    """(NVLink seconds, NIC seconds, fixed seconds) of one EP all-to-all (a dispatch or a combine) on one rank;
    ``tokens_sent`` before top-k copies; ``num_sms``: SMs of the fused kernels (Knobs.num_sms). The two links run
    concurrently (alltoall_total)."""
    a2a = eff[f"a2a_eff_{dispatcher}"]
    if dispatcher in ("deepep", "hybridep"):
        nv_copies, nic_copies = fused_copies(num_experts, topk, ep, etp, gpu, groups, group_topk)
    else:  # permuted by expert first: one copy per (token, expert) pair
        copies = topk * (ep - 1) / np.maximum(ep, 1)
        remote = cross_domain_fraction(ep, etp, gpu.nvlink_domain)
        nv_copies, nic_copies = copies * (1 - remote), copies * remote
    token_bytes = tokens_sent * BF16 * hidden
    per_copy = tokens_sent * eff["a2a_token_ns"] * 1e-9
    t_intra = nv_copies * (token_bytes / fused_nvlink_rate(gpu, eff, a2a, _sm_bound(dispatcher, num_sms))
                           + per_copy / a2a)
    t_inter = nic_copies * (token_bytes / (gpu.nic_gbps / 8 * 1e9 * eff["nic_eff"]) + per_copy) / a2a
    # NCCL's all-to-all posts one send/recv pair per peer (a setup cost each); the fused kernels reach all at once
    latency = eff["a2a_latency_us"] + (eff["a2a_peer_us"] * (ep - 1) if dispatcher == "alltoall" else 0.0)
    return np.where(ep > 1, t_intra, 0.0), np.where(ep > 1, t_inter, 0.0), np.where(ep > 1, latency * 1e-6, 0.0)


def alltoall_total(parts: tuple):
    """Seconds of one EP all-to-all from its parts: the slower link, plus the fixed cost."""
    t_intra, t_inter, fixed = parts
    return np.maximum(t_intra, t_inter) + fixed


def nvlink_busy(parts: tuple):
    """Share of an EP all-to-all's transfer time its NVLink copies run: 1 inside an NVLink domain, less where the NIC
    share outlasts them (overlap.ep_overlap_hide)."""
    t_intra, t_inter, _ = parts
    return t_intra / np.maximum(np.maximum(t_intra, t_inter), 1e-30)


def p2p_bandwidth(pp, world, gpu: GpuSpec, eff: dict):
    """Bytes/s of a PP send/recv. PP is the outermost group in Megatron's rank order (stride world/PP): NVLink when
    every stage shares one domain (an NVL72 job, or a single node), else the NIC, which the slowest boundary sets the
    pace at (comms.link_bandwidth)."""
    return link_bandwidth(pp, world // np.maximum(pp, 1), gpu, eff)


def p2p_seconds(spec: ModelSpec, ctx, pp, bandwidth):
    """Raw PP send/recv of the stage-boundary activation per micro-batch, forward and backward."""
    nbytes = ctx.tokens * spec.hidden_size * BF16 / ctx.sp_div
    return 2 * nbytes / bandwidth * (pp > 1)
