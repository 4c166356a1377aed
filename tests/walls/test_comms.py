"""The EP all-to-all (walls/comms.py): NCCL's alltoall pays a setup per peer and moves a copy per expert; the
fused DeepEP / HybridEP kernels pay one launch and send a token once per destination rank (checked against a
simulation of uniform top-k routing)."""

import math

import numpy as np
import pytest

from moetune.layout.ranks import job_gpu
from moetune.specs.hardware import load_gpu
from moetune.walls.comms import alltoall_total, ep_alltoall_parts, fused_copies, nvlink_busy
from moetune.walls.efficiency import efficiency


def ep_alltoall_seconds(*args, **kwargs):
    """Seconds of one EP all-to-all on one rank."""
    return alltoall_total(ep_alltoall_parts(*args, **kwargs))


@pytest.mark.parametrize("ep", [8, 64])
def test_alltoall_pays_per_peer_fused_kernels_do_not(ep):
    gpu, eff = load_gpu("gb200"), efficiency("gb200")
    empty = {d: float(ep_alltoall_seconds(0.0, 7168, 8, 256, ep, 1, gpu, eff, d)) for d in ("alltoall", "hybridep")}
    assert empty["hybridep"] == pytest.approx(eff["a2a_latency_us"] * 1e-6)
    assert empty["alltoall"] == pytest.approx((eff["a2a_latency_us"] + eff["a2a_peer_us"] * (ep - 1)) * 1e-6)


def _route(num_experts, topk, rng, tokens, groups=1, group_topk=1):
    """Top-k distinct experts per token, uniform; with group-limited routing, uniform inside `group_topk` groups
    drawn uniformly (DeepSeek-V3 keeps the groups whose best two experts score highest, then the top-k inside
    them: with force-balanced, random logits both choices are close to uniform)."""
    size = num_experts // groups
    chosen = np.argsort(rng.random((tokens, groups)), axis=1)[:, :group_topk]
    pool = (chosen[:, :, None] * size + np.arange(size)).reshape(tokens, -1)
    pick = np.argsort(rng.random(pool.shape), axis=1)[:, :topk]
    return np.take_along_axis(pool, pick, axis=1)


