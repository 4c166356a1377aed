"""configio/normalize.py: one source's assignments resolved to a config."""

import pytest

from moetune.configio import load_config
from moetune.errors import MoetuneError


@pytest.mark.parametrize(("dist", "expected"), [(True, False), (False, True)])
def test_comm_overlap_dp_settings_apply_only_with_the_distributed_optimizer(dist, expected):
    """Bridge copies comm_overlap's DP overlap onto ddp only with the distributed optimizer (training/comm_overlap.py);
    Kimi-K2's Muon recipes set comm_overlap.overlap_grad_reduce False beside ddp.overlap_grad_reduce True, which had
    been refused as contradictory (check audit)."""
    config = load_config(sets=["comm_overlap.overlap_grad_reduce=false", "ddp.overlap_grad_reduce=true",
                               f"ddp.use_distributed_optimizer={str(dist).lower()}"])
    assert config["ddp.overlap_grad_reduce"] is expected


def test_differing_dp_overlap_without_the_optimizer_said_is_one_line():
    with pytest.raises(MoetuneError, match="set ddp.use_distributed_optimizer to say which runs"):
        load_config(sets=["comm_overlap.overlap_grad_reduce=false", "ddp.overlap_grad_reduce=true"])
