"""walls/batch_rows.py's column-by-column reductions give numpy's own bits: the planner's batch relies on it to stay
byte-identical to the axis reductions it replaced (a numpy that summed a short axis in another order would fail here,
not move a plan in silence)."""

import numpy as np
import pytest

from moetune.walls.batch_rows import PAIRWISE_FROM, row_max, row_min, row_sum


@pytest.mark.parametrize("rows", [1, 2, 3, 7, 8, 100, 1000])
@pytest.mark.parametrize("cols", [1, 2, 3, 5, 7, 8, 12])
def test_row_reductions_match_numpy_bit_for_bit(rows, cols):
    rng = np.random.default_rng(rows * 100 + cols)
    for _ in range(20):  # spanning 16 decades, where the order of a sum shows in its last bits
        x = rng.random((rows, 4, cols)) * 10.0 ** rng.uniform(-8, 8, (rows, 4, cols))
        assert np.array_equal(row_sum(x), x.sum(axis=-1))
        assert np.array_equal(row_sum(x[..., ::2]), x[..., ::2].sum(axis=-1))  # a strided view, as the batch passes
        assert np.array_equal(row_max(x), x.max(axis=-1))
        assert np.array_equal(row_min(x), x.min(axis=-1))



def test_row_sum_leaves_pairwise_lengths_to_numpy():
    x = np.array([[1.0, 1e16, -1e16] + [1.0] * (PAIRWISE_FROM - 2)])
    assert np.array_equal(row_sum(x), x.sum(axis=-1))
