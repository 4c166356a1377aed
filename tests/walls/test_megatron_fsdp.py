"""Model states and DP traffic under Megatron FSDP (--use-megatron-fsdp; Bridge ddp/dist.use_megatron_fsdp), by
data_parallel_sharding_strategy. Megatron-Core distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py
_init_each_parameter_group_buffers distributes the model-weight buffer under optim_grads_params, the gradient buffer
under optim_grads and optim_grads_params, the FP32 main weights (and so the optimizer state) under all but no_shard;
dense parameters over DP x CP, experts over EDP (mcore_fsdp_adapter.py). megatron_fsdp.py reduce-scatters every
backward once gradients are sharded, and gathers each TransformerLayer before its forward and again before its
backward once weights are."""

import re
from dataclasses import replace

import pytest

from moetune.configio import load_config
from moetune.errors import MoetuneError
from moetune.layout.dp_sharding import check_outer_sharding
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.ranks import job_gpu
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.planner.from_config import from_config
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.batch import batch_step_seconds
from moetune.walls.batch_bytes import batch_memory
from moetune.walls.batch_bytes import largest_fsdp_unit as batch_largest_unit
from moetune.walls.batch_layouts import build_batch
from moetune.walls.comms import ring_seconds
from moetune.walls.efficiency import efficiency
from moetune.walls.memory import memory_wall
from moetune.walls.rank_params import largest_fsdp_unit, layer_rank_params, stage_params

# Qwen3-30B-A3B (128 experts, 48 MoE layers) on 16 H100s at EP 8: DP 16 for dense parameters, EDP 2 for experts
LAYOUT = Layout(world_size=16, ep=8)
STATES = ("weights", "main_grads", "optimizer_states")


def _stage(knobs: Knobs, layout: Layout = LAYOUT):
    (stage,) = memory_wall(load_model("qwen3-30b-a3b"), layout, Workload(seq_length=4096), knobs, arch="hopper")
    return stage


def _fsdp(strategy: str) -> Knobs:
    return Knobs(megatron_fsdp=strategy)


def test_no_shard_and_optim_hold_what_ddp_holds_without_and_with_the_distributed_optimizer():
    """no_shard distributes no buffer: every rank keeps the BF16 weights, full FP32 gradients and the whole Adam state,
    as Megatron's DDP with the plain optimizer; optim shards the FP32 main weights, so the state the optimizer steps,
    exactly as the distributed optimizer does."""
    plain, distributed = _stage(Knobs(distributed_optimizer=False)), _stage(Knobs())
    no_shard, optim = _stage(_fsdp("no_shard")), _stage(_fsdp("optim"))
    assert {k: no_shard.items[k] for k in STATES} == {k: plain.items[k] for k in STATES}
    assert {k: optim.items[k] for k in STATES} == {k: distributed.items[k] for k in STATES}
    assert "fsdp_gathered_weights" not in optim.items and "fsdp_pending_grads" not in optim.items


def test_sharded_strategies_shard_dense_state_over_dp_and_expert_state_over_edp():
    (p,) = stage_params(load_model("qwen3-30b-a3b"), LAYOUT)
    dense, expert = p.dense / LAYOUT.dp, p.expert / LAYOUT.edp  # the rank's shard of each
    grads, full = _stage(_fsdp("optim_grads")), _stage(_fsdp("optim_grads_params"))
    assert grads.items["weights"] == 2 * p.total  # optim_grads keeps whole weights
    for stage in (grads, full):
        assert stage.items["main_grads"] == pytest.approx(4 * (dense + expert), abs=8)
        assert stage.items["optimizer_states"] == pytest.approx(12 * (dense + expert), abs=24)
    assert full.items["weights"] == pytest.approx(2 * (dense + expert), abs=4)
    # the experts, most of the rank's weights, shard over EDP 2 only: the weights shrink far less than DP's 16x
    assert 2 < grads.items["weights"] / full.items["weights"] < 4


