"""memory._layer_items remembers a layer kind's activation items for every later caller (a re-split asks again for
each split it weighs), so what it hands out cannot be changed by one of them."""

import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.specs.registry import load_model
from moetune.walls.memory import _layer_items, activation_context


def test_the_remembered_items_are_read_only_and_shared():
    spec = load_model("qwen3-30b-a3b")
    ctx = activation_context(Layout(world_size=8, ep=8), Workload(seq_length=4096), Knobs())
    kind = spec.layers[0]
    items = _layer_items(spec, kind, ctx)
    with pytest.raises(TypeError):
        items["act_attention"] = 0
    assert _layer_items(spec, kind, ctx) is items
