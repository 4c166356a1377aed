"""The seeds' in-domain alternative to a pick whose EP all-to-all leaves the NVLink domain (seeds/000: keep hot
communication inside the NVLink domain): the same layout at the largest EP whose group stays inside it, predicted, so
a pick that crosses the domain for less than the step model's own error says so."""

from dataclasses import replace
from itertools import takewhile

from moetune.errors import MoetuneError
from moetune.layout.ranks import in_domain_eps, members_in_domain
from moetune.planner.estimate import Estimate
from moetune.planner.moves import knobs_for, rule_errors
from moetune.planner.ranking import NEAR_TIE_MARGIN

# A pick that crosses the NVLink domain for less than this over the in-domain layout is named as a near-tie (and the
# all-to-all is the step model's least-pinned part: the HybridEP SM bound, docs/time.md "Communication")
EP_DOMAIN_NOTE_MARGIN = NEAR_TIE_MARGIN


def in_domain_ep(e: Estimate, found: list | None = None) -> Estimate | None:
    """The estimate at the largest EP (dividing the experts and the job) whose group stays inside the NVLink domain,
    where the pick's EP leaves it; None where it does not, or where no such layout runs without new rule errors
    (`found`: the pick's rule findings where the caller has them)."""
    lay, experts = e.layout, e.model.num_moe_experts
    domain = e.job_domain
    if not experts or int(members_in_domain(lay.ep, lay.etp, domain)) == lay.ep:
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
