"""Model-state memory under torch FSDP2 (--use-torch-fsdp2): Megatron-Core's TorchFullyShardedDataParallel shards every
weight over the DP x CP group (distributed/torch_fully_sharded_data_parallel.py,
get_data_parallel_group(with_context_parallel=True)), the plain optimizer holds FP32 master copies and Adam moments of
those shards, and the gradient the step reads is an FP32 copy of the sharded one (optimizer/optimizer.py
_copy_model_grads_to_main_grads). Megatron-LM refuses EP > 1, PP > 1 and the distributed optimizer under it."""

import pytest

from moetune.configio import load_config
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.ranks import job_gpu
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.planner.from_config import from_config
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.batch import batch_step_seconds
from moetune.walls.batch_layouts import build_batch
from moetune.walls.comms import ring_seconds
from moetune.walls.efficiency import efficiency
from moetune.walls.memory import memory_wall
from moetune.walls.rank_params import stage_params

# Qwen3-30B-A3B on 64 GPUs at TP2 CP2 (DP 16: 32 shards), as Megatron-LM would run it under FSDP2
LAYOUT = Layout(world_size=64, tp=2, cp=2, etp=2)
MLM = ("--bf16 --use-torch-fsdp2 --no-gradient-accumulation-fusion --untie-embeddings-and-output-weights "
       "--tensor-model-parallel-size 2 --expert-tensor-parallel-size 2 --context-parallel-size 2")


def _stage(knobs: Knobs):
    (stage,) = memory_wall(load_model("qwen3-30b-a3b"), LAYOUT, Workload(seq_length=4096), knobs, arch="hopper")
    return stage


def test_weights_grads_and_adam_state_are_sharded_over_dp_times_cp():
    stage, shards = _stage(Knobs(torch_fsdp2=True, distributed_optimizer=False)), LAYOUT.dp * LAYOUT.cp
    per_rank = stage.params / shards  # parameters of one rank's shard
    for item, bytes_per_param in (("weights", 2), ("main_grads", 4), ("optimizer_states", 12)):
        # BF16 weight; FP32 gradient copy at the step; FP32 master + exp_avg + exp_avg_sq (ceilings: a few bytes)
        assert stage.items[item] == pytest.approx(bytes_per_param * per_rank, abs=2 * bytes_per_param), item


def test_fsdp2_holds_far_less_than_ddp_without_the_distributed_optimizer():
    """The same rank under Megatron's DDP with the plain optimizer keeps every weight, a full FP32 gradient buffer and
    the whole Adam state: 18 B a parameter against FSDP2's 18 B over 32 shards."""
    ddp = _stage(Knobs(distributed_optimizer=False))
    fsdp2 = _stage(Knobs(torch_fsdp2=True, distributed_optimizer=False))
    model_state = ("weights", "main_grads", "optimizer_states")
    assert sum(ddp.items[k] for k in model_state) == 18 * ddp.params
    assert sum(fsdp2.items[k] for k in model_state) == pytest.approx(18 * ddp.params / 32, rel=1e-6)


def test_a_megatron_lm_launch_with_use_torch_fsdp2_is_estimated_sharded():
    """--use-torch-fsdp2 had been read and ignored by the estimate: the Qwen3-30B-A3B launch above was charged
    ~278 GiB of model state a rank (no distributed optimizer: nothing sharded) and reported as not fitting an H100."""
    layout, _, knobs = from_config(load_config(mlm_args=MLM, gpu="h100", gpus=64))
    assert knobs.torch_fsdp2 and not knobs.distributed_optimizer and layout == LAYOUT
    stage = _stage(knobs)
    assert stage.items["optimizer_states"] < 12 * stage.params / 16
    assert stage.total < 80 * 2**30


def test_megatron_lm_turns_fp8_weights_off_under_fsdp2():
    """validate_args sets fp8_param_gather False under --use-torch-fsdp2 with TE >= 2.0 (arguments.py:625-631
    @core_v0.16.0): the launch runs with BF16 weights, where the estimate had refused it ('fp8_param_gather needs the
    distributed optimizer')."""
    fp8 = " --fp8-format hybrid --fp8-recipe tensorwise --fp8-param-gather"
    _, _, knobs = from_config(load_config(mlm_args=MLM + fp8, gpu="h100", gpus=64))
    assert knobs.fp8 and not knobs.fp8_params
    assert "fp8_weights" not in _stage(knobs).items


# ---------------------------------------------------------------- step time: FSDP2's DP traffic
FSDP2 = Knobs(torch_fsdp2=True, distributed_optimizer=False)
NO_RESHARD = Knobs(torch_fsdp2=True, distributed_optimizer=False, fsdp2_reshard_after_forward=False)


def _time(knobs: Knobs, gbs: int) -> dict:
    wl = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=gbs)
    return estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), LAYOUT, wl, knobs, with_memory=False).time


