"""Timing each knob set of a search pass (search_grid): one batch per knob set over the pass's candidates, keeping
the rows that fit (planner/search_state.py Search.fits), timing them, and letting the fastest join the running best
list (Search.best), which bounds what later knob sets may add (ranking.bound). Below the long-context regime it also
collects the fastest CP > 1 candidates for plan's short-context note (Search.short_cp).
"""

from dataclasses import fields
from operator import attrgetter

import numpy as np

from moetune.layout.knobs import Knobs
from moetune.planner.ranking import bound, cp_weight, preference
from moetune.planner.search_state import Search
from moetune.walls.batch import batch_step_seconds, whole_layer_balanced
from moetune.walls.batch_keys import time_key

# Every field of a knob set but these: what a recompute set shares with its no-recompute twin (twins)
_OTHER_FIELDS = tuple(f.name for f in fields(Knobs) if f.name not in ("recompute", "recompute_modules"))
_OTHERS = attrgetter(*_OTHER_FIELDS)  # read in one call: the tuple of those fields, in their order


def _without_recompute(knobs: Knobs) -> tuple:
    """The knob set less its recompute, every other field read: a hand-kept list of fields (it had 14 of Knobs' 35)
    would pair a recompute set with a twin differing in a field it left out once the grid varied one, whose floor
    and roomy rows then stood for another knob set's."""
    return _OTHERS(knobs)


def _groups(items, key) -> list[list]:
    out: dict[tuple, list] = {}
    for item in items:
        out.setdefault(key(item), []).append(item)
    return list(out.values())


# A recompute set's step is at least its no-recompute twin's (the same knobs but recompute none) less this share, so
# a set whose every fitting row that floor already leaves off the list is weighed by the floor alone
# (_Floors.bounds_out).
# Recompute adds GPU work, but the step model is not monotone in it: the work it adds can hide more of the EP
# all-to-all, and the bubble waits through the slowest rank's own hidden all-to-all, so where a recompute moves the
# slowest rank onto a dense stage with none the bubble shrinks. Measured over 18 plans of 18 models
# (bench/recompute_floor.py): at most 0.94% (ERNIE-4.5-300B on 96 H100, PP12, 'mlp' recompute on the dense first
# stage), else under 0.03%; the margin is three times that largest.
FLOOR_SLACK = 0.03


def twins(grid) -> list[tuple[Knobs, Knobs]]:
    """Each recompute set of `grid` with its no-recompute twin (the same knobs, recompute none) where it holds one."""
    plain = {_without_recompute(k): k for k in grid if k.recompute == "none"}
    return [(k, plain[key]) for k in grid if k.recompute != "none" and (key := _without_recompute(k)) in plain]


def search_grid(s: Search, batch, grid: list[Knobs], bounded: bool = True) -> None:
    """Time every knob set of the grid where it fits, but a recompute set its no-recompute twin's step bounds off the
    list on every row it fits (Search.bounded counts them; `bounded=False` times them too, as tests compare)."""
    # knob sets alike in time_key share their subset and the batch's stage memo (DeepEP and HybridEP where priced alike)
    groups = _groups(sorted(grid, key=lambda k: k.recompute != "none"),  # no recompute first
                     lambda k: time_key(k, s.gpu, s.eff))
    fit = {knobs: s.fits(batch, knobs) for group in groups for knobs in group}
    twin_of = dict(twins(fit))
    # recompute only adds time: where the same knobs fit roomily without it, a recompute set cannot win
    masks = {k: (f & ~fit[twin_of[k]][1] if k in twin_of else f, roomy) for k, (f, roomy) in fit.items()}
    floors = _Floors(s, batch, twin_of, masks)
    for group in groups:
        timed = {knobs: masks[knobs] for knobs in group}
        if bounded and all(floors.bounds_out(knobs, mask) for knobs, (mask, _) in timed.items()):
            s.bounded += len(group)
        else:
            _time(s, batch, timed)
        s.done += len(group)
        if s.progress:
            s.progress(s.done, s.total)


