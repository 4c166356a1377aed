"""Megatron FSDP's hybrid sharding (HSDP): with ddp.num_distributed_optimizer_instances N > 1 its strategy shards
over an inner group of DP x CP / N (EDP / N for experts) and the N copies form an outer group, which
ddp.outer_dp_sharding_strategy (Megatron-LM --outer-dp-sharding-strategy) shards: nothing (no_shard: the copies
all-reduce their gradient shards at the last micro-batch) or the optimizer (optim: the FP32 main weights and Adam
state over all DP ranks; the copies reduce-scatter the gradients at the last micro-batch and all-gather the stepped
weights in the first). Megatron-Core distributed/fsdp/mcore_fsdp_adapter.py _init_dist_index and
src/megatron_fsdp/param_and_grad_buffer.py @core_v0.19.0."""

from dataclasses import replace

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
from moetune.walls.memory import memory_wall
from moetune.walls.rank_params import stage_params

# Qwen3-30B-A3B on 64 H100 at EP 8: DP 64, EDP 8; four copies: inner DP 16, inner EDP 2
LAYOUT = Layout(world_size=64, ep=8)
HSDP = Knobs(megatron_fsdp="optim_grads_params", num_distributed_optimizer_instances=4)
HFSDP = replace(HSDP, outer_dp_sharding_strategy="optim")


def _stage(knobs: Knobs):
    (stage,) = memory_wall(load_model("qwen3-30b-a3b"), LAYOUT, Workload(seq_length=4096), knobs, arch="hopper")
    return stage


def _time(knobs: Knobs) -> dict:
    wl = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256)
    return estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), LAYOUT, wl, knobs, with_memory=False).time


def test_outer_optim_shards_the_optimizer_over_all_dp_ranks_and_keeps_weights_and_grads_in_inner_shards():
    (p,) = stage_params(load_model("qwen3-30b-a3b"), LAYOUT)
    hsdp, hfsdp = _stage(HSDP), _stage(HFSDP)
    assert hsdp.items["optimizer_states"] == pytest.approx(12 * (p.dense / 16 + p.expert / 2), abs=24)
    assert hfsdp.items["optimizer_states"] == pytest.approx(12 * (p.dense / 64 + p.expert / 8), abs=24)
    for name in ("weights", "main_grads", "fsdp_gathered_weights", "fsdp_pending_grads"):
        assert hfsdp.items[name] == hsdp.items[name], name
    assert hfsdp.items["main_grads"] == pytest.approx(4 * (p.dense / 16 + p.expert / 2), abs=8)


def _outer_ring(p, per_param: float) -> float:
    """One ring of one copy's inner shard between the four copies (ranks 16 apart for dense, 2 x EP for experts)."""
    gpu = job_gpu(load_gpu("h100"), LAYOUT.world_size)
    eff = efficiency(gpu.key)
    return (ring_seconds(per_param * p.dense / 16, 4, 16, gpu, eff)
            + ring_seconds(per_param * p.expert / 2, 4, 2 * LAYOUT.ep, gpu, eff))


def test_the_copies_reduce_their_gradients_once_a_step():
    """The outer collectives had been left out: under outer no_shard an all-reduce (two rings) of the gradient
    shard at the last micro-batch, under outer optim a reduce-scatter there and the weights' all-gather in the first
    micro-batch, once for each of its unit gathers (forward and backward) and once for the embedding and output
    layer."""
    (p,) = stage_params(load_model("qwen3-30b-a3b"), LAYOUT)
    dp = "dp_grad_reduce_param_gather"
    gpu = job_gpu(load_gpu("h100"), LAYOUT.world_size)
    eff = efficiency(gpu.key)
    grads = _outer_ring(p, 4)
    vocab = ring_seconds(2 * p.vocab / 16, 4, 16, gpu, eff)
    gathers = 2 * (_outer_ring(p, 2) - vocab) + vocab
    hsdp, hfsdp = _time(HSDP)["collectives"][dp], _time(HFSDP)["collectives"][dp]
    from moetune.walls.iteration import iteration_terms

    spec = load_model("qwen3-30b-a3b")
    d_hsdp, _, _ = iteration_terms(spec, p.dense, p.expert, p.vocab, LAYOUT, HSDP, gpu, eff)
    d_hfsdp, _, _ = iteration_terms(spec, p.dense, p.expert, p.vocab, LAYOUT, HFSDP, gpu, eff)
    assert d_hsdp.step_rs == pytest.approx(2 * grads, rel=1e-9)
    assert d_hfsdp.step_rs == pytest.approx(grads, rel=1e-9)
    assert d_hfsdp.step_ag - d_hsdp.step_ag == pytest.approx(gathers, rel=1e-9)
    assert hfsdp - hsdp == pytest.approx(gathers - grads, rel=1e-9)