def test_fsdp2_gathers_twice_and_reduce_scatters_in_every_micro_batch():
    """fully_shard (reshard_after_forward True, Megatron's default; no_sync a no-op) gathers each layer's BF16 weights
    in the forward and again in the backward and reduce-scatters its BF16 gradients, every micro-batch, over DP x CP
    (torch_fully_sharded_data_parallel.py): three rings of 2 B a parameter of the rank's, m times a step. The old
    estimate timed one FP32 all-reduce a step, as for Megatron's DDP."""
    spec, gpu = load_model("qwen3-30b-a3b"), job_gpu(load_gpu("h100"), LAYOUT.world_size)
    params = max(stage_params(spec, LAYOUT), key=lambda s: s.total).total
    one_ring = ring_seconds(2 * params, LAYOUT.dp * LAYOUT.cp, LAYOUT.tp, gpu, efficiency(gpu.key))
    for gbs in (128, 256):
        t = _time(FSDP2, gbs)
        assert t["num_microbatches"] == gbs // LAYOUT.dp
        raw = t["collectives"]["dp_grad_reduce_param_gather"]
        assert raw == pytest.approx(t["num_microbatches"] * 3 * one_ring, rel=1e-9)
        # each micro-batch's collectives hide only under its own compute, so most of them show at this size
        assert 0.5 * raw < t["exposed_collectives"]["dp_grad_reduce_param_gather"] <= raw


def test_the_batch_path_times_fsdp2_as_estimate_does():
    gpu, wl = load_gpu("h100"), Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256)
    batch = build_batch(load_model("qwen3-30b-a3b"), [(LAYOUT, 1)])
    for knobs in (Knobs(distributed_optimizer=False), FSDP2, NO_RESHARD):
        step = batch_step_seconds(load_model("qwen3-30b-a3b"), batch, wl.seq_length, wl.global_batch_size, knobs,
                                  gpu, efficiency(gpu.key))["step"][0]
        assert float(step) == pytest.approx(_time(knobs, 256)["step_seconds"], rel=1e-9), knobs


# ---------------------------------------------------------------- --torch-fsdp2-no-reshard-after-forward
def test_weights_kept_gathered_after_the_forward_drop_the_backward_gather():
    """reshard_after_forward False (Megatron-LM's --torch-fsdp2-no-reshard-after-forward, training/training.py:1288-1289
    @core_v0.16.0) leaves each layer's weights gathered from its forward to its backward: two rings a micro-batch, not
    three. The flag had been read and ignored."""
    args = MLM + " --torch-fsdp2-no-reshard-after-forward"
    _, _, knobs = from_config(load_config(mlm_args=args, gpu="h100", gpus=64))
    assert knobs.torch_fsdp2 and not knobs.fsdp2_reshard_after_forward
    resharded, kept = (_time(k, 256)["collectives"]["dp_grad_reduce_param_gather"] for k in (FSDP2, NO_RESHARD))
    assert kept == pytest.approx(resharded * 2 / 3, rel=1e-9)
    exposed = (_time(k, 256)["exposed_collectives"]["dp_grad_reduce_param_gather"] for k in (FSDP2, NO_RESHARD))
    assert next(exposed) > next(exposed)


def test_weights_kept_gathered_are_resident_whole():
    """Every wrapped layer (fully_shard per TransformerLayer, torch_fully_sharded_data_parallel.py) keeps its gathered
    BF16 weights until its backward, so the rank holds all of them beside its shards."""
    resharded, kept = _stage(FSDP2), _stage(NO_RESHARD)
    assert "fsdp2_gathered_weights" not in resharded.items
    assert kept.items["fsdp2_gathered_weights"] == 2 * kept.params
    assert kept.items["weights"] == resharded.items["weights"]


@pytest.mark.parametrize("reshard", [True, False])
def test_a_saved_fsdp2_result_rebuilds_and_emits_fsdp2(reshard):
    """estimate --json keeps torch FSDP2 and its reshard switch, so explain --plan and emit of that file price and
    write the same run (the knobs JSON had left both out: a reload was sized under Megatron's DDP, unsharded)."""
    from moetune.planner.config_map import to_config
    from moetune.planner.from_json import estimate_from_json

    knobs = Knobs(torch_fsdp2=True, distributed_optimizer=False, fsdp2_reshard_after_forward=reshard)
    e = estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), LAYOUT, Workload(seq_length=4096), knobs)
    again = estimate_from_json(e.to_json())
    assert again.knobs.torch_fsdp2 and again.knobs.fsdp2_reshard_after_forward == reshard
    assert again.peak_bytes == e.peak_bytes and again.time["step_seconds"] == e.time["step_seconds"]
    config = to_config(e)
    assert config["dist.use_torch_fsdp2"] is True
    assert config.get("dist.torch_fsdp2_reshard_after_forward") == (None if reshard else False)