def test_model_state_falls_with_each_strategy_and_transients_follow_the_communication_unit():
    held = {s: _stage(_fsdp(s)) for s in ("no_shard", "optim", "optim_grads", "optim_grads_params")}
    totals = [sum(st.items[k] for k in STATES) for st in held.values()]
    assert totals == sorted(totals, reverse=True) and len(set(totals)) == 4
    (p,) = stage_params(load_model("qwen3-30b-a3b"), LAYOUT)
    # every decoder layer of Qwen3-30B-A3B is the same MoE layer: the largest is the mean of the 48
    layers = p.total - p.vocab
    largest = largest_fsdp_unit(load_model("qwen3-30b-a3b"), p, LAYOUT)
    assert largest == pytest.approx(layers / 48, rel=1e-3)
    full = held["optim_grads_params"]
    # Megatron FSDP's default communication unit is max(1B, 2 x the mean unit) elements = 1B here (megatron_fsdp.py):
    # the all-gather prefetches whole layers while under half of it (500M) is in flight, 6 of 94.6M beside the one
    # computing, and the embedding and output layer stay gathered; the reduce-scatter queue holds the whole layers
    # that fit in 1B elements (10), beside the layer just launched and the one whose backward fills its bucket
    assert full.items["fsdp_gathered_weights"] == 2 * 7 * largest + 2 * p.vocab
    assert full.items["fsdp_pending_grads"] == 4 * 12 * largest


# DeepSeek-V3 on 64 GPUs at PP 2 x VPP 2: rank 0 holds the embedding and the 3 dense layers, then the MTP layer (whose
# decoder layer is MoE, as the model's), rank 1 the 58 MoE layers and the loss
MTP_LAYOUT = Layout(world_size=64, pp=2, ep=32, pipeline_layout="Et*3|t*58|m|L")


@pytest.mark.parametrize("mtp", [1, 0])
def test_the_decoder_layer_of_an_mtp_layer_is_an_fsdp_unit(mtp):
    """Megatron FSDP wraps every TransformerLayer (mcore_fsdp_adapter.py), the one inside each MTP layer too: on the
    rank holding DeepSeek-V3's dense layers and its MTP layer the largest unit is that MoE layer, and it sizes the
    gradients waiting for their reduce-scatter (2 units beside those a 1B-element queue holds: 7.02 GB in FP32, where
    sizing by the dense layers gave 7.00 GB). Without MTP, or without Megatron FSDP, nothing moves."""
    spec = load_model("deepseek-v3").with_mtp(mtp)
    layout = MTP_LAYOUT if mtp else replace(MTP_LAYOUT, pipeline_layout="Et*3|t*58||L")
    first = stage_params(spec, layout)[0]
    moe, dense = (layer_rank_params(spec, k, layout) for k in (spec.layers[-1], spec.layers[0]))
    unit = moe if mtp else dense
    assert largest_fsdp_unit(spec, first, layout) == unit and moe > dense
    queue = 1_000_000_000 // unit + 2
    (stage, _), (plain, _) = (memory_wall(spec, layout, Workload(seq_length=4096), k, arch="hopper")
                              for k in (_fsdp("optim_grads"), Knobs()))
    assert stage.items["fsdp_pending_grads"] == 4 * queue * unit == (7_023_820_800 if mtp else 7_001_800_704)
    assert plain.total == (48_224_792_888 if mtp else 28_319_967_744)  # as before: no FSDP, no unit
    batch = build_batch(spec, [(layout, 1)])  # the planner's batches take the same unit (walls/batch_bytes.py)
    units = [largest_fsdp_unit(spec, p, layout) for p in stage_params(spec, layout)]
    assert batch_largest_unit(spec, batch)[0].tolist() == units


def test_a_megatron_lm_launch_under_use_megatron_fsdp_is_sharded_and_fits():
    """--use-megatron-fsdp had been read and ignored: this launch was charged the unsharded state of a plain
    optimizer (Megatron-LM turns the distributed optimizer on under it, arguments.py:1112-1118 @core_v0.18.2), 122.7
    GiB, and reported as not fitting an H100; its strategy left out is optim_grads_params, core_v0.18's default."""
    args = "--bf16 --expert-model-parallel-size 8 --use-megatron-fsdp --ckpt-format fsdp_dtensor"
    layout, _, knobs = from_config(load_config(mlm_args=args, gpu="h100", gpus=16))
    assert layout == LAYOUT and knobs.megatron_fsdp == "optim_grads_params" and knobs.distributed_optimizer
    assert _stage(knobs).total < 78 * 2**30 < _stage(Knobs(distributed_optimizer=False)).total


