"""The seeds' order among near-ties (planner/ranking.py preference)."""

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.planner.ranking import preference

LAYOUT = Layout(world_size=64, pp=2, vpp=2, ep=8)


def _rank(recompute: str, modules: frozenset = frozenset()) -> tuple:
    return preference(LAYOUT, Knobs(recompute=recompute, recompute_modules=modules), "deepep", 4096)


def test_lighter_recompute_ranks_first_with_fewer_selective_modules_before_more():
    """seeds/000 Phase 1: selective before full recompute; among selective sets the fewer modules replayed rank first
    (a set of layernorm + moe_act had ranked as light as moe_act alone and kept the order the search found them in)."""
    ladder = [_rank("none"), _rank("selective", frozenset({"moe_act"})),
              _rank("selective", frozenset({"layernorm", "moe_act"})), _rank("full")]
    assert ladder == sorted(ladder) and len(set(ladder)) == 4