def test_megatron_lm_and_bridge_name_it_and_a_saved_result_keeps_it():
    from moetune.planner.config_map import to_config
    from moetune.planner.from_json import estimate_from_json

    args = ("--bf16 --expert-model-parallel-size 8 --use-megatron-fsdp --ckpt-format fsdp_dtensor "
            "--num-distributed-optimizer-instances 4 --outer-dp-sharding-strategy optim")
    _, _, knobs = from_config(load_config(mlm_args=args, gpu="h100", gpus=64))
    assert knobs.outer_dp_sharding_strategy == "optim" and knobs.num_distributed_optimizer_instances == 4
    sets = ["model.expert_model_parallel_size=8", "ddp.use_megatron_fsdp=true", "checkpoint.ckpt_format=fsdp_dtensor",
            "ddp.num_distributed_optimizer_instances=4", "ddp.outer_dp_sharding_strategy=optim"]
    _, _, bridge = from_config(load_config(sets=sets, gpu="h100", gpus=64))
    assert bridge.outer_dp_sharding_strategy == "optim"
    e = estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), LAYOUT, Workload(seq_length=4096), HFSDP)
    again = estimate_from_json(e.to_json())
    assert again.knobs.outer_dp_sharding_strategy == "optim" and again.peak_bytes == e.peak_bytes
    assert to_config(e)["ddp.outer_dp_sharding_strategy"] == "optim"
    assert to_config(estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), LAYOUT, Workload(seq_length=4096),
                              HSDP)).get("ddp.outer_dp_sharding_strategy") is None


def test_outer_optim_is_refused_where_megatron_refuses_it():
    with pytest.raises(MoetuneError, match="needs Megatron FSDP's optim_grads_params"):
        Knobs(megatron_fsdp="optim_grads", num_distributed_optimizer_instances=4, outer_dp_sharding_strategy="optim")
    with pytest.raises(MoetuneError, match="num_distributed_optimizer_instances > 1"):
        Knobs(megatron_fsdp="optim_grads_params", outer_dp_sharding_strategy="optim")
    with pytest.raises(MoetuneError, match="takes no_shard, optim"):
        replace(HSDP, outer_dp_sharding_strategy="optim_grads")


# Megatron Bridge's DeepSeek-V3 128 x GB300 MXFP8 Megatron HSDP perf recipe (perf_recipes/deepseek/gb300/
# deepseek_v3.py deepseek_v3_pretrain_128gpu_gb300_fp8mx_hsdp_config @067f987: the 64-GPU FSDP settings of
# common.py _apply_deepseek_v3_64gpu_gb300_fsdp_configs at EP 32 and micro-batch 1, four optimizer copies sharded
# between them, FP8 parameters, a full-iteration CUDA graph)
DSV3_HSDP_RECIPE = [
    "model.tensor_model_parallel_size=1", "model.pipeline_model_parallel_size=1", "model.expert_model_parallel_size=32",
    "model.expert_tensor_parallel_size=1", "model.context_parallel_size=1", "model.sequence_parallel=false",
    "train.global_batch_size=256", "train.micro_batch_size=1", "model.seq_length=4096",
    "ddp.use_megatron_fsdp=true", "ddp.data_parallel_sharding_strategy=optim_grads_params",
    "ddp.outer_dp_sharding_strategy=optim", "ddp.num_distributed_optimizer_instances=4",
    "checkpoint.ckpt_format=fsdp_dtensor", "mixed_precision=bf16_with_mxfp8_mixed",
    "mixed_precision.grad_reduce_in_fp32=false", "mixed_precision.fp8_param_gather=true", "model.fp8_output_proj=true",
    "model.recompute_granularity=selective", "model.recompute_modules=[layernorm,mla_up_proj,moe_act]",
    "model.fine_grained_activation_offloading=true", "model.offload_modules=[core_attn,attn_proj]",
    "model.moe_token_dispatcher_type=flex", "model.moe_flex_dispatcher_backend=hybridep",
    "model.moe_router_force_load_balancing=true", "model.cuda_graph_impl=full_iteration"]


def test_bridges_deepseek_v3_hsdp_recipe_fits_only_with_the_optimizer_sharded_over_the_copies():
    """EP 32 on 128 GB300s leaves EDP 4, one expert rank in each of the four copies: each copy holds its experts
    whole, and only the outer optim sharding splits their Adam state four ways. Predicted to fit; under outer no_shard
    the same run would not."""
    from moetune.planner.from_config import trained_model

    config = load_config(sets=DSV3_HSDP_RECIPE, gpu="gb300", gpus=128)
    layout, workload, knobs = from_config(config, load_model("deepseek-v3"))
    spec = trained_model(load_model("deepseek-v3"), config)
    assert knobs.outer_dp_sharding_strategy == "optim" and knobs.num_distributed_optimizer_instances == 4
    assert layout.edp == 4
    e = estimate(spec, load_gpu("gb300"), layout, workload, knobs, with_time=False)
    assert e.fits
    replicated = estimate(spec, load_gpu("gb300"), layout, workload,
                          replace(knobs, outer_dp_sharding_strategy="no_shard"), with_time=False)
    assert not replicated.fits


