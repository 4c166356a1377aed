"""walls/rank_params.py caches each layer kind's and each piece's elements by shard (kind_sums, _piece_sums) and hands
the one cached mapping to every caller: it is read-only, so no caller can change a later estimate of the model."""

import pytest

from moetune.layout.layout import Layout
from moetune.specs.registry import load_model
from moetune.walls.rank_params import _piece_sums, kind_sums, model_padded_vocab, stage_params

MIXTRAL = load_model("mixtral-8x7b")


def _stages(layout):
    return [(p.dense, p.expert, p.vocab) for p in stage_params.__wrapped__(MIXTRAL, layout)]  # past its own cache


def test_the_cached_sums_refuse_writes_and_later_estimates_hold():
    layout = Layout(world_size=16, tp=2, pp=2, ep=4)
    before = _stages(layout)
    sums = kind_sums(MIXTRAL, MIXTRAL.layers[0], "te")
    key = next(iter(sums))
    with pytest.raises(TypeError):
        sums[key] = 0
    with pytest.raises(TypeError):
        del sums[key]
    pieces = _piece_sums(MIXTRAL, model_padded_vocab(MIXTRAL, 2), "embedding", False, "te")
    with pytest.raises(TypeError):
        pieces[next(iter(pieces))] += 1
    assert kind_sums(MIXTRAL, MIXTRAL.layers[0], "te") is sums  # the cache still hands out that one mapping
    assert _stages(layout) == before
