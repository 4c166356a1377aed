"""Timing each knob set of a search pass (search_grid): one batch per knob set over the pass's candidates, keeping
the rows that fit (planner/search_state.py Search.fits), timing them, and letting the fastest join the running best
list (Search.best), which bounds what later knob sets may add (ranking.bound). Below the long-context regime it also
collects the fastest CP > 1 candidates for plan's short-context note (Search.short_cp).
"""

import numpy as np

from moetune.layout.knobs import Knobs
from moetune.planner.ranking import bound, cp_weight, preference
from moetune.planner.search_state import Search
from moetune.walls.batch import batch_step_seconds, whole_layer_balanced
from moetune.walls.batch_keys import time_key


def _without_recompute(knobs: Knobs) -> tuple:
    return (knobs.precision, knobs.dispatcher, knobs.cuda_graph_scope, knobs.ep_overlap, knobs.delay_wgrad,
            knobs.tp_comm_overlap, knobs.routing, knobs.optimizer_offload_fraction, knobs.main_grads_fp32,
            knobs.overlap_grad_reduce, knobs.overlap_param_gather, knobs.fp8_output_proj, knobs.cp_comm_type,
            knobs.hcp_a2a_size, knobs.quantized_params)

def _groups(items, key) -> list[list]:
    out: dict[tuple, list] = {}
    for item in items:
        out.setdefault(key(item), []).append(item)
    return list(out.values())


def search_grid(s: Search, batch, grid: list[Knobs]) -> None:
    """Time every knob set of the grid where it fits."""
    fits_plain: dict[tuple, np.ndarray] = {}  # other knobs -> rows that fit with no recompute at all
    for group in _groups(sorted(grid, key=lambda k: k.recompute != "none"), time_key):  # no recompute first
        timed = {}
        for knobs in group:
            fits, roomy = s.fits(batch, knobs)
            plain_key = _without_recompute(knobs)
            if knobs.recompute == "none":
                fits_plain[plain_key] = roomy
                timed[knobs] = fits, roomy
            else:  # recompute only adds time: where the same knobs fit roomily without it, this set cannot win
                timed[knobs] = fits & ~fits_plain.get(plain_key, np.zeros_like(fits)), roomy
        _time(s, batch, timed)


def _time(s: Search, batch, timed: dict[Knobs, np.ndarray]) -> None:
    """Step seconds of each knob set on its rows (one shared subset per group); the fastest join `s.best`."""
    union = np.logical_or.reduce([mask for mask, _ in timed.values()])
    if not union.any():
        return
    rows = np.nonzero(union)[0]
    sub = batch.subset(rows)  # time only what fits under some knob set of the group
    resplit = (sub.fields.pp[:, 0] > 1) & s.resplit
    for knobs, (mask, roomy) in timed.items():
        walls = batch_step_seconds(s.spec, sub, s.wl.seq_length, s.wl.global_batch_size, knobs, s.gpu, s.eff)
        # ranked as CP_SHORT_MARGIN slower where CP > 1 below the long-context regime (ranking.cp_weight)
        step = np.where(mask[rows], walls["step"] * cp_weight(sub.fields.cp[:, 0], s.wl.seq_length), np.inf)
        weight = step / walls["step"]  # the CP weight the ranking put on each step (inf where it does not fit)
        # the best a re-split could make it; inf where it does not fit (min(balanced, inf) would let it take a place)
        reach = np.where(resplit & np.isfinite(step), _within(walls["balanced"], step, weight), step)
        # tightened to whole layers where that first bound keeps it in reach of the list (the rest stay out either way)
        near = np.nonzero(resplit & np.isfinite(step) & (reach <= s.bound))[0]
        cp_near = _cp_first(s, sub, walls, resplit & mask[rows]) if s.short_cp else near[:0]
        tight = _whole_layers(s, sub, walls, _union(near, cp_near, len(step)))  # once for both readers
        if len(near):
            reach[near] = _within(tight[near], step[near], weight[near])
        if s.short_cp:
            _short_cp_best(s, _cp_reach(s, walls, cp_near, tight), mask[rows], sub, knobs)
        keep = min(s.kept, len(step))
        # the fastest as they are, and those a re-split could make fastest (neither crowds the other out)
        for i in _union(np.argpartition(step, keep - 1)[:keep], np.argpartition(reach, keep - 1)[:keep], len(step)):
            if np.isfinite(step[i]) and reach[i] <= s.bound:
                lay = sub.layout(i)
                s.best.append((float(step[i]), preference(lay, knobs, s.dispatcher(lay), s.wl.seq_length,
                                                           not roomy[rows[i]]), lay,
                               int(sub.mbs[i, 0]), knobs, float(reach[i])))
        s.bound = bound(s.best, s.kept)


