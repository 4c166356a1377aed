"""The re-split's lean figures (walls/step.py step_seconds, walls/memory.py memory_peaks, planner/estimate.py
step_estimate and memory_estimate_peaks) are the full estimate's own, bit for bit: the re-split picks on them and
plan then prints the full estimate of its pick."""

from dataclasses import replace

import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate, fits_memory, memory_estimate_peaks, step_estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model

WL = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=2048)
# DeepSeek-V3 on 256 GB200 (61 layers, one MTP layer): an uneven 4-rank split, the same at VPP 2, and one with the
# loss rank lightened, under EP overlap with HybridEP and under full recompute with the CPU-offloaded optimizer
SPLITS = ["Et*15|t*15|t*15|t*16mL", "Et*7|(t*8|)*6t*6mL", "Et*16|t*16|t*16|t*13mL"]
KNOBS = [Knobs(precision="mxfp8", dispatcher="hybridep", ep_overlap=True, cp_comm_type="auto"),
         Knobs(precision="bf16", recompute="full", optimizer_offload_fraction=0.5)]


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("knobs", KNOBS)
def test_lean_figures_are_the_estimates(split, knobs):
    spec, gpu = load_model("deepseek-v3"), load_gpu("gb200")
    lay = Layout(world_size=256, pp=4, ep=64, pipeline_layout=split)
    full = estimate(spec, gpu, lay, WL, knobs)
    resolved, step, stages = step_estimate(spec, gpu, lay, WL, knobs)
    assert resolved == full.knobs and resolved.cp_comm_type == "p2p"  # CP 1 names Megatron's default
    assert step == full.time["step_seconds"]
    assert stages == full.time["stage_seconds"] and len(stages) == 4
    peak, host = memory_estimate_peaks(spec, gpu, lay, WL, knobs, None)
    assert (peak, host) == (full.peak_bytes, full.host_peak_bytes)
    assert (host > 0) == (knobs.optimizer_offload_fraction > 0)  # the offloaded share stays on the host
    # budgets a byte over and a byte under the peak (plan's budget: the GPU less --headroom)
    roomy, short = (replace(gpu, memory_gib=(peak + d) / 2**30) for d in (1, -1))
    assert fits_memory(peak, host, roomy, gpu) and full.fits_on(roomy)
    assert not fits_memory(peak, host, short, gpu) and not full.fits_on(short)


def test_a_refused_configuration_is_refused_alike():
    """step_estimate checks as estimate does: DeepEP at EP 1 has no expert ranks to send to."""
    spec, gpu = load_model("deepseek-v3"), load_gpu("gb200")
    lay = Layout(world_size=256, pp=4, ep=1, pipeline_layout=SPLITS[0])
    knobs = Knobs(dispatcher="deepep")
    with pytest.raises(Exception) as full:
        estimate(spec, gpu, lay, WL, knobs, with_memory=False)
    with pytest.raises(type(full.value), match="DeepEP needs expert ranks"):
        step_estimate(spec, gpu, lay, WL, knobs)
