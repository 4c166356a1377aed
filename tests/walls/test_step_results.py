"""The step's headline figures: MFU against the recipe's own peak (seeds/004's reading) and BF16's."""

import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model


@pytest.mark.parametrize(("precision", "peak"), [("bf16", 2500), ("mxfp8", 5000)])
def test_mfu_is_against_the_recipes_gemm_peak(precision, peak):
    """DeepSeek-V3 on 256 GB200 (datasheet dense peaks 2,500 BF16 and 5,000 FP8 TFLOP/s, data/hardware.toml): an
    MXFP8 run's MFU is half its MFU against the BF16 peak, so tuned MXFP8 runs read in seeds/004's "high-teens to
    low-20s MFU" rather than twice that."""
    gpu = load_gpu("gb200")
    lay = Layout(world_size=256, pp=4, ep=64, pipeline_layout="Et*15|t*15|t*15|t*16mL")
    t = estimate(load_model("deepseek-v3"), gpu, lay,
                 Workload(seq_length=4096, micro_batch_size=1, global_batch_size=2048),
                 Knobs(precision=precision, recompute="full", dispatcher="hybridep", routing="force-balance")).time
    assert gpu.peak_tflops(precision) == peak
    assert t["mfu"] == pytest.approx(t["tflops_per_gpu"] / peak, rel=1e-12)
    assert t["mfu_bf16_peak"] == pytest.approx(t["tflops_per_gpu"] / 2500, rel=1e-12)
    assert 0 < t["mfu"] < 1
