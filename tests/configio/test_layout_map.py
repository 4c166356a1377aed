"""The one map between a config's parallelism fields and Layout (configio/layout_map.py): what a plan writes reads
back as the same layout, and a Mamba hybrid's '|' separators read as the layout string they mean."""

import pytest

from moetune.configio.layout_map import layout_fields, layout_settings
from moetune.layout.layout import Layout


def _shape(lay: Layout) -> tuple:
    return (lay.as_dict(), lay.sp, lay.split_text(), lay.first_stage_layers, lay.last_stage_layers)


@pytest.mark.parametrize("lay", [
    Layout(world_size=8),
    Layout(world_size=256, tp=2, cp=2, pp=4, vpp=2, ep=8, etp=2),
    Layout(world_size=64, tp=2, pp=4, ep=8, sequence_parallel=False, first_stage_layers=3, last_stage_layers=5),
    Layout(world_size=64, pp=4, pipeline_layout="Et|(tt|)*6tL"),
    Layout(world_size=16, pp=2, vpp=2, account_for_embedding=True, account_for_loss=True),
])
def test_a_layout_reads_back_as_written(lay):
    config = {k: v for k, v in layout_fields(lay).items() if v is not None}
    assert _shape(Layout(world_size=lay.world_size, **layout_settings(config))) == _shape(lay)


def test_a_hybrid_pattern_s_separators_are_its_layout_string():
    settings = layout_settings({"model.pipeline_model_parallel_size": 2, "model.hybrid_layer_pattern": "M*M*|M*M*"})
    assert settings["pipeline_layout"] == "Et*4|t*4L" and settings["vpp"] == 1


@pytest.mark.parametrize("pattern", [None, "M*M*M*M*"])
def test_a_vpp_beside_a_layout_string_stays_where_no_pattern_splits_the_stages(pattern):
    """Only a pattern's '|' separators fix the virtual stages alone; a hybrid_layer_pattern key held as None, or a
    pattern without separators, had dropped the config's VPP beside a layout string, so a VPP the string contradicts
    (3 against its 2) went unrefused."""
    config = {"model.pipeline_model_parallel_size": 2, "model.pipeline_model_parallel_layout": "Et*3|t*3|t*3|t*3L",
              "model.virtual_pipeline_model_parallel_size": 3, "model.hybrid_layer_pattern": pattern}
    assert layout_settings(config)["vpp"] == 3
