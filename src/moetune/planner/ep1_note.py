"""An EP 1 pick among EP > 1 candidates under dropless routing (plan's Routing note, its JSON `ep1_pick`, and report
and explain --plan of the saved plan): EP 1 pays no busiest-rank factor (every rank holds every expert, or a slice of
each under expert TP: Knobs.imbalance_at), while each EP > 1 candidate is charged one, by default the statistic of
layout/imbalance.py, measured at EP 8 alone; and no published run runs EP 1 (track_record.published_ep), so the step
model is unchecked there. The note gives the figures and the two ways to compare: the user's measured factor, or a
pinned EP.
"""

from moetune.layout.imbalance import DROPLESS_IMBALANCE_EP
from moetune.planner.track_record import published_ep


def ep1_pick(result) -> dict | None:
    """The facts behind the note for a plan's result (planner.search.PlanResult), or None where the pick is not EP 1
    under dropless routing on an MoE model, or the search had no EP > 1 candidate (--fix ep=1)."""
    pick = result.results[0] if result.results else None
    if pick is None or pick.layout.ep != 1 or pick.knobs.routing != "dropless" or not pick.model.num_moe_experts:
        return None
    wider = [ep for ep in result.ep_sizes if ep > 1]
    if not wider:
        return None
    shown = next(((rank, r.layout.ep) for rank, r in enumerate(result.results, 1) if r.layout.ep > 1), None)
    return {"etp": pick.layout.etp, "ep_searched": wider,
            "charged": [[ep, pick.knobs.imbalance_at(ep)] for ep in wider],  # by EP, the factor each was charged
            "token_imbalance_set": pick.knobs.token_imbalance, "published_ep": list(published_ep()),
            "first_ep_row": {"rank": shown[0], "ep": shown[1]} if shown else None,
            "compare_ep": shown[1] if shown else _compare_ep(wider)}


def _compare_ep(wider: list[int]) -> int:
    """The EP to pin where no EP > 1 row is shown: the smallest at which the default was measured (the published
    force-balance/dropless pairs' EP, DROPLESS_IMBALANCE_EP) or, below it, the largest searched."""
    return next((ep for ep in wider if ep >= DROPLESS_IMBALANCE_EP), wider[-1])


def _charged_text(d: dict) -> str:
    """What every EP > 1 candidate was charged: the user's factor, or the default's range over the EP sizes searched."""
    (low_ep, low), (high_ep, high) = d["charged"][0], d["charged"][-1]
    if d["token_imbalance_set"] is not None:
        return f"your --token-imbalance {d['token_imbalance_set']:.2f}x"
    top = min(ep for ep, f in d["charged"] if f == high)  # where the default reaches its full value
    up = " and up" if top < high_ep else ""
    if low == high:
        return f"moetune's default {high:.2f}x (EP {top}{up})"
    return f"moetune's default {low:.2f}x (EP {low_ep}) to {high:.2f}x (EP {top}{up})"


def ep1_text(d: dict) -> str:
    """The note, from the JSON (`ep1_pick`)."""
    etp = f" x ETP {d['etp']} (each rank a slice of every expert)" if d["etp"] > 1 else ""
    shown = f" (#{d['first_ep_row']['rank']})" if d["first_ep_row"] else ""
    measured = "" if d["token_imbalance_set"] is not None else "--token-imbalance F (your router's measured factor) or "
    # the published runs' EP sizes as saved with the note (track_record.published_ep), so it says what they hold
    checked = ("published runs at EP 1 check the step model there" if 1 in d.get("published_ep", ())
               else "no published run measures EP 1, so the step model is unchecked there")
    return (f"dropless: #1 runs EP 1{etp} and pays no busiest-rank imbalance, while every EP > 1 candidate is charged "
            f"{_charged_text(d)} the mean; {checked}. Compare: plan with {measured}--fix ep={d['compare_ep']}{shown}"
            + ("; `explain --plan` names the seeds' EP-first layout's figure" if d["etp"] > 1 else ""))


def etp_alone_text(knobs, etp: int) -> str:
    """The note for an EP 1 x ETP pick where the search had no EP > 1 candidate (ep1_pick is None there): what EP > 1
    would have been charged, by the knobs' factor (Knobs.imbalance_at)."""
    full = DROPLESS_IMBALANCE_EP  # where the default reaches its whole factor (layout/imbalance.py busiest_share)
    return (f"dropless on EP 1 x ETP {etp}: each rank holds a slice of every expert, so no rank waits for a busier "
            f"one, while EP > 1 is charged {knobs.imbalance_at(2):.2f}x (EP 2) to {knobs.imbalance_at(full):.2f}x "
            f"(EP {full} and up) the mean at its busiest expert rank (this search had no EP > 1 candidate to weigh "
            "against it)")
