"""The batch path's memos (walls/batch.py and batch_bytes.py b.memo) are shared by every knob set a search prices on
one batch: each key must hold every knob its computation reads, so a batch asked in turn for knob sets that differ in
one knob gives what a fresh batch gives for each."""

from dataclasses import replace

import numpy as np
import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.batch import batch_step_seconds
from moetune.walls.batch_bytes import batch_host_bytes, batch_memory
from moetune.walls.batch_layouts import build_batch
from moetune.walls.efficiency import efficiency
from moetune.walls.overheads import merged_overheads

# Qwen3-30B-A3B on 64 H100 at EP 8 (DP 64, EDP 8), at PP 2, and at EP 4 (where the default imbalance is charged
# below its full value: Knobs.imbalance_at)
LAYOUTS = [(Layout(world_size=64, ep=8), 1), (Layout(world_size=64, ep=8, pp=2), 1), (Layout(world_size=64, ep=4), 1)]
OFFLOAD = Knobs(optimizer_offload_fraction=0.5)
FSDP = Knobs(megatron_fsdp="optim_grads_params")
HSDP = replace(FSDP, num_distributed_optimizer_instances=4)
GRAPH = Knobs(cuda_graph_scope=("full_iteration",), routing="force-balance")  # a plan's paged stash (1.2)
# each knob set differs from the one before it in one knob or two
SEQUENCE = [
    Knobs(), OFFLOAD, replace(OFFLOAD, megatron_fsdp="optim"), replace(OFFLOAD, megatron_fsdp="no_shard"),
    Knobs(megatron_fsdp="no_shard"), Knobs(megatron_fsdp="optim"), Knobs(megatron_fsdp="optim_grads"), FSDP,
    replace(FSDP, fsdp_double_buffer=True), replace(FSDP, suggested_communication_unit_size=300_000_000), HSDP,
    replace(HSDP, outer_dp_sharding_strategy="optim"), replace(HSDP, megatron_fsdp="optim_grads"),
    Knobs(precision="fp8-blockwise", fp8_param_gather=True, megatron_fsdp="optim_grads_params"), GRAPH,
    replace(GRAPH, routed_buffer_factor=5.0), replace(GRAPH, routed_buffer_factor=1.0),
    Knobs(), Knobs(token_imbalance=Knobs().imbalance),  # the default's factor, taken as measured
    Knobs(hidden_dropout=0.1),  # its masks: memory, and the elementwise kernels' time
]


def _figures(batch, knobs: Knobs) -> list[np.ndarray]:
    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    step = batch_step_seconds(spec, batch, 4096, 256, knobs, gpu, efficiency(gpu.key))["step"]
    peak = batch_memory(spec, batch, 4096, 256, knobs, merged_overheads(None), arch="hopper")
    return [np.asarray(step), np.asarray(peak), np.asarray(batch_host_bytes(batch, knobs))]


def test_a_shared_batch_prices_each_knob_set_as_a_fresh_one():
    spec = load_model("qwen3-30b-a3b")
    shared = build_batch(spec, LAYOUTS)
    for knobs in SEQUENCE:
        fresh = _figures(build_batch(spec, LAYOUTS), knobs)
        for name, got, want in zip(("step", "peak", "host"), _figures(shared, knobs), fresh):
            assert got == pytest.approx(want, rel=1e-12), (name, knobs)


# DeepSeek-V3's dense and MoE layers, with and without MTP; knob sets that differ in what acts on the routed experts
# alone, which the dense layers' memo leaves out of its key (walls/batch_keys.py layer_time_key)
DENSE_AND_MOE = [(Layout(world_size=64, ep=8), 1), (Layout(world_size=64, tp=2, ep=16), 2),
                 (Layout(world_size=64, ep=4, etp=2), 1)]
ROUTED_ONLY = [Knobs(), Knobs(dispatcher="deepep"), Knobs(dispatcher="deepep", ep_overlap=True),
               Knobs(dispatcher="deepep", ep_overlap=True, delay_wgrad=True), Knobs(dispatcher="hybridep"),
               Knobs(dispatcher="hybridep", flex_num_sms=8), Knobs(moe_router_dtype=None),
               Knobs(dispatcher="allgather")]


@pytest.mark.parametrize("mtp", [0, 1])
def test_knob_sets_that_differ_in_the_routed_experts_alone_share_the_dense_layers(mtp):
    spec, gpu = load_model("deepseek-v3").with_mtp(mtp), load_gpu("h100")
    shared = build_batch(spec, DENSE_AND_MOE)
    for knobs in ROUTED_ONLY:
        want = batch_step_seconds(spec, build_batch(spec, DENSE_AND_MOE), 4096, 512, knobs, gpu, efficiency(gpu.key))
        got = batch_step_seconds(spec, shared, 4096, 512, knobs, gpu, efficiency(gpu.key))
        for wall in ("step", "balanced", "communication", "host"):
            assert np.array_equal(got[wall], want[wall]), (wall, knobs)