# ---------------------------------------------------------------- step time: the DP traffic each strategy runs
def _time(knobs: Knobs, gbs: int = 256) -> dict:
    wl = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=gbs)
    return estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), LAYOUT, wl, knobs, with_memory=False).time


def _rings(knobs: Knobs):
    """(gradient reduce-scatter, weight all-gather) of the whole rank once: dense over DP, experts over EDP."""
    spec, gpu = load_model("qwen3-30b-a3b"), job_gpu(load_gpu("h100"), LAYOUT.world_size)
    (p,) = stage_params(spec, LAYOUT)
    eff = efficiency(gpu.key)
    def ring(per_param):
        return (ring_seconds(per_param * p.dense, LAYOUT.dp, LAYOUT.tp, gpu, eff)
                + ring_seconds(per_param * p.expert, LAYOUT.edp, LAYOUT.ep, gpu, eff))
    return ring(4), ring(2), ring_seconds(2 * p.vocab, LAYOUT.dp, LAYOUT.tp, gpu, eff)


def test_each_strategy_runs_its_collectives_as_often_as_megatron_fsdp_does():
    rs, ag, vocab = _rings(Knobs())
    m = 256 // LAYOUT.dp
    expected = {"optim": rs + ag,  # once a step, as the distributed optimizer
                "optim_grads": m * rs + ag,  # gradients every backward, weights once after the step
                # and every decoder layer gathered in forward and backward, the embedding and output layer once
                "optim_grads_params": m * (rs + 2 * (ag - vocab)) + vocab,
                "no_shard": 2 * rs}  # one all-reduce of full gradients
    for strategy, seconds in expected.items():
        raw = _time(_fsdp(strategy))["collectives"]["dp_grad_reduce_param_gather"]
        assert raw == pytest.approx(seconds, rel=1e-9), strategy


def test_the_embedding_and_output_layer_are_gathered_once_a_step_not_twice_a_micro_batch():
    """They are no FSDP unit: Megatron FSDP gathers them in the first micro-batch's forward and keeps them till
    finish_grad_sync resets its pipeline (megatron_fsdp.py _register_fsdp_hooks, param_and_grad_buffer.py
    AllGatherPipeline @core_v0.19.0). Qwen3-30B-A3B's 622M embedding and output-layer weights over 16 micro-batches
    had been charged 31 gathers too many; the exposed share falls with the raw one."""
    rs, ag, vocab = _rings(Knobs())
    m = 256 // LAYOUT.dp
    t = _time(_fsdp("optim_grads_params"))
    assert t["collectives"]["dp_grad_reduce_param_gather"] == pytest.approx(m * (rs + 2 * ag) - (2 * m - 1) * vocab,
                                                                            rel=1e-9)
    from moetune.walls.overlap import dp_exposed_seconds

    per_layer_only = dp_exposed_seconds(rs, ag - vocab, 1.0, {"dp_overlap_hide": 0.0}, _fsdp("optim_grads_params"),
                                        microbatches=m, step_ag=vocab)
    assert per_layer_only == pytest.approx(m * (rs + 2 * (ag - vocab)) + vocab, rel=1e-9)


def test_per_micro_batch_collectives_show_more_than_the_once_a_step_ones():
    exposed = {s: _time(_fsdp(s))["exposed_collectives"]["dp_grad_reduce_param_gather"]
               for s in ("optim", "optim_grads", "optim_grads_params")}
    assert exposed["optim"] < exposed["optim_grads"] < exposed["optim_grads_params"]
    assert _time(_fsdp("optim"))["step_seconds"] == _time(Knobs())["step_seconds"]


@pytest.mark.parametrize("strategy", ["no_shard", "optim", "optim_grads", "optim_grads_params"])
def test_the_batch_path_prices_megatron_fsdp_as_estimate_does(strategy):
    """explain's fit steps and retune moves size candidates in batches (walls/batch.py)."""
    spec, gpu, knobs = load_model("qwen3-30b-a3b"), load_gpu("h100"), _fsdp(strategy)
    batch = build_batch(spec, [(LAYOUT, 1)])
    step = batch_step_seconds(spec, batch, 4096, 256, knobs, gpu, efficiency(gpu.key))["step"][0]
    assert float(step) == pytest.approx(_time(knobs)["step_seconds"], rel=1e-9)
    from moetune.walls.overheads import merged_overheads
    peak = batch_memory(spec, batch, 4096, 256, knobs, merged_overheads(None), arch="hopper")[0]
    wl = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256)
    assert float(peak) == pytest.approx(estimate(spec, gpu, LAYOUT, wl, knobs, with_time=False).peak_bytes, rel=1e-9)


