"""Fine-grained activation offloading moves saved tensors to the host; it does not change the GPU's work."""

import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.efficiency import efficiency
from moetune.walls.step import stage_times


def test_offload_adds_only_transfer_time():
    """Qwen3-235B-A22B on 256 GB200 as R160 ran it (EP64 PP4 VPP6, MBS 3): with expert_fc1/moe_act offloaded every
    compute class of every stage is unchanged (the elementwise kernels still touch the offloaded tensors) and only
    the activation_offload collective is new."""
    spec, gpu = load_model("qwen3-235b-a22b"), load_gpu("gb200")
    lay = Layout(world_size=256, pp=4, vpp=6, ep=64, account_for_embedding=True, account_for_loss=True)
    wl = Workload(seq_length=4096, micro_batch_size=3, global_batch_size=3072)
    base = Knobs(precision="mxfp8", recompute="selective", recompute_modules=frozenset({"moe_act", "layernorm"}),
                 dispatcher="hybridep", routing="force-balance")
    off = Knobs(**{**{f: getattr(base, f) for f in base.__slots__}, "offload_modules": frozenset({"expert_fc1",
                                                                                                     "moe_act"})})
    a, b = estimate(spec, gpu, lay, wl, base), estimate(spec, gpu, lay, wl, off)
    eff = efficiency("gb200")
    for sa, sb in zip(stage_times(spec, lay, wl, base, gpu, eff), stage_times(spec, lay, wl, off, gpu, eff),
                      strict=True):
        assert sa["compute"] == sb["compute"]
    assert b.time["collectives"]["activation_offload"] >= 0.0 == a.time["collectives"]["activation_offload"]
    assert b.peak_bytes < a.peak_bytes


def test_the_optimizers_cpu_offload_is_host_time():
    """The offloaded optimizer share steps on the host CPU while the GPU waits: host wall, not compute; the two
    breakdowns sum to their walls and the step is the same sum."""
    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    lay, wl = Layout(world_size=8, ep=8), Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256)
    on, off = (estimate(spec, gpu, lay, wl, Knobs(recompute="full", optimizer_offload_fraction=f)).time
               for f in (1.0, 0.0))
    assert on["host_by_class"]["optimizer_offload"] > 0 == off["host_by_class"]["optimizer_offload"]
    assert "optimizer_offload" not in on["compute_by_class"]
    for t in (on, off):
        assert sum(t["host_by_class"].values()) == pytest.approx(t["walls"]["host"], rel=1e-12)
        assert sum(t["compute_by_class"].values()) == pytest.approx(t["walls"]["compute"], rel=1e-12)
    # the GPU's own optimizer step leaves the compute wall with the offloaded share
    assert on["walls"]["compute"] < off["walls"]["compute"]
    assert on["walls"]["host"] - off["walls"]["host"] == pytest.approx(on["host_by_class"]["optimizer_offload"],
                                                                       rel=1e-9)
