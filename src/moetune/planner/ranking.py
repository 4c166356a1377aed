"""The seeds' order among candidates the search found: the 1% tie bands, what decides inside one, the margin CP
must beat at short sequences, and the delayed wgrad a result keeps only where it pays."""

from dataclasses import replace

import numpy as np

from moetune.layout.cp_sizing import LONG_CONTEXT
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.planner.estimate import Estimate


def bound(steps: list, keep: int) -> float:
    """Step seconds past which a candidate cannot make the final list: 2% slower than `keep` others (of the listed
    candidates' `steps`) puts it in a later 1% bin than all of them (the ranking below), so it never outranks them."""
    if len(steps) < keep:
        return np.inf
    return 1.02 * float(np.partition(steps, keep - 1)[keep - 1])


def within(step: float, fastest: float) -> int:
    """The 1% band of the fastest a step falls in: 0 for [1, 1.01) of it, 1 for [1.01, 1.02), ..."""
    return int(np.floor(100 * np.log(step / fastest) + 1e-9))


def rank_key(step: float, pref: tuple, fastest: float) -> tuple:
    """The list's order: the 1% band of the fastest, the seeds' preferences inside it, then the faster (two candidates
    no preference tells apart, PP16 at VPP3 and VPP6, had kept the order the search found them in, the faster
    second)."""
    return within(step, fastest), pref, step


# Below the long-context regime a layout with CP > 1 ranks as if this much slower: the seeds add CP "for long context
# once sequence length makes attention memory dominant" (seeds/000 Phase 2) and start it at seq/4096 (seeds/002),
# and no published run under 16k tokens uses it; a gain smaller than the step model's own error (held-out median
# 3.9%, docs/time.md) is no reason to leave that order. Results show their own predicted speed.
CP_SHORT_MARGIN = 1.05
# A predicted gain below this is a near-tie for what plan names beside its pick (the optimizer-offload alternative,
# search.OFFLOAD_NOTE_GAIN; an in-domain EP, ep_domain.EP_DOMAIN_NOTE_MARGIN): the step model's held-out median error
# is 3.9% (docs/time.md), and the memory estimate's own error is 3% (moves.TIGHT_SHARE)
NEAR_TIE_MARGIN = 0.03
# The least predicted change moetune names as a gain or an effect (a Retune move, what a compound move adds to its
# part, a pipeline re-split, one setting's share of the difference between two configs): half a percent, under which
# a move only reshuffles the step model's own rounding (micro-batches, the layer split), not a wall
SMALLEST_GAIN = 0.005


def cp_weight(cp, seq: int):
    """The ranking weight of a candidate's CP (scalar or array): CP_SHORT_MARGIN for CP > 1 below LONG_CONTEXT."""
    return np.where(np.asarray(cp) > 1, CP_SHORT_MARGIN, 1.0) if seq < LONG_CONTEXT else np.ones_like(cp, float)


# What each place of a preference() tuple prefers, in its order: plan names the one that decided a near-tie against a
# faster candidate (planner/near_tie.py)
PREFERENCES = ("memory_margin", "model_parallelism", "recompute", "activation_offload", "optimizer_offload",
               "default_dispatcher", "data_parallel", "short_context_cp", "tp", "expert_tp", "ep")


def preference(lay: Layout, k: Knobs, dispatcher: str | None, seq: int, tight: bool = False) -> tuple:
    """Seeds' order among near-equal candidates: one that leaves the memory estimate's own error free (seeds/001
    "start with a configuration that fits reliably before chasing throughput"; moves.TIGHT_SHARE), less model
    parallelism, lighter recompute (none, then selective with fewer modules, then full: a selective set of more
    modules had ranked as light as one of fewer, Qwen3-30B-A3B's layernorm + moe_act above moe_act alone), no
    offload, the layout's own default dispatcher (`dispatcher`: seeds/004
    mapping, data/platform_defaults.toml, narrowed by defaults.default_dispatcher to one that runs on the layout;
    None: the search runs no default there, and no candidate of the layout is ranked down), then, below the
    long-context regime, less CP (seeds/000 Phase 2: CP once the sequence makes attention memory dominate), less
    TP, less expert TP, more EP (seeds/000: EP before extra TP for the experts; a pick at EP2 ETP2 had stood 0.86% ahead
    of EP4 ETP1 with the rule scale.prefer_ep_over_etp warning on it)."""
    level = {"none": 0, "selective": 1, "full": 2}[k.recompute]
    recompute = level, len(k.effective_modules) if level == 1 else 0
    return (tight, lay.tp * lay.cp * lay.pp, recompute, bool(k.offload_modules), k.optimizer_offload_fraction,
            dispatcher is not None and k.dispatcher != dispatcher, -lay.dp, lay.cp if seq < LONG_CONTEXT else 0,
            lay.tp, lay.etp, -lay.ep)


# Least share of the step delay_wgrad_compute must save to stay on in a result: the seeds call it optional and their
# one measurement a 0.35% gain (seeds/003 § Measured Short-Run Caveat: 31.31 s -> 31.20 s), while it brings
# constraints of its own (rules ep_overlap.delay_wgrad_*: graph scopes, gradient-accumulation fusion).
DELAY_WGRAD_MIN_GAIN = 0.001


def without_idle_delay_wgrad(e: Estimate) -> Estimate:
    """A result with delay_wgrad_compute turned back off where it hides no more all-to-all (the exchange already hides
    under the overlapped compute): the search pairs it with EP overlap (knob_grid._delay_wgrad), the result keeps it
    only where it pays."""
    if not e.knobs.delay_wgrad:
        return e
    off = e.variant(knobs=replace(e.knobs, delay_wgrad=False))
    return off if off.time["step_seconds"] <= e.time["step_seconds"] * (1 + DELAY_WGRAD_MIN_GAIN) else e
