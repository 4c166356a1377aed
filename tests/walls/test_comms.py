"""The EP all-to-all's fixed costs (walls/comms.py): NCCL's alltoall pays a setup per peer, the fused DeepEP /
HybridEP kernels one launch."""

import pytest

from moetune.specs.hardware import load_gpu
from moetune.walls.comms import ep_alltoall_seconds
from moetune.walls.efficiency import efficiency


@pytest.mark.parametrize("ep", [8, 64])
def test_alltoall_pays_per_peer_fused_kernels_do_not(ep):
    gpu, eff = load_gpu("gb200"), efficiency("gb200")
    empty = {d: float(ep_alltoall_seconds(0.0, 7168, 8, ep, 1, gpu, eff, d)) for d in ("alltoall", "hybridep")}
    assert empty["hybridep"] == pytest.approx(eff["a2a_latency_us"] * 1e-6)
    assert empty["alltoall"] == pytest.approx((eff["a2a_latency_us"] + eff["a2a_peer_us"] * (ep - 1)) * 1e-6)
