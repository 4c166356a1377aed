"""The dispatcher enters the time memos' keys as its price (walls/comms.py dispatch_price, walls/batch_keys.py): two
knob sets with one price must take the same step, each computed afresh, or a memo would serve one the other's time.
(tests/walls/test_batch_memo_keys.py checks the batch path's memos the same way, HybridEP after DeepEP on Hopper.)"""

from dataclasses import replace

import pytest

import moetune.walls.layer_comm as layer_comm
import moetune.walls.step as step
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.batch_keys import step_key, time_key
from moetune.walls.comms import dispatch_price
from moetune.walls.efficiency import efficiency

# an MLA model with MTP and dense layers across nodes, an expert-bias model (its fc2 bias pass reads the FP32
# probabilities both fused dispatchers cast to), and a small GQA one inside a node
CASES = [("deepseek-v3", Layout(world_size=256, tp=2, pp=8, vpp=4, ep=32, pipeline_layout="Et*3|(tt|)*29m|L")),
         ("gpt-oss-120b", Layout(world_size=64, ep=16)),
         ("qwen3-30b-a3b", Layout(world_size=8, ep=8))]
KNOBS = [Knobs(dispatcher="deepep"), Knobs(dispatcher="deepep", ep_overlap=True, delay_wgrad=True),
         Knobs(dispatcher="deepep", precision="fp8-blockwise", cuda_graph_scope=("attn", "moe_router"))]


def _fresh_step(spec, lay, knobs, gpu) -> dict:
    """step_time with the scalar memos emptied, so nothing computed for another knob set is read."""
    step._LAYER_TIMES.clear()
    layer_comm._PARTS.clear()
    return step.step_time(spec, lay, Workload(seq_length=4096, micro_batch_size=1, global_batch_size=1024), knobs, gpu,
                          efficiency(gpu.key))


@pytest.mark.parametrize("gpu_key", ["h100", "b200", "gb200"])
@pytest.mark.parametrize("model, lay", CASES)
def test_knob_sets_priced_alike_take_the_same_step(model, lay, gpu_key):
    spec, gpu = load_model(model), load_gpu(gpu_key)
    eff = efficiency(gpu.key)
    for deepep in KNOBS:
        hybrid = replace(deepep, dispatcher="hybridep")
        for hybridep in (hybrid, replace(hybrid, flex_num_sms=8)):
            alike = step_key(deepep, gpu, eff) == step_key(hybridep, gpu, eff)
            assert alike == (time_key(deepep, gpu, eff) == time_key(hybridep, gpu, eff))
            if alike:  # priced apart, they may still take one step (an all-to-all the NIC bounds: B200's gpt-oss)
                assert _fresh_step(spec, lay, deepep, gpu) == _fresh_step(spec, lay, hybridep, gpu), (model, hybridep)


def test_hopper_prices_the_fused_dispatchers_alike_and_nvlink5_does_not():
    """The case the planner gains from (DeepEP and HybridEP timed once on Hopper) and the one it must not: on NVLink5
    HybridEP's 32 SMs bind its rate (data/efficiency.toml a2a_gbps_per_sm 14.6 x 32 = 467 GB/s, under B200's 801),
    and on GB200 the fitted a2a_eff differ (0.6573 and 0.6984)."""
    def alike(gpu_key: str, sms: int | None = None) -> bool:
        gpu, eff = load_gpu(gpu_key), efficiency(gpu_key)
        return dispatch_price("deepep", Knobs(dispatcher="deepep").num_sms, gpu, eff) == \
            dispatch_price("hybridep", Knobs(dispatcher="hybridep", flex_num_sms=sms).num_sms, gpu, eff)

    assert alike("h100") and alike("h200")
    assert not alike("h100", sms=8)  # 8 SMs x 14.6 GB/s bind under Hopper's 401 GB/s
    assert not alike("b200") and not alike("gb200")
    assert dispatch_price("alltoall", 0, load_gpu("h100"), efficiency("h100")) != \
        dispatch_price("allgather", 0, load_gpu("h100"), efficiency("h100"))
