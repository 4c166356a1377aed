"""Low-precision recipes' GEMM rates against Transformer Engine's own GEMM benchmark (autocast mode: quantization
inside the timed region), per-layer GEMM milliseconds of a hidden-4096, FFN-16384 model at 15,872 tokens:
TransformerEngine docs/examples/gemm_profiling/gemm_profiling.rst @8f2e635, H200 NVL and B300 worked examples."""

import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.compute import gemm_rate
from moetune.walls.efficiency import efficiency

# milliseconds a layer, as the benchmark printed them
H200 = {"fp8-current": 20.285, "fp8-delayed": 18.978, "fp8-blockwise": 22.882}
B300 = {"mxfp8": 8.984, "fp8-current": 9.147, "fp8-delayed": 7.802, "nvfp4": 6.453}
NVFP4_KERNEL_MS = 3.764  # the same NVFP4 GEMMs pre-quantized: the rest of 6.453 ms is quantization


def _ratio(gpu: str, recipe: str, reference: str) -> float:
    spec, eff = load_gpu(gpu), efficiency(gpu)
    return gemm_rate(spec, recipe, eff) / gemm_rate(spec, reference, eff)


@pytest.mark.parametrize("recipe", ["fp8-delayed", "fp8-blockwise"])
def test_hopper_recipes_run_at_the_benchmarks_rate_over_current_scaling(recipe):
    assert _ratio("h100", recipe, "fp8-current") == pytest.approx(H200["fp8-current"] / H200[recipe], rel=2e-3)


@pytest.mark.parametrize("recipe", ["fp8-current", "fp8-delayed"])
def test_blackwell_recipes_run_at_the_benchmarks_rate_over_mxfp8(recipe):
    for gpu in ("b200", "gb200", "gb300"):
        assert _ratio(gpu, recipe, "mxfp8") == pytest.approx(B300["mxfp8"] / B300[recipe], rel=2e-3)


def test_nvfp4_gains_over_mxfp8_what_the_fp4_peak_allows():
    assert _ratio("gb300", "nvfp4", "mxfp8") == pytest.approx(B300["mxfp8"] / B300["nvfp4"], rel=2e-3)
    # B200 and GB200 have an FP4 peak of 2x FP8 (B300: 3x): the kernel slows by 3/2, the quantization does not
    quantization = B300["nvfp4"] - NVFP4_KERNEL_MS
    for gpu in ("b200", "gb200"):
        spec = load_gpu(gpu)
        kernel = NVFP4_KERNEL_MS * 3 / (spec.fp4_tflops / spec.fp8_tflops)
        assert _ratio(gpu, "nvfp4", "mxfp8") == pytest.approx(B300["mxfp8"] / (kernel + quantization), rel=2e-3)
    assert _ratio("gb200", "nvfp4", "mxfp8") < 1.1  # not the 2x its peaks alone would say


def test_blockwise_fp8_on_hopper_is_predicted_slower_than_current_scaling():
    def run(precision):
        return estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), Layout(world_size=32, ep=8),
                        Workload(seq_length=4096, micro_batch_size=1, global_batch_size=512),
                        Knobs(precision=precision)).time

    blockwise, current = run("fp8-blockwise"), run("fp8-current")
    assert blockwise["walls"]["compute"] > current["walls"]["compute"]
    assert blockwise["tokens_per_s_per_gpu"] < current["tokens_per_s_per_gpu"]
