"""Fine-grained activation offloading (Megatron offload_modules): the offloaded inputs leave the GPU's saved
activations, two layers of them stay staged, and their host-link copies cost time only beyond the compute."""

import pytest

from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.activations import ActivationContext, layer_activation_items, offloaded_bytes

SPEC = load_model("qwen3-235b-a22b")
MOE = next(k for k in SPEC.layers if k.mlp == "moe")
# R160 (Megatron-MoE-ModelZoo, Qwen3-235B-A22B on 256 GB200): offloads expert_fc1 and moe_act inputs
LAYOUT = Layout(world_size=256, pp=4, vpp=6, ep=64, account_for_embedding=True, account_for_loss=True)
WORKLOAD = Workload(seq_length=4096, micro_batch_size=3, global_batch_size=3072)
KNOBS = dict(precision="mxfp8", dispatcher="hybridep", recompute="selective",
             recompute_modules=frozenset({"moe_act", "layernorm"}), ep_overlap=True, routing="force-balance",
             cuda_graph_scope=("attn", "moe_router", "moe_preprocess"))


def test_offloaded_items_leave_the_saved_activations():
    ctx = ActivationContext(seq_length=4096, micro_batch_size=1)
    off = ActivationContext(seq_length=4096, micro_batch_size=1, offload_modules=frozenset({"expert_fc1"}))
    kept, full = layer_activation_items(SPEC, MOE, off), layer_activation_items(SPEC, MOE, ctx)
    assert "expert_input" in full and "expert_input" not in kept
    assert offloaded_bytes(SPEC, MOE, off) == full["expert_input"]
    assert sum(full.values()) - sum(kept.values()) == offloaded_bytes(SPEC, MOE, off)


def test_published_offload_run_fits_only_with_its_offload():
    gpu = load_gpu("gb200")
    without = estimate(SPEC, gpu, LAYOUT, WORKLOAD, Knobs(**KNOBS))
    with_it = estimate(SPEC, gpu, LAYOUT, WORKLOAD, Knobs(**KNOBS, offload_modules=frozenset({"expert_fc1",
                                                                                             "moe_act"})))
    assert not without.fits and with_it.fits
    staging = [s.items["act_offload_staging"] for s in with_it.stages]
    assert min(staging) > 0
    assert with_it.time["collectives"]["activation_offload"] > 0


def test_offload_time_is_hidden_until_the_host_link_saturates():
    gpu = load_gpu("gb200")
    knobs = Knobs(**KNOBS, offload_modules=frozenset({"expert_fc1", "moe_act"}))
    fast = estimate(SPEC, gpu, LAYOUT, WORKLOAD, knobs).time
    slow_gpu = load_gpu("h100")  # PCIe Gen5 instead of NVLink-C2C: same bytes, 3.5x slower link
    slow = estimate(SPEC, slow_gpu, Layout(world_size=256, pp=4, vpp=6, ep=64, account_for_embedding=True,
                                           account_for_loss=True), WORKLOAD,
                    Knobs(**{**KNOBS, "precision": "fp8-blockwise"}, offload_modules=knobs.offload_modules)).time
    assert _exposed_share(fast) < _exposed_share(slow)


def _exposed_share(t: dict) -> float:
    return t["exposed_collectives"]["activation_offload"] / t["collectives"]["activation_offload"]


def test_unknown_or_pointless_offload_is_one_clear_error():
    with pytest.raises(MoetuneError, match="unknown offload module"):
        Knobs(offload_modules=frozenset({"experts"}))
    with pytest.raises(MoetuneError, match="full recompute"):
        Knobs(recompute="full", offload_modules=frozenset({"expert_fc1"}))