def test_a_saved_megatron_fsdp_result_rebuilds_and_emits_it():
    from moetune.planner.config_map import to_config
    from moetune.planner.from_json import estimate_from_json

    e = estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), LAYOUT, Workload(seq_length=4096),
                 _fsdp("optim_grads"))
    again = estimate_from_json(e.to_json())
    assert again.knobs.megatron_fsdp == "optim_grads" and again.peak_bytes == e.peak_bytes
    config = to_config(e)
    assert config["ddp.use_megatron_fsdp"] is True and config["ddp.data_parallel_sharding_strategy"] == "optim_grads"
    assert config["checkpoint.ckpt_format"] == "fsdp_dtensor"  # Megatron-LM asserts it under Megatron FSDP


def test_megatron_fsdp_refuses_what_megatron_refuses():

    with pytest.raises(MoetuneError, match="mutually exclusive"):
        Knobs(megatron_fsdp="optim_grads_params", torch_fsdp2=True, distributed_optimizer=False)
    with pytest.raises(MoetuneError, match="takes no_shard, optim, optim_grads, optim_grads_params"):
        Knobs(megatron_fsdp="zero3")


# Megatron Bridge's DeepSeek-V3 64 x GB300 MXFP8 Megatron FSDP perf recipe (perf_recipes/deepseek/gb300/deepseek_v3.py
# deepseek_v3_pretrain_64gpu_gb300_fp8mx_fsdp_config and common.py _apply_deepseek_v3_64gpu_gb300_fsdp_configs
# @067f987; _perf_precision turns grad_reduce_in_fp32 off, _deepseek_v3_common forces load balancing)
DSV3_FSDP_RECIPE = [
    "model.tensor_model_parallel_size=1", "model.pipeline_model_parallel_size=1", "model.expert_model_parallel_size=64",
    "model.expert_tensor_parallel_size=1", "model.context_parallel_size=1", "model.sequence_parallel=false",
    "train.global_batch_size=256", "train.micro_batch_size=2", "model.seq_length=4096",
    "ddp.use_megatron_fsdp=true", "ddp.data_parallel_sharding_strategy=optim_grads_params",
    "checkpoint.ckpt_format=fsdp_dtensor", "mixed_precision=bf16_with_mxfp8_mixed",
    "mixed_precision.grad_reduce_in_fp32=false", "mixed_precision.fp8_param_gather=true", "model.fp8_output_proj=true",
    "model.recompute_granularity=selective", "model.recompute_modules=[layernorm,mla_up_proj,moe_act]",
    "model.fine_grained_activation_offloading=true", "model.offload_modules=[core_attn,attn_proj]",
    "model.moe_token_dispatcher_type=flex", "model.moe_flex_dispatcher_backend=hybridep",
    "model.moe_router_force_load_balancing=true"]


def test_bridges_deepseek_v3_megatron_fsdp_recipe_fits_only_with_its_weights_sharded():
    """The recipe runs DeepSeek-V3 on 64 GB300s at EP 64 with every expert whole on its rank (EDP 1): Megatron FSDP
    shards the dense weights over the 64 ranks and gathers each layer as it runs. It is predicted to fit (within the
    GPU's usable memory), and keeping the weights whole (optim_grads) would not."""
    from moetune.planner.from_config import trained_model

    config = load_config(sets=DSV3_FSDP_RECIPE, gpu="gb300", gpus=64)
    layout, workload, knobs = from_config(config, load_model("deepseek-v3"))
    spec = trained_model(load_model("deepseek-v3"), config)
    assert knobs.megatron_fsdp == "optim_grads_params" and layout.edp == 1
    e = estimate(spec, load_gpu("gb300"), layout, workload, knobs, with_time=False)
    assert e.fits
    whole = estimate(spec, load_gpu("gb300"), layout, workload, replace(knobs, megatron_fsdp="optim_grads"),
                     with_time=False)
    assert not whole.fits


