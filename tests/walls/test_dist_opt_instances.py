"""The distributed optimizer in several copies (num_distributed_optimizer_instances N; Megatron-LM
--num-distributed-optimizer-instances, Bridge ddp.num_distributed_optimizer_instances): Megatron-Core's
parallel_state.py builds intra partial data-parallel groups of DP x CP / N ranks (experts: EDP / N), each copy shards
the optimizer state over its group, and the copies all-reduce each reduced gradient shard between them."""

import pytest

from moetune.configio import load_config
from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.ranks import job_gpu
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.planner.from_config import from_config
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.comms import ring_seconds
from moetune.walls.efficiency import efficiency
from moetune.walls.rank_params import stage_params

# Qwen3-30B-A3B on 64 H100s at EP 8: DP 64 for dense parameters, EDP 8 for experts
LAYOUT = Layout(world_size=64, ep=8)
WL = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=512)


def _estimate(copies: int):
    return estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), LAYOUT, WL,
                    Knobs(num_distributed_optimizer_instances=copies))


def test_each_copy_shards_the_optimizer_state_over_its_share_of_the_ranks():
    """Four copies: the dense state over 16 ranks instead of 64, the expert state over 2 instead of 8, four times
    the bytes a rank. The option had been read and ignored, so a run that set it was sized 4x too light."""
    one, four = (_estimate(n).stages[0].items for n in (1, 4))
    (p,) = stage_params(load_model("qwen3-30b-a3b"), LAYOUT)
    assert four["optimizer_states"] == pytest.approx(12 * (p.dense / 16 + p.expert / 2), abs=24)
    assert four["optimizer_states"] == pytest.approx(4 * one["optimizer_states"], rel=1e-6)
    assert four["weights"] == one["weights"] and four["main_grads"] == one["main_grads"]


def test_the_copies_all_reduce_each_reduced_shard_between_them():
    spec, gpu = load_model("qwen3-30b-a3b"), job_gpu(load_gpu("h100"), 64)
    (p,) = stage_params(spec, LAYOUT)
    eff = efficiency(gpu.key)
    inside = (ring_seconds(4 * p.dense, 16, 1, gpu, eff) + ring_seconds(4 * p.expert, 2, 8, gpu, eff)
              + ring_seconds(2 * p.dense, 16, 1, gpu, eff) + ring_seconds(2 * p.expert, 2, 8, gpu, eff))
    across = 2 * (ring_seconds(4 * p.dense / 16, 4, 16, gpu, eff) + ring_seconds(4 * p.expert / 2, 4, 16, gpu, eff))
    raw = _estimate(4).time["collectives"]["dp_grad_reduce_param_gather"]
    assert raw == pytest.approx(inside + across, rel=1e-9)


def test_a_launch_that_sets_it_is_read_and_a_count_that_does_not_divide_is_refused():
    args = "--bf16 --expert-model-parallel-size 8 --use-distributed-optimizer --num-distributed-optimizer-instances 4"
    _, _, knobs = from_config(load_config(mlm_args=args, gpu="h100", gpus=64))
    assert knobs.num_distributed_optimizer_instances == 4
    with pytest.raises(MoetuneError, match=r"num_distributed_optimizer_instances \(3\) must divide DP x CP \(64\)"):
        _estimate(3)
