"""Helpers of the batched walls (walls/batch.py, walls/batch_bytes.py) for the planner's per-knob-set hot path.

A knob set's candidates are a subset of the root batch (walls/batch_layouts.py): by_row reads a per-candidate array of
the layout alone, computed once on the root, by row, rather than computing it again for each knob set; root_rows reads
a knob-keyed one by row where the root already holds it.

numpy reduces a short trailing axis (a batch's few stages, its layer kinds) row by row, at 10-40x the cost of the same
work as whole-column operations (1k x 5: min(axis=1) 51 us, four np.minimum 5 us; a 10k x 5 max 499 us against 41).
Max and min do not depend on the order. A sum does: numpy's sum over an axis under 8 long comes out as the adds left
to right (tests/walls/test_batch_rows.py: 1 to 1,000 rows of values spanning 16 decades, numpy 2.4), so row_sum adds
the columns in that order, for the same bits; from 8 on numpy sums pairwise, and row_sum leaves those to it.
"""

from functools import reduce

import numpy as np

from moetune.walls.batch_layouts import LayoutBatch

# the shortest axis numpy sums pairwise rather than left to right
PAIRWISE_FROM = 8


def take(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """x[rows] along the first axis: np.take where `x` is contiguous, 4x faster than fancy indexing on a batch's (n, S)
    arrays (numpy 2.4: 2.6k of 23.7k rows x 5, 14 us against 60), but slower on a strided view (a column slice)."""
    return x.take(rows, axis=0) if x.flags.c_contiguous else x[rows]


def by_row(b: LayoutBatch, key: tuple, make):
    """make(root): a per-candidate array (or a tuple of them) of the layout alone (and of the search's one GPU and
    constants, as the batch's root memos all take them) for the batch `b`, computed once on its root and read by row."""
    root = b.root()
    whole = root.memo(key, lambda: make(root))
    if b.origin is None:
        return whole
    # kept on the subset too: the knob sets of a group (planner/search_grid.py) read it on one subset
    return b.memo(key, lambda: tuple(take(x, b.rows) for x in whole) if isinstance(whole, tuple)
                  else take(whole, b.rows))


def root_rows(b: LayoutBatch, key: tuple, make):
    """b.memo(key, make), read by row from the root where the root already holds it: plan's memory_bound weighs the
    whole batch under the grid's lightest knobs, whose model state, activations and peak the knob sets of the pass
    that share those knobs read again on their subset."""
    root = b.root()
    if b.origin is not None and key in root.cache:
        return b.memo(key, lambda: take(root.cache[key], b.rows))
    return b.memo(key, make)


def stage_ranks(b: LayoutBatch) -> np.ndarray:
    """(n, S) LayoutBatch.ranks as floats, as split_floor weighs them."""
    return by_row(b, ("ranks",), lambda a: a.ranks.astype(float))


def microbatches(b: LayoutBatch, gbs: int) -> np.ndarray:
    """(n,) micro-batches a step runs."""
    return by_row(b, ("microbatches", gbs), lambda a: (gbs // (a.mbs * a.fields.dp))[:, 0])


def bubble(b: LayoutBatch) -> np.ndarray:
    """(n,) the pipeline bubble in stage times: (PP - 1) / VPP."""
    return by_row(b, ("bubble",), lambda a: ((a.fields.pp - 1) / a.fields.vpp)[:, 0])


def slowest_runs(b: LayoutBatch, gbs: int) -> np.ndarray:
    """(n,) times a step runs the slowest pipeline rank: its micro-batches and the bubble."""
    return by_row(b, ("slowest_runs", gbs), lambda a: microbatches(a, gbs) + bubble(a))


def _columns(x: np.ndarray):
    return (x[..., j] for j in range(x.shape[-1]))


def row_max(x: np.ndarray) -> np.ndarray:
    """x.max(axis=-1), column by column."""
    return reduce(np.maximum, _columns(x))


def row_min(x: np.ndarray) -> np.ndarray:
    """x.min(axis=-1), column by column."""
    return reduce(np.minimum, _columns(x))


def row_sum(x: np.ndarray) -> np.ndarray:
    """x.sum(axis=-1), with the same bits: column by column under PAIRWISE_FROM, numpy's own from there."""
    return reduce(np.add, _columns(x)) if x.shape[-1] < PAIRWISE_FROM else x.sum(axis=-1)