def test_double_buffers_and_a_set_communication_unit_size_the_transients():
    """fsdp_double_buffer keeps two pool buffers of the largest unit for the gathered weights and two for the pending
    gradients, in place of what the communication unit lets through (7 and 12 layers here); a set
    suggested_communication_unit_size replaces the 1B default, its floor included: 200M elements prefetch one layer of
    94.6M beside the one computing and queue two (param_and_grad_buffer.py, megatron_fsdp.py @core_v0.19.0)."""
    (p,) = stage_params(load_model("qwen3-30b-a3b"), LAYOUT)
    largest = largest_fsdp_unit(load_model("qwen3-30b-a3b"), p, LAYOUT)
    double = _stage(replace(_fsdp("optim_grads_params"), fsdp_double_buffer=True))
    assert double.items["fsdp_gathered_weights"] == 2 * 2 * largest + 2 * p.vocab
    assert double.items["fsdp_pending_grads"] == 4 * 2 * largest
    small = _stage(replace(_fsdp("optim_grads_params"), suggested_communication_unit_size=200_000_000))
    assert small.items["fsdp_gathered_weights"] == 2 * 3 * largest + 2 * p.vocab
    assert small.items["fsdp_pending_grads"] == 4 * 4 * largest
    # optim_grads has no units: its pending gradients follow the unit size, not the pool (whose units it has none of)
    grads = _stage(replace(_fsdp("optim_grads"), fsdp_double_buffer=True))
    assert grads.items["fsdp_pending_grads"] == _stage(_fsdp("optim_grads")).items["fsdp_pending_grads"]


def test_the_buffer_settings_are_read_kept_and_emitted():
    from moetune.errors import MoetuneError
    from moetune.planner.config_map import to_config
    from moetune.planner.from_json import estimate_from_json

    sets = ["model.expert_model_parallel_size=8", "ddp.use_megatron_fsdp=true", "checkpoint.ckpt_format=fsdp_dtensor",
            "ddp.fsdp_double_buffer=true", "ddp.suggested_communication_unit_size=800000000"]
    _, _, bridge = from_config(load_config(sets=sets, gpu="h100", gpus=16))
    assert bridge.fsdp_double_buffer and bridge.suggested_communication_unit_size == 800_000_000
    args = ("--bf16 --expert-model-parallel-size 8 --use-megatron-fsdp --ckpt-format fsdp_dtensor --use-nccl-ub "
            "--suggested-communication-unit-size 500000000")
    _, _, mlm = from_config(load_config(mlm_args=args, gpu="h100", gpus=16))
    assert mlm.fsdp_double_buffer and mlm.suggested_communication_unit_size == 500_000_000  # nccl_ub turns it on
    _, _, ddp = from_config(load_config(sets=sets[:1] + sets[3:], gpu="h100", gpus=16))
    assert not ddp.fsdp_double_buffer and ddp.suggested_communication_unit_size is None  # no Megatron FSDP
    e = estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), LAYOUT, Workload(seq_length=4096), bridge)
    again = estimate_from_json(e.to_json())
    assert again.knobs == e.knobs and again.peak_bytes == e.peak_bytes
    config = to_config(e)
    assert config["ddp.fsdp_double_buffer"] is True and config["ddp.suggested_communication_unit_size"] == 800_000_000
    with pytest.raises(MoetuneError, match="suggested_communication_unit_size"):
        from_config(load_config(sets=sets[:-1] + ["ddp.suggested_communication_unit_size=lots"], gpu="h100", gpus=16))
    with pytest.raises(MoetuneError, match="suggested_communication_unit_size"):
        Knobs(megatron_fsdp="optim_grads_params", suggested_communication_unit_size=0)


@pytest.mark.parametrize(("strategy", "copies", "said"), [
    ("optim_grads", 2, "needs Megatron FSDP's optim_grads_params (here optim_grads) (rule"),
    ("optim_grads", 1, "needs Megatron FSDP's optim_grads_params (here optim_grads) and "
                       "num_distributed_optimizer_instances > 1 (here 1) (rule"),
])
def test_an_outer_optim_sharding_megatron_refuses_names_only_what_is_wrong(strategy, copies, said):
    """The refusal had said 'num_distributed_optimizer_instances > 1 (here 2)' where 2 copies were right."""
    with pytest.raises(MoetuneError, match=re.escape(said)):
        check_outer_sharding("optim", strategy, copies)
