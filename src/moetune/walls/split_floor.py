"""The least a re-split of the decoder layers could make a candidate's slowest pipeline rank, for the planner's
bound on what re-splitting a candidate can gain (walls/batch.py "balanced"; planner/resplit.py re-splits in order of
it and stops where it leaves the band of the fastest, so a loose bound spends the re-split budget on layouts that
cannot gain).

planner/pipeline_balance.py moves whole decoder layers and leaves every virtual stage a layer but the last rank's
final one, so a rank keeps VPP of them, the last VPP - 1; the loss, the MTP layers and the send/recv stay where they
are (`fixed`: a stage's time less its decoder layers'). The batch keeps each distinct stage once
(walls/batch_layouts.py) with the count of ranks it stands for (`ranks`); a mean that read each distinct stage once
had read GLM-4.5's PP17 splits (no MTP, 15 of 17 ranks alike) able to reach 5.5 s a step against their 8.8 s. The
model's layers of each kind come counted with the batch (LayoutBatch.kind_layers), not again for each knob set.
"""

import numpy as np

from moetune.walls.batch_rows import row_max, row_min, row_sum


def layer_shares(kind_layers: np.ndarray, ranks: np.ndarray) -> tuple:
    """What even_floor reads of the layout alone: the pipeline ranks (PP) and the ceil(n / PP) of each kind's n layers
    (`kind_layers`) that some rank holds; the planner takes them once per search, not once per knob set."""
    pp = ranks.sum(axis=1)
    return pp, np.ceil(kind_layers / pp[:, None])


def even_floor(shares: tuple, total: np.ndarray, fixed: np.ndarray, ranks: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """The ranks' mean (`total` of each distinct stage weighted by its `ranks`), or where higher the ceil(n / PP) of
    each kind's n layers (layer_shares), of `cost` seconds each, that some rank holds on top of the least fixed part:
    89 MoE layers over PP17 leave one rank 6 where the mean is 5.4 (GLM-4.5). Cheap enough for every candidate."""
    pp, most = shares
    return np.maximum(row_sum(total * ranks) / pp, row_min(fixed) + row_max(most * cost))


def whole_floor(kind_layers: np.ndarray, fixed: np.ndarray, ranks: np.ndarray, least: np.ndarray,
                cost: np.ndarray) -> np.ndarray:
    """The best split in whole layers (_whole_layers) of all the layers at the cheapest kind's cost, and of the most
    numerous kind's alone, each rank keeping `least` layers (of the most numerous kind, all but the others' count):
    GLM-4.5-Air's 45 MoE layers over PP8 leave one rank 7 beside its MTP layer and loss, 11% over the mean."""
    main, num_layers = int(kind_layers.argmax()), int(kind_layers.sum())
    cols = [(cost.min(axis=1), num_layers, least)]
    if len(kind_layers) > 1:
        cols.append((cost[:, main], kind_layers[main], np.maximum(least - (num_layers - kind_layers[main]), 0)))
    whole = _whole_layers(fixed, ranks, np.stack([c for c, _, _ in cols], axis=1), np.array([n for _, n, _ in cols]),
                          np.stack([k for _, _, k in cols], axis=1))
    return whole.max(axis=1)


def _whole_layers(fixed: np.ndarray, ranks: np.ndarray, cost: np.ndarray, count: np.ndarray,
                  least: np.ndarray) -> np.ndarray:
    """For each column j, the least slowest-rank time of any split of `count[j]` layers of `cost[:, j]` seconds each
    over the pipeline ranks, the `ranks` of each distinct stage already holding `fixed` seconds and at least
    `least[:, j]` of the layers: the least T at which the ranks' room, floor((T - fixed) / cost) layers each, holds
    them all. Above `level` (the even fractional split, or the largest fixed part and least layers where that is
    higher) each rank gains one layer's room within `cost`, so T is the first of those next whole-layer points that
    makes up the shortfall."""
    f, w, c = fixed[:, None, :], ranks[:, None, :], cost[:, :, None]
    even = (count * cost + (fixed * ranks).sum(axis=1, keepdims=True)) / ranks.sum(axis=1, keepdims=True)
    level = np.maximum((f + least * c).max(axis=2), even)
    room = np.floor((level[:, :, None] - f) / c)
    short = count - (room * w).sum(axis=2)
    points = f + (room + 1) * c
    reached = np.zeros_like(points)  # ranks whose next point is at or below each stage's (a loop: a few stages)
    for s in range(points.shape[2]):
        reached += w[:, :, s:s + 1] * (points[:, :, s:s + 1] <= points)
    return np.where(short > 0, np.where(reached >= short[:, :, None], points, np.inf).min(axis=2), level)