class _Floors:
    """Per no-recompute twin, its re-split bound and unweighted reach on the rows any of its recompute sets fits
    (the rest inf), timed when first asked: its own layer times are then in the batch's memo."""

    def __init__(self, s: Search, batch, twin_of: dict, masks: dict):
        self.s, self.batch, self.twin_of, self.masks, self.known = s, batch, twin_of, masks, {}
        self.cp = batch.fields.cp[:, 0] > 1  # the CP > 1 rows, which the short-context note weighs
        self.sets: dict[Knobs, list] = {}  # each twin's recompute sets, gathered once (not a scan a twin)
        for knobs, twin in twin_of.items():
            self.sets.setdefault(twin, []).append(knobs)

    def bounds_out(self, knobs: Knobs, mask: np.ndarray) -> bool:
        """Whether the floor leaves every row of `mask` off the list and off the short-context note's CP few."""
        twin = self.twin_of.get(knobs)
        if twin is None or not mask.any():
            return False
        reach, raw = self.known[twin] if twin in self.known else self._time(twin)
        s, low = self.s, 1 - FLOOR_SLACK
        if not np.all(reach[mask] * low > s.bound):
            return False
        if not s.short_cp:
            return True
        worst = s.short_cp_best[-1][0] if len(s.short_cp_best) == SHORT_CP_KEPT else np.inf
        return bool(np.all(raw[mask & self.cp] * low >= worst))

    def _time(self, twin: Knobs) -> tuple[np.ndarray, np.ndarray]:
        s, batch = self.s, self.batch
        rows = np.flatnonzero(np.logical_or.reduce([self.masks[k][0] for k in self.sets[twin]]))
        sub = batch.subset(rows)
        walls = batch_step_seconds(s.spec, sub, s.wl.seq_length, s.wl.global_batch_size, twin, s.gpu, s.eff)
        weight = cp_weight(sub.fields.cp[:, 0], s.wl.seq_length)
        step = walls["step"] * weight
        resplit = (sub.fields.pp[:, 0] > 1) & s.resplit
        reach, raw = np.full(batch.size, np.inf), np.full(batch.size, np.inf)
        reach[rows] = np.where(resplit, _within(walls["balanced"], step, weight), step)  # as _time ranks them
        raw[rows] = _loose_reach(s, walls)
        self.known[twin] = reach, raw
        return reach, raw


def _time(s: Search, batch, timed: dict[Knobs, np.ndarray]) -> None:
    """Step seconds of each knob set on its rows (one shared subset per group); the fastest join `s.best`."""
    union = np.logical_or.reduce([mask for mask, _ in timed.values()])
    if not union.any():
        return
    rows = np.nonzero(union)[0]
    sub = batch.subset(rows)  # time only what fits under some knob set of the group
    resplit = (sub.fields.pp[:, 0] > 1) & s.resplit
    # ranked as CP_SHORT_MARGIN slower where CP > 1 below the long-context regime (ranking.cp_weight)
    cp = cp_weight(sub.fields.cp[:, 0], s.wl.seq_length)  # the subset's, once for the group's knob sets
    for knobs, (mask, roomy) in timed.items():
        walls = batch_step_seconds(s.spec, sub, s.wl.seq_length, s.wl.global_batch_size, knobs, s.gpu, s.eff)
        fits = mask.take(rows)  # the knob set's rows of the subset
        step = np.where(fits, walls["step"] * cp, np.inf)
        weight = step / walls["step"]  # the CP weight the ranking put on each step (inf where it does not fit)
        # the best a re-split could make it; inf where it does not fit (min(balanced, inf) would let it take a place)
        reach = np.where(resplit & np.isfinite(step), _within(walls["balanced"], step, weight), step)
        # tightened to whole layers where that first bound keeps it in reach of the list (the rest stay out either way)
        near = np.nonzero(resplit & np.isfinite(step) & (reach <= s.bound))[0]
        cp_near = _cp_first(s, sub, walls, resplit & fits) if s.short_cp else near[:0]
        tight = _whole_layers(s, sub, walls, _union(near, cp_near, len(step)))  # once for both readers
        if len(near):
            reach[near] = _within(tight[near], step[near], weight[near])
        if s.short_cp:
            _short_cp_best(s, _cp_reach(s, walls, cp_near, tight), fits, sub, knobs)
        keep = min(s.kept, len(step))
        # the fastest as they are, and those a re-split could make fastest (neither crowds the other out)
        first = _union(np.argpartition(step, keep - 1)[:keep], np.argpartition(reach, keep - 1)[:keep], len(step))
        first = first[np.isfinite(step[first]) & (reach[first] <= s.bound)]  # those that join the list
        for i, t, r, mbs, crowded in zip(first.tolist(), step[first].tolist(), reach[first].tolist(),
                                          sub.mbs[first, 0].tolist(), (~roomy[rows[first]]).tolist()):
            lay = sub.layout(i)  # `crowded`: under TIGHT_SHARE free (the ranking's preference reads it)
            s.best.append((t, preference(lay, knobs, s.dispatcher(lay), s.wl.seq_length, crowded), lay, mbs, knobs, r))
        s.fastest = sorted(s.fastest + step[first].tolist())[:s.kept]  # the kept fastest steps of s.best
        s.bound = bound(s.fastest, s.kept)


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
