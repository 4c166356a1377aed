"""Knobs (layout/knobs.py): the fused dispatcher's SM count."""

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
