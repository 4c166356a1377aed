"""The seeds' EP-first alternative to a layout with expert tensor parallelism (seeds/000 Parallel Folding: EP before
extra TP for experts; rule scale.prefer_ep_over_etp): the same expert ranks at the largest EP the experts allow,
predicted, and the wall that separates the two, so a configuration that keeps ETP says why it does."""

from dataclasses import replace

from moetune.errors import MoetuneError
from moetune.layout.validate import ep_first_sizes
from moetune.planner.estimate import Estimate


def ep_first(e: Estimate) -> Estimate | None:
    """The estimate with the same EP x ETP expert ranks at the largest EP the experts allow (ETP 1 where they divide
    over all of them), or None without expert TP, where no larger EP exists, or where that layout is illegal."""
    if e.layout.etp == 1 or not e.model.num_moe_experts:
        return None
    ep, etp = ep_first_sizes(e.model.num_moe_experts, e.layout.ep, e.layout.etp)
    if ep == e.layout.ep:
        return None
    try:
        return e.variant(layout=replace(e.layout, ep=ep, etp=etp))
    except (MoetuneError, ValueError):
        return None


def _widest(here: dict, there: dict) -> str:
    return max(here, key=lambda k: abs(there.get(k, 0.0) - here[k]))


def ep_first_note(e: Estimate) -> str | None:
    """One line: the EP-first layout's throughput against this one's, and the wall (and, for communication, the
    collective) whose seconds differ most."""
    alt = ep_first(e)
    if alt is None or not e.time or not alt.time:
        return None
    here, there = e.time, alt.time
    wall = _widest(here["walls"], there["walls"])
    what, seconds = wall, (there["walls"][wall], here["walls"][wall])
    if wall == "communication":  # name the collective
        a, b = here["exposed_collectives"], there["exposed_collectives"]
        key = _widest(a, b)
        what, seconds = f"exposed {key}", (b.get(key, 0.0), a[key])
    gain = there["tokens_per_s_per_gpu"] / here["tokens_per_s_per_gpu"] - 1
    fits = "" if alt.fits else ", and does not fit"
    return (f"expert TP{e.layout.etp}: the seeds' EP-first layout over the same ranks ({alt.layout.short()}, rule "
            f"scale.prefer_ep_over_etp) predicts {there['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU ({100 * gain:+.1f}%)"
            f"{fits}; its {what} takes {seconds[0]:.2f} s a step against {seconds[1]:.2f} s here")
