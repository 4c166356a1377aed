"""Knobs (layout/knobs.py): the fused dispatcher's SM count, the dropless imbalance factor by EP."""

import pytest

from moetune.errors import MoetuneError
from moetune.layout.knobs import MEGATRON_FLEX_SMS, TUNED_FLEX_SMS, Knobs


def test_sm_count_defaults_to_the_tuned_recipes_and_is_zero_for_nccl_paths():
    assert Knobs(dispatcher="hybridep").num_sms == TUNED_FLEX_SMS["hybridep"] == 32
    assert Knobs(dispatcher="deepep").num_sms == 20
    assert Knobs(dispatcher="hybridep", flex_num_sms=16).num_sms == MEGATRON_FLEX_SMS["hybridep"]
    assert Knobs(dispatcher="alltoall", flex_num_sms=16).num_sms == 0


@pytest.mark.parametrize("sms", [0, -4, 1000])
def test_an_impossible_sm_count_is_one_clear_error(sms):
    with pytest.raises(MoetuneError, match=rf"flex_num_sms \({sms}\)"):
        Knobs(dispatcher="hybridep", flex_num_sms=sms)


def test_token_imbalance_is_refused_under_force_balanced_routing():
    with pytest.raises(MoetuneError, match=r"--token-imbalance \(3\) weighs dropless routing"):
        Knobs(routing="force-balance", token_imbalance=3.0)


@pytest.mark.parametrize("kwargs", [dict(adam_moments_bytes=2), dict(optimizer_offload_fraction=0.5)])
def test_precision_aware_optimizer_features_need_the_distributed_optimizer(kwargs):
    with pytest.raises(MoetuneError, match="needs the distributed optimizer"):
        Knobs(distributed_optimizer=False, **kwargs)


def test_expected_maximum_of_normals_matches_its_closed_forms():
    """E[max of 2] = 1/sqrt(pi), E[max of 3] = 3/(2 sqrt(pi)) (order statistics of the normal), 0 for one draw."""
    import math

    from moetune.layout.imbalance import expected_max_normal
    assert expected_max_normal(1) == pytest.approx(0.0, abs=1e-9)
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-6)
    assert expected_max_normal(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), rel=1e-6)


def test_default_dropless_factor_grows_with_ep_to_the_pairs_value():
    """1 at EP 1, rising with the busiest of more ranks, the published pairs' 1.47 from their EP 8 up (no cliff
    between EP 1 with expert TP and EP 2); a user's --token-imbalance is taken as measured at any EP > 1."""
    from moetune.layout.knobs import DROPLESS_IMBALANCE, DROPLESS_IMBALANCE_EP
    k = Knobs()
    charged = [k.imbalance_at(ep) for ep in (1, 2, 4, DROPLESS_IMBALANCE_EP, 64)]
    assert charged[0] == 1.0 and charged == sorted(charged)
    assert 1.1 < charged[1] < 1.25 and charged[3] == charged[4] == DROPLESS_IMBALANCE
    assert Knobs(token_imbalance=1.3).imbalance_at(2) == 1.3
    assert Knobs(routing="force-balance").imbalance_at(4) == 1.0
