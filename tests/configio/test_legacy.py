"""configio/legacy.py: a value of a field a release lacks, taken by the boolean switch that release has
(data/legacy_switches.csv), checked against the release table tools/megatron_releases.py read from each tag."""

import pytest

from moetune.configio.legacy import legacy_switches, respelled, switches_in
from moetune.configio.names import names
from moetune.configio.releases import has, releases
from moetune.errors import MoetuneError

TE_GRAPHS = {"model.cuda_graph_impl": "transformer_engine", "model.cuda_graph_scope": ["attn"]}
FLEX = {"model.moe_token_dispatcher_type": "flex"}


@pytest.mark.parametrize("row", legacy_switches(), ids=lambda s: f"{s.field}={s.value}")
def test_each_switch_is_a_bool_field_of_the_releases_that_lack_its_field(row):
    """Some release lacks the field and has the switch, and every release with the field came after those without:
    otherwise the row spells a value no release needs spelled."""
    order = releases().order
    lacking = [r for r in order if not has(r, row.field)]
    assert lacking and all(has(r, row.switch) for r in lacking)
    assert lacking == list(order[:len(lacking)])
    assert names().get(row.switch).type == "bool" and names().get(row.switch).role == "used"
    assert "Megatron-LM" in row.source and "@core_v0." in row.source


def test_te_graphs_before_0_15_are_external_cuda_graph_and_the_scope_one_string():
    """0.14 takes Transformer Engine's graphs by external_cuda_graph; before 0.16 the scope is one string
    (`cuda_graph_scope: str = "full"` @core_v0.15.0: a list ['attn'] fails 0.15's recompute check, which compares it
    with "attn"); from 0.16 a list."""
    assert respelled(TE_GRAPHS, "0.14") == {"model.cuda_graph_scope": "attn", "model.external_cuda_graph": True}
    assert respelled({**TE_GRAPHS, "model.cuda_graph_impl": "local"}, "0.13")["model.enable_cuda_graph"] is True
    assert respelled(TE_GRAPHS, "0.15") == {**TE_GRAPHS, "model.cuda_graph_scope": "attn"}
    assert respelled(TE_GRAPHS, "0.16") == TE_GRAPHS


def test_graphs_off_before_0_15_turn_both_switches_off_where_the_config_says_so():
    """cuda_graph_impl none, written: a recipe's own external_cuda_graph would stand under a config that only leaves
    the new field out, so both switches are written off; a config silent on it keeps the recipe's."""
    off = {"model.cuda_graph_impl": "none", "model.cuda_graph_scope": []}
    assert respelled(off, "0.14") == {"model.external_cuda_graph": False, "model.enable_cuda_graph": False}
    assert respelled({"model.num_layers": 4}, "0.14") == {"model.num_layers": 4}
    with pytest.raises(MoetuneError, match="takes one CUDA-graph scope"):
        respelled({**TE_GRAPHS, "model.cuda_graph_scope": ["attn", "moe_router"]}, "0.15")


def test_flex_dispatcher_before_0_16_runs_deepep_by_moe_enable_deepep_even_with_the_backend_left_out():
    assert respelled(FLEX, "0.15") == {**FLEX, "model.moe_enable_deepep": True}
    assert respelled({**FLEX, "model.moe_flex_dispatcher_backend": "deepep"}, "0.15") == \
        {**FLEX, "model.moe_enable_deepep": True}
    assert respelled(FLEX, "0.16") == FLEX


def test_no_switch_where_its_condition_fails():
    assert switches_in({"model.moe_token_dispatcher_type": "alltoall"}, "0.15") == []  # DeepEP needs flex
    assert switches_in({**FLEX, "model.moe_flex_dispatcher_backend": "hybridep"}, "0.15") == []  # none: refused
    assert switches_in({"model.cuda_graph_impl": "full_iteration"}, "0.14") == []  # came with cuda_graph_impl
    assert switches_in(TE_GRAPHS, None) == []