@pytest.mark.parametrize("knobs", [HSDP, HFSDP, replace(HFSDP, fsdp_double_buffer=True),
                                   replace(HSDP, suggested_communication_unit_size=300_000_000)])
def test_the_batch_path_prices_hybrid_sharding_as_estimate_does(knobs):
    """plan and explain size candidates in batches (walls/batch.py): their memo keys carry the outer strategy and
    the buffer settings."""
    from moetune.walls.batch import batch_step_seconds
    from moetune.walls.batch_bytes import batch_memory
    from moetune.walls.batch_layouts import build_batch
    from moetune.walls.overheads import merged_overheads

    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    batch = build_batch(spec, [(LAYOUT, 1)])
    step = batch_step_seconds(spec, batch, 4096, 256, knobs, gpu, efficiency(gpu.key))["step"][0]
    peak = batch_memory(spec, batch, 4096, 256, knobs, merged_overheads(None), arch="hopper")[0]
    e = estimate(spec, gpu, LAYOUT, Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256), knobs)
    assert float(step) == pytest.approx(e.time["step_seconds"], rel=1e-9)
    assert float(peak) == pytest.approx(e.peak_bytes, rel=1e-9)


def test_outer_gathers_repeat_in_every_forward_before_the_first_backward():
    """Megatron FSDP gathers across its copies on every unit gather while microbatch_count is 0, and the count rises
    only when a backward ends (megatron_fsdp.py @core_v0.19.0): at PP 1 the first micro-batch's forward and
    backward; under 1F1B the first stage's PP - 1 warm-up forwards and one more too; interleaved (PP 4, VPP 2, 8
    micro-batches: 10 warm-up chunks) the last chunk gathers in its 4 forwards before its backward opens the steady
    phase, the first chunk in all 8 of its forwards, each + 1 for its backward: (5 + 9) / 2."""
    from moetune.layout.dp_sharding import outer_gather_passes

    assert outer_gather_passes(1, 1, 16) == 2
    assert outer_gather_passes(4, 1, 8) == 5 and outer_gather_passes(4, 1, 2) == 3
    assert outer_gather_passes(4, 2, 8) == 7 and outer_gather_passes(4, 2, 8, ep_overlap=True) == 7
    assert outer_gather_passes(4, 2, 2) == 3  # every forward runs in the warm-up


PIPELINE = Layout(world_size=64, ep=8, pp=4)  # DP 16, EDP 2; two copies: inner DP 8, inner EDP 1
HSDP_PP, HFSDP_PP = (replace(k, num_distributed_optimizer_instances=2) for k in (HSDP, HFSDP))


def test_a_pipeline_gathers_across_the_copies_once_more_per_warm_up_forward():
    """The model had charged two passes (the first micro-batch's forward and backward) whatever the pipeline: at PP
    4 with 16 micro-batches the first stage runs four forwards before its first backward ends, so five."""
    from moetune.walls.iteration import iteration_terms

    spec = load_model("qwen3-30b-a3b")
    p = max(stage_params(spec, PIPELINE), key=lambda s: s.total)
    gpu = job_gpu(load_gpu("h100"), PIPELINE.world_size)
    eff = efficiency(gpu.key)
    extra = {}
    for m in (1, 16):
        d_hsdp, _, _ = iteration_terms(spec, p.dense, p.expert, p.vocab, PIPELINE, HSDP_PP, gpu, eff, m)
        d_hfsdp, _, _ = iteration_terms(spec, p.dense, p.expert, p.vocab, PIPELINE, HFSDP_PP, gpu, eff, m)
        extra[m] = d_hfsdp.step_ag - d_hsdp.step_ag
    vocab = ring_seconds(2 * p.vocab / 8, 2, 8, gpu, eff)
    one_pass = (ring_seconds(2 * (p.dense - p.vocab) / 8, 2, 8, gpu, eff)
                + ring_seconds(2 * p.expert / 1, 2, LAYOUT.ep, gpu, eff))
    assert extra[1] == pytest.approx(2 * one_pass + vocab, rel=1e-9)
    assert extra[16] == pytest.approx(5 * one_pass + vocab, rel=1e-9)


@pytest.mark.parametrize("knobs", [HFSDP_PP, replace(HFSDP_PP, ep_overlap=True)])
@pytest.mark.parametrize("vpp", [1, 2])
def test_the_batch_path_counts_the_pipeline_passes_as_estimate_does(knobs, vpp):
    from moetune.walls.batch import batch_step_seconds
    from moetune.walls.batch_layouts import build_batch

    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    layout = replace(PIPELINE, vpp=vpp)
    batch = build_batch(spec, [(layout, 1)])
    step = batch_step_seconds(spec, batch, 4096, 256, knobs, gpu, efficiency(gpu.key))["step"][0]
    e = estimate(spec, gpu, layout, Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256), knobs,
                 with_memory=False)
    assert float(step) == pytest.approx(e.time["step_seconds"], rel=1e-9)