def _simulated_copies(num_experts, topk, ep, domain, rng, tokens=20000, groups=1, group_topk=1):
    """Monte Carlo: route tokens (_route); count distinct destination ranks in the sender's domain (NVLink sends),
    distinct remote domains (NIC sends), and ranks reached inside remote domains other than the one a token lands
    on (NVLink forwarding)."""
    local = num_experts // ep
    members = min(ep, domain)
    ranks = _route(num_experts, topk, rng, tokens, groups, group_topk) // local
    nvlink = nic = 0
    for row in ranks:
        hit = set(row.tolist())
        own = {r for r in hit if r // members == 0} - {0}  # sender is rank 0 of domain 0
        remote_domains = {r // members for r in hit} - {0}
        nvlink += len(own)
        nic += len(remote_domains)
        for d in remote_domains:  # lands on the domain's rank with the sender's local index (0), then forwards
            nvlink += len({r for r in hit if r // members == d} - {d * members})
    return nvlink / tokens, nic / tokens


@pytest.mark.parametrize(("model_experts", "topk", "ep", "gpu_key", "groups"), [
    (128, 8, 8, "gb200", (1, 1)),    # Qwen3-30B-A3B EP8 in one NVL72 rack: 16 experts a rank, many shared
    (256, 8, 64, "gb200", (1, 1)),   # EP64 in one rack: 4 experts a rank, few shared
    (256, 8, 64, "h100", (1, 1)),    # EP64 over eight 8-GPU nodes: NIC once per node, NVLink forwarding
    (128, 6, 16, "b200", (1, 1)),    # top-6 over two 8-GPU nodes
    (256, 8, 64, "h100", (8, 4)),    # DeepSeek-V3's 4-of-8 groups: a group is one node, at most 4 nodes a token
    (256, 8, 32, "gb200", (8, 4)),   # DeepSeek-V3 EP32 in one rack: a rank inside one group
    (160, 6, 16, "h100", (8, 3)),    # DeepSeek-V2: 3 of 8 groups of 20 experts, a node spans 4 groups
])
def test_fused_dispatch_sends_a_token_once_per_destination(model_experts, topk, ep, gpu_key, groups):
    gpu = job_gpu(load_gpu(gpu_key), ep)  # a job of one EP group: its NVLink domain as that job sees it
    nvlink, nic = fused_copies(model_experts, topk, ep, 1, gpu, *groups)
    sim_nv, sim_nic = _simulated_copies(model_experts, topk, ep, gpu.nvlink_domain, np.random.default_rng(0),
                                        groups=groups[0], group_topk=groups[1])
    assert float(nvlink) == pytest.approx(sim_nv, rel=0.03)
    assert float(nic) == pytest.approx(sim_nic, rel=0.03, abs=1e-9)


def test_alltoall_sends_one_copy_per_expert_fused_kernels_fewer():
    """Qwen3-30B-A3B-sized tokens at EP8 in one rack: NCCL's alltoall moves top-k copies, the fused kernels one
    per rank hit (16 experts a rank, 8 of 128 chosen: about 4.7 ranks of 7 peers), plus a cost per message."""
    gpu, eff = load_gpu("gb200"), {**efficiency("gb200"), "a2a_token_ns": 0.0, "a2a_peer_us": 0.0}
    for d in ("alltoall", "deepep", "hybridep"):
        eff[f"a2a_eff_{d}"] = 1.0
    t = {d: float(ep_alltoall_seconds(16384.0, 2048, 8, 128, 8, 1, gpu, eff, d)) - eff["a2a_latency_us"] * 1e-6
         for d in ("alltoall", "hybridep")}
    ranks_hit = 7 * (1 - math.comb(112, 8) / math.comb(128, 8))
    assert t["hybridep"] / t["alltoall"] == pytest.approx(ranks_hit / 7, rel=1e-6)
    eff["a2a_token_ns"] = 5.0
    t_msg = float(ep_alltoall_seconds(16384.0, 2048, 8, 128, 8, 1, gpu, eff, "hybridep")) - eff["a2a_latency_us"] * 1e-6
    assert t_msg - t["hybridep"] == pytest.approx(16384 * ranks_hit * 5e-9, rel=1e-6)


def test_fused_kernels_are_bound_by_their_sms_on_nvlink5_not_on_h100():
    """A DeepEP/HybridEP kernel moves at most num_sms x a2a_gbps_per_sm: HybridEP's default 16 SMs cannot fill an
    NVLink5 GPU's 900 GB/s, so the same all-to-all takes longer than at Bridge's tuned 32; a large SM count
    leaves the link as the bound; NCCL's alltoall ignores the SM count."""
    gpu, eff = load_gpu("gb200"), efficiency("gb200")
    args = (4096 * 8, 2688, 6, 128, 8, 1, gpu, eff)
    t = {sms: float(ep_alltoall_seconds(*args, "hybridep", num_sms=sms)) for sms in (16, 32, 1000, 2000)}
    assert t[16] > t[32] >= t[1000]
    assert t[1000] == t[2000]  # the link binds
    assert float(ep_alltoall_seconds(*args, "alltoall", num_sms=16)) == float(ep_alltoall_seconds(*args, "alltoall"))
    link = gpu.nvlink_gbps * eff["nvlink_eff"] * eff["a2a_eff_hybridep"]
    assert 16 * eff["a2a_gbps_per_sm"] < link  # the published 16-SM runs on GB200 are SM-bound


def test_fused_sm_bound_scales_the_byte_time_only():
    """Halving the SMs of an SM-bound kernel doubles the byte term; the per-token message cost is unchanged.
    DeepEP's SM count is not modelled (no published run pins it)."""
    gpu = load_gpu("b200")
    eff = {**efficiency("b200"), "a2a_gbps_per_sm": 10.0, "a2a_latency_us": 0.0}
    args = (8192, 4096, 8, 128, 8, 1, gpu, eff, "hybridep")
    bytes_only = {**eff, "a2a_token_ns": 0.0}
    t8, t16 = (float(ep_alltoall_seconds(*args[:7], bytes_only, "hybridep", num_sms=s)) for s in (8, 16))
    assert t8 == pytest.approx(2 * t16)
    with_tokens = [float(ep_alltoall_seconds(*args, num_sms=s)) for s in (8, 16)]
    assert with_tokens[0] - with_tokens[1] == pytest.approx(t8 - t16)
    deepep = [float(ep_alltoall_seconds(*args[:8], "deepep", num_sms=s)) for s in (8, 16)]
    assert deepep[0] == deepep[1]


def test_a_straddling_ep_group_pays_the_nic():
    """EP40 tiles an 80-GPU job's 40-rank domains (20 nodes: segments of 10) but straddles a 240-GPU job's 60-rank
    ones (ranks 40-79 split 20 + 20): the same all-to-all then sends half its copies over the NIC."""
    eff = efficiency("gb200")
    tiled, straddled = (float(ep_alltoall_seconds(16384, 5120, 8, 160, 40, 1, job_gpu(load_gpu("gb200"), w), eff,
                                                  "alltoall")) for w in (80, 240))
    assert job_gpu(load_gpu("gb200"), 80).nvlink_domain == 40
    assert straddled > 2 * tiled


def test_nvlink_runs_the_whole_all_to_all_only_inside_a_domain():
    """Qwen3-235B-A22B's dispatch (2,048 tokens a rank at TP2, hidden 4096, top-8 of 128): EP8 on H100 stays in the
    node, so its NVLink copies run the whole all-to-all; EP32 (R014's layout, 4 nodes) sends 3/4 of its copies over
    the 50 GB/s NIC, which outlasts the NVLink quarter: NVLink is busy for under a fifth of it. On an NVL72 (GB200
    EP64) everything is NVLink again."""
    def busy(gpu_key, ep, dispatcher="alltoall"):
        gpu = job_gpu(load_gpu(gpu_key), 256)
        return float(nvlink_busy(ep_alltoall_parts(2048, 4096, 8, 128, ep, 1, gpu, efficiency(gpu_key), dispatcher)))

    assert busy("h100", 8) == 1.0
    assert busy("h100", 32) < 0.2
    assert busy("h100", 32, "deepep") < 0.5
    assert busy("gb200", 64, "hybridep") == 1.0


def _a2a_raw(model, lay_kw, dispatcher, gpus=8, **knobs):
    from moetune.layout.knobs import Knobs
    from moetune.layout.layout import Layout
    from moetune.layout.validate import Workload
    from moetune.planner.estimate import estimate
    from moetune.specs.registry import load_model
    e = estimate(load_model(model), load_gpu("h100"), Layout(world_size=gpus, **lay_kw),
                 Workload(seq_length=4096, micro_batch_size=1, global_batch_size=gpus * 8),
                 Knobs(precision="bf16", dispatcher=dispatcher, routing="force-balance", **knobs))
    return e.time["collectives"]["ep_alltoall"]


def test_expert_tp_gathers_every_rank_s_routed_tokens():
    """EP1 x ETPn inside one NVLink domain: each rank routes the same tokens whatever n, and the expert-TP all-gather
    hands it the other n-1 ranks' (moe/token_dispatcher.py: gather_from_sequence_parallel_region over the expert TP
    group), so its traffic grows as n-1: 7 at ETP8 against 1 at ETP2 (it had been charged 7/8 against 1/2)."""
    etp2, etp8 = (_a2a_raw("mixtral-8x7b", dict(ep=1, etp=n), "alltoall") for n in (2, 8))
    assert etp8 / etp2 == pytest.approx(7, rel=0.01)


def test_the_allgather_dispatcher_gathers_every_token_of_the_ep_group():
    """MoEAllGatherTokenDispatcher all-gathers all tokens over ETP x EP whatever the top-k: EP8 and ETP8 move the
    same, and with top-2 of 8 experts it moves 7 tokens a token where alltoall moves 2 x 7/8 copies."""
    ep8, etp8 = (_a2a_raw("mixtral-8x7b", lay, "allgather") for lay in (dict(ep=8), dict(ep=1, etp=8)))
    assert ep8 == pytest.approx(etp8)
    gather, alltoall = (_a2a_raw("mixtral-8x7b", dict(ep=8), d) for d in ("allgather", "alltoall"))
    # top-2 of 8 experts: alltoall sends 2 x 7/8 copies a token, the gather 7 tokens, 4x the bytes
    assert 2.5 < gather / alltoall < 4.5


def _p2p_raw(gpu_key, gpus, pp):
    from moetune.layout.knobs import Knobs
    from moetune.layout.layout import Layout
    from moetune.layout.validate import Workload
    from moetune.planner.estimate import estimate
    from moetune.specs.registry import load_model
    e = estimate(load_model("qwen3-30b-a3b"), load_gpu(gpu_key), Layout(world_size=gpus, pp=pp, ep=4),
                 Workload(seq_length=4096, micro_batch_size=1, global_batch_size=gpus * 8),
                 Knobs(precision="bf16", dispatcher="alltoall", routing="force-balance"))
    return e.time["collectives"]["pp_p2p"]


def test_pp_send_recv_rides_nvlink_only_when_every_stage_shares_the_domain():
    """PP is the outermost group (stride world/PP): 64 GB200 in one NVL72 segment pass stage boundaries over NVLink,
    64 H100 over the NIC; the same bytes, so the time ratio is the ratio of the two links."""
    gb200, eff_gb = load_gpu("gb200"), efficiency("gb200")
    nvlink = _p2p_raw("gb200", 64, 4)
    nic = _p2p_raw("gb200", 256, 4)  # 256 GB200: four 64-GPU segments, one stage each
    assert nic / nvlink == pytest.approx(gb200.nvlink_gbps * 1e9 * eff_gb["nvlink_eff"]
                                         / (gb200.nic_gbps / 8 * 1e9 * eff_gb["nic_eff"]), rel=1e-6)
    assert _p2p_raw("h100", 8, 2) < _p2p_raw("h100", 16, 2)  # one HGX node against two
