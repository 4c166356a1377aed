"""The seeds' in-domain alternative to a pick whose EP all-to-all leaves the NVLink domain (seeds/000: keep hot
communication inside the NVLink domain): the same layout at the largest EP whose group stays inside it, predicted, so
a pick that crosses the domain for less than the step model's own error says so; and, where Slurm segments leave
each rack partly used, why the job's domain is smaller than the rack a hot group crosses."""

from dataclasses import replace
from itertools import takewhile

from moetune.errors import MoetuneError
from moetune.layout.ranks import ep_group_in_domain, groups_leaving_domain, in_domain_eps
from moetune.planner.estimate import Estimate
from moetune.planner.moves import knobs_for
from moetune.planner.ranking import NEAR_TIE_MARGIN
from moetune.planner.rule_findings import rule_errors

# A pick that crosses the NVLink domain for less than this over the in-domain layout is named as a near-tie (and the
# all-to-all is the step model's least-pinned part: the HybridEP SM bound, docs/time.md "Communication")
EP_DOMAIN_NOTE_MARGIN = NEAR_TIE_MARGIN


def in_domain_ep(e: Estimate, found: list | None = None) -> Estimate | None:
    """The estimate at the largest EP (dividing the experts and the job) whose group stays inside the NVLink domain,
    where the pick's EP leaves it; None where it does not, or where no such layout runs without new rule errors
    (`found`: the pick's rule findings where the caller has them)."""
    lay, experts = e.layout, e.model.num_moe_experts
    domain = e.job_domain
    if not experts or ep_group_in_domain(lay.ep, lay.etp, domain):
        return None
    broken = set(rule_errors(e, found))
    smaller = in_domain_eps(lay.ep - 1, lay.etp, domain, experts, lay.world_size, lay.pp)
    for ep in takewhile(lambda size: size > 1, smaller):
        try:
            layout = replace(lay, ep=ep)
            alt = e.variant(layout=layout, knobs=knobs_for(e, layout))  # a defaulted dispatcher re-defaulted
        except (MoetuneError, ValueError):
            continue
        if alt.fits and not set(rule_errors(alt)) - broken:
            return alt
    return None


def ep_domain_note(e: Estimate, found: list | None = None) -> dict | None:
    """The in-domain alternative where it comes within EP_DOMAIN_NOTE_MARGIN of the pick: its layout, prediction and
    the pick's margin over it."""
    alt = in_domain_ep(e, found)
    if alt is None:
        return None
    margin = e.time["tokens_per_s_per_gpu"] / alt.time["tokens_per_s_per_gpu"] - 1
    if margin > EP_DOMAIN_NOTE_MARGIN:
        return None
    return {"layout": alt.layout.short(), "ep": alt.layout.ep, "tokens_per_s_per_gpu": alt.time["tokens_per_s_per_gpu"],
            "peak_gib": alt.peak_bytes / 2**30, "pick_margin": margin}


def ep_domain_text(e: Estimate, near: dict) -> str:
    """One line for ep_domain_note's result. The in-domain layout can predict faster (a user's layout, or a pick
    under --fix ep): then the seeds' choice is the faster one too, not a near-tie the pick wins."""
    alt = (f"{near['layout']}, whose all-to-all stays inside it ({near['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, "
           f"{near['peak_gib']:.1f} GiB)")
    if near["pick_margin"] < 0:
        gain = near["tokens_per_s_per_gpu"] / e.time["tokens_per_s_per_gpu"] - 1
        return (f"EP{e.layout.ep} leaves the NVLink domain, and {alt}, predicts {gain:+.1%} over it: the seeds' "
                "choice, hot communication inside the domain (seeds/000 Phase 2), is the faster one here too")
    return (f"EP{e.layout.ep} leaves the NVLink domain for {near['pick_margin']:+.1%} over {alt}: less than the step "
            "model's own error. The seeds would keep hot communication inside the domain (seeds/000 Phase 2); "
            "moetune ranks by its prediction, which puts the pick ahead: measure both before choosing")


# The groups whose traffic is hot (seeds/000 Phase 2: keep TP, CP and the EP all-to-all inside the fast interconnect);
# DP's gradient reduction overlaps the backward
HOT_GROUPS = ("tp", "cp", "ep")


def segment_note(e: Estimate) -> str | None:
    """Where a job of several nodes sees a smaller NVLink domain than its GPU's rack: Megatron Bridge's launcher splits
    it into equal Slurm segments, each in one rack (layout/ranks.py job_nvlink_domain), so a rack holds only part of
    the job's ranks; None where the domain is the GPU's own (HGX nodes, whole racks)."""
    lay = e.layout
    if e.job_domain == e.gpu.nvlink_domain or lay.world_size <= e.gpu.gpus_per_node:  # one node: no split
        return None
    nodes = e.job_domain // e.gpu.gpus_per_node
    return (f"{lay.world_size} GPUs in Slurm segments of {nodes} node{'s' if nodes > 1 else ''}: "
            f"{e.job_domain} consecutive ranks share an NVLink domain (Megatron Bridge's launcher, "
            "scripts/performance/utils/executors.py)")


def partial_domain_note(e: Estimate) -> str | None:
    """segment_note where the job's NVLink domains are partial racks and a hot group leaves one: its traffic crosses
    between racks over the network, at a domain the rack's size alone does not show (96 GB200s: two racks of 48, not
    72 + 24); None elsewhere (whole racks, or no hot group crossing), so the existing notes stand alone there."""
    note = segment_note(e)
    if note is None:
        return None
    leaving = groups_leaving_domain(e.layout, e.job_domain)
    hot = [f"{g.upper()}{getattr(e.layout, g)}" for g in HOT_GROUPS if leaving.get(g, 0) > 0]
    if not hot:
        return None
    return (f"{note}: each rack is a partial domain ({e.job_domain} of its {e.gpu.nvlink_domain} GPUs), and "
            f"{' and '.join(hot)} cross{'es' if len(hot) == 1 else ''} between racks over the network")
