"""Every A/B group of the published runs with complete configurations (planner/ab_order.py): each pair of different
configurations whose measured gap exceeds the group's repeat noise is predicted in the measured order, except the
pairs listed in data/known_gaps.toml [order] with their reasons; a test fails when an unlisted pair disagrees or a
listed one starts to agree."""

import pytest

from moetune.planner.ab_order import _metric, group_pairs, ordered_pairs
from moetune.planner.runs import known_gaps

ORDER_GAPS = {tuple(k.split()): v for k, v in known_gaps()["order"].items()}  # data/known_gaps.toml
PAIRS = ordered_pairs()


def test_groups_are_found():
    assert len(PAIRS) >= 15
    assert {p.group for p in PAIRS} >= {"ab_dispatcher_gptoss120b_gb200_BF16", "mlm_cg_qwen235b_gb200",
                                        "ab_ep_overlap_qwen30b_h100"}
    assert all(p.measured_gap > 0 for p in PAIRS)
    assert len(group_pairs()) == len(PAIRS)


@pytest.mark.parametrize("pair", PAIRS, ids=[f"{p.group}:{p.faster}>{p.slower}" for p in PAIRS])
def test_pair_in_measured_order(pair):
    key = tuple(sorted((pair.faster, pair.slower)))
    assert pair.agrees != (key in ORDER_GAPS), ORDER_GAPS.get(key, f"{pair.faster} measured faster than "
                                                                   f"{pair.slower}, predicted slower")


def test_listed_gaps_are_pairs():
    assert set(ORDER_GAPS) <= {tuple(sorted((p.faster, p.slower))) for p in PAIRS}


def test_a_group_is_compared_in_one_metric():
    """Rows of a group are compared in the column every one of them publishes (tokens/s, else TFLOP/s); a group
    mixing the two is left out rather than compared across units."""
    assert _metric([{"tokens_per_s_per_gpu": "10", "tflops_per_gpu": "1"},
                    {"tokens_per_s_per_gpu": "", "tflops_per_gpu": "2"}]) == "tflops_per_gpu"
    assert _metric([{"tokens_per_s_per_gpu": "10", "tflops_per_gpu": ""},
                    {"tokens_per_s_per_gpu": "", "tflops_per_gpu": "2"}]) is None