def _union(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """np.union1d of two arrays of row indices below `n` (ascending, each once), by a mask: no sort, and not
    np.unique, which asks np.ma.is_masked, whose first call imports numpy.ma (~10 ms of a cold plan)."""
    mask = np.zeros(n, bool)
    mask[a] = mask[b] = True
    return np.flatnonzero(mask)


# CP candidates kept for the short-context note: each costs a re-split and an estimate when the note is weighed
SHORT_CP_KEPT = 8
# CP candidates the loose first bound ranks first, tightened to whole layers before the note keeps its few (_cp_reach).
# The 4 is arbitrary, not measured: a larger pool asks whole_layer_balanced of more rows per knob set on the search's
# hot path; a smaller one misses more candidates whose whole-layer bound ranks among the kept but whose loose one falls
# below the pool, as some do (GLM-4.5-Air on 48 H200 at 12k: 67 of 132 knob sets; yet its note, and that of 7 other
# searches, came out the same with every CP row tightened)
SHORT_CP_POOL = 4 * SHORT_CP_KEPT


def _within(balanced: np.ndarray, step: np.ndarray, weight: np.ndarray | None = None) -> np.ndarray:
    """The step a re-split could reach: the balanced step (walls["balanced"], or _whole_layers') under the CP weight
    the ranking put on `step` (ranking.cp_weight; None: unweighted), never above `step`."""
    return np.minimum(balanced if weight is None else balanced * weight, step)


def _whole_layers(s: Search, sub, walls: dict, rows) -> np.ndarray:
    """walls["balanced"] tightened to whole layers (walls/batch.py whole_layer_balanced) at `rows`, NaN elsewhere."""
    tight = np.full(len(walls["step"]), np.nan)
    if len(rows):
        tight[rows] = whole_layer_balanced(sub, s.wl.global_batch_size, walls, rows)
    return tight


def _loose_reach(s: Search, walls: dict) -> np.ndarray:
    return _within(walls["balanced"], walls["step"]) if s.resplit else walls["step"].copy()


def _cp_first(s: Search, sub, walls: dict, resplit) -> np.ndarray:
    """The SHORT_CP_POOL CP > 1 candidates the first bound ranks first, so that whole layers may reorder them before
    the few the note keeps are taken."""
    first = np.where(resplit & (sub.fields.cp[:, 0] > 1), _loose_reach(s, walls), np.inf)
    near = np.argsort(first)[:SHORT_CP_POOL]
    return near[np.isfinite(first[near])]


def _cp_reach(s: Search, walls: dict, cp_near, tight) -> np.ndarray:
    """The unweighted step a re-split could reach, for the short-context note: the first bound, tightened to whole
    layers for the CP > 1 candidates it ranks first (_cp_first; a loose first bound had filled the kept few with PP6
    splits that whole layers leave slower than the pick, crowding out the PP3 one that beats it)."""
    reach = _loose_reach(s, walls)
    reach[cp_near] = _within(tight[cp_near], walls["step"][cp_near])
    return reach


def _short_cp_best(s: Search, raw, fits, sub, knobs: Knobs, keep: int = SHORT_CP_KEPT) -> None:
    """Keep the `keep` fastest fitting CP > 1 candidates by their unweighted step (the best a re-split could make
    each, where the search re-splits), below the long-context regime (Search.short_cp)."""
    cp = sub.fields.cp[:, 0] > 1
    if not cp.any():
        return
    raw = np.where(fits & cp, raw, np.inf)
    worst = s.short_cp_best[-1][0] if len(s.short_cp_best) == keep else np.inf
    first = np.argpartition(raw, keep - 1)[:keep] if len(raw) > keep else np.arange(len(raw))
    for i in first:
        if raw[i] < worst:
            s.short_cp_best.append((float(raw[i]), sub.layout(int(i)), int(sub.mbs[i, 0]), knobs))
    s.short_cp_best = sorted(s.short_cp_best, key=lambda x: x[0])[:keep]
