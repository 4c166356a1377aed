"""FP8 parameters (Knobs.fp8_param_gather): the weights held in FP8 alone, without the BF16 copy (model_state.py)."""

from dataclasses import replace

import pytest

from moetune.errors import MoetuneError
from moetune.layout.knobs import PRECISIONS, Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.config_map import to_config
from moetune.planner.estimate import estimate
from moetune.planner.from_json import estimate_from_json
from moetune.planner.knob_fields import PRECISION_PRESET
from moetune.rules.table import load_table
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.batch import batch_step_seconds
from moetune.walls.batch_bytes import batch_memory
from moetune.walls.batch_layouts import build_batch
from moetune.walls.efficiency import efficiency
from moetune.walls.memory import memory_wall
from moetune.walls.model_state import FP8_CACHE_BYTES
from moetune.walls.overheads import default_overheads
from moetune.walls.rank_params import stage_params

SPEC = load_model("qwen3-30b-a3b")
LAYOUT = Layout(world_size=16, ep=8)
WL = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256)
GIB = 2**30


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_default_is_what_bridges_preset_for_the_recipe_sets(precision):
    """Bridge's preset of each recipe (rules.yaml mixed_precision_recipes, from training/mixed_precision.py):
    the FP8 tensor-scaled and MXFP8 ones keep FP8 parameters, blockwise and NVFP4 do not."""
    preset = load_table().mixed_precision_recipes[PRECISION_PRESET[precision]]
    assert Knobs(precision=precision).fp8_params == bool(preset.get("fp8_param_gather", False))


def test_fp8_parameters_drop_the_bf16_copy_of_every_quantized_weight():
    """Per GEMM weight 2 B less: the FP8 bytes stay (row-wise data in DDP's uint8 buffer plus TE's transpose), the
    BF16 weight goes; the parameters no TE GEMM reads (embedding, output layer, router, norms) stay BF16 either way."""
    on, off = Knobs(precision="fp8-current"), Knobs(precision="fp8-current", fp8_param_gather=False)
    p = stage_params(SPEC, LAYOUT)[0]
    quantized = p.quantized  # the GEMM weights (hand-counted in test_fp8_gemm_weights.py)
    kept, held = memory_wall(SPEC, LAYOUT, WL, on, arch="hopper")[0].items, memory_wall(
        SPEC, LAYOUT, WL, off, arch="hopper")[0].items
    assert kept["weights"] == 2 * (p.total - quantized) and "fp8_weight_cache" not in kept
    assert kept["fp8_weights"] == held["fp8_weight_cache"] == 2 * quantized
    assert held["weights"] - kept["weights"] == 2 * quantized


@pytest.mark.parametrize("fp8_params", [True, False])
@pytest.mark.parametrize("precision", ["fp8-delayed", "fp8-current"])
def test_tensor_scaled_fp8_weights_keep_no_transpose_on_blackwell(precision, fp8_params):
    """Transformer Engine allocates a Float8Tensor's transpose only where FP8 GEMMs need the TN layout
    (pytorch/csrc/quantizer.cpp: columnwise_usage && !nvte_is_non_tn_fp8_gemm_supported(), which is true from
    compute capability 10.0): on B200/GB200 a tensor-scaled weight, parameter or cached workspace, is its 1-byte
    row-wise data, on H100 that plus its 1-byte transpose, in estimate and in the planner's batch alike."""
    knobs = Knobs(precision=precision, fp8_param_gather=fp8_params)
    p = stage_params(SPEC, LAYOUT)[0]
    quantized = p.quantized  # the GEMM weights (hand-counted in test_fp8_gemm_weights.py)
    item = "fp8_weights" if fp8_params else "fp8_weight_cache"
    batch = build_batch(SPEC, [(LAYOUT, 1)])
    for gpu, per_weight in (("h100", 2), ("b200", 1), ("gb200", 1)):
        e = estimate(SPEC, load_gpu(gpu), LAYOUT, WL, knobs)
        assert e.stages[0].items[item] == per_weight * quantized, gpu
        peak = batch_memory(SPEC, batch, WL.seq_length, WL.global_batch_size, knobs, default_overheads(),
                            arch=e.gpu.arch)[0]
        assert float(peak) == pytest.approx(e.peak_bytes, rel=1e-9), gpu


@pytest.mark.parametrize(("precision", "per_weight"), [("fp8-blockwise", 2 + 2 * 4 / 128**2), ("mxfp8", 2 + 2 / 32),
                                                       ("nvfp4", 2 * 0.5 + 2 / 16)])
def test_block_scaled_weights_keep_both_copies_on_blackwell(precision, per_weight):
    """Float8BlockQuantizer, MXFP8Quantizer and NVFP4Quantizer allocate row- and column-wise data whatever the GPU."""
    p = stage_params(SPEC, LAYOUT)[0]
    items = estimate(SPEC, load_gpu("b200"), LAYOUT, WL, Knobs(precision=precision)).stages[0].items
    cached = items.get("fp8_weights", items.get("fp8_weight_cache"))
    assert cached == pytest.approx(per_weight * p.quantized, abs=1)


def test_the_batch_path_tells_the_two_apart():
    """The planner's batched memory keys its model states on the switch too (a memo shared by both knob sets)."""
    gpu = load_gpu("b200")
    on, off = Knobs(precision="mxfp8"), Knobs(precision="mxfp8", fp8_param_gather=False)
    batch = build_batch(SPEC, [(LAYOUT, 1)])
    peaks = [float(batch_memory(SPEC, batch, WL.seq_length, WL.global_batch_size, k, default_overheads(),
                                arch=gpu.arch)[0]) for k in (on, off)]
    assert peaks == pytest.approx([estimate(SPEC, gpu, LAYOUT, WL, k).peak_bytes for k in (on, off)], rel=1e-9)
    assert peaks[1] - peaks[0] > GIB


@pytest.mark.parametrize("precision", ["bf16", "nvfp4"])
def test_fp8_parameters_need_an_fp8_recipe(precision):
    with pytest.raises(MoetuneError, match="fp8_param_gather needs an FP8 recipe") as refused:
        Knobs(precision=precision, fp8_param_gather=True)
    assert refused.value.same_as == ("precision.fp8_params_without_fp8",)  # as the NVFP4 twin names its rule
    assert not Knobs(precision=precision).fp8_params


def test_a_non_boolean_switch_is_refused():
    with pytest.raises(MoetuneError, match="fp8_param_gather is 'yes'"):
        Knobs(precision="mxfp8", fp8_param_gather="yes")


def test_blockwise_weights_carry_one_scale_per_128x128_block():
    """TE's Float8BlockScaling quantizes weights in 128x128 blocks (w_block_scaling_dim=2): a 4096x4096 weight holds
    its FP8 data both ways plus 32x32 FP32 scales each way (float8_blockwise_tensor.py get_scale_shape), not the
    4096x32 of 1x128 blocks."""
    rows = cols = 4096
    scales = 2 * (rows // 128) * (cols // 128) * 4
    assert FP8_CACHE_BYTES["fp8-blockwise"] * rows * cols == pytest.approx(2 * rows * cols + scales, rel=1e-12)


@pytest.mark.parametrize("precision", ["fp8-current", "mxfp8"])
def test_an_offloaded_optimizer_keeps_bf16_weights_outside_the_delayed_recipe(precision):
    """Megatron-LM refuses --fp8-param-gather with optimizer CPU offload but under the delayed recipe
    (training/arguments.py validate_args): an offloading plan defaults to BF16 weights, says so in its config, and
    refuses the switch stated on; the delayed recipe keeps its FP8 weights."""
    offload = dict(optimizer_offload_fraction=0.5)
    assert not Knobs(precision=precision, **offload).fp8_params
    assert Knobs(precision="fp8-delayed", **offload).fp8_params
    with pytest.raises(MoetuneError, match="delayed FP8 recipe"):
        Knobs(precision=precision, fp8_param_gather=True, **offload)
    e = estimate(SPEC, load_gpu("h100" if precision == "fp8-current" else "gb200"), LAYOUT, WL,
                 Knobs(precision=precision, **offload))
    assert to_config(e)["mixed_precision.fp8_param_gather"] is False


def test_one_batch_times_each_recipes_parameter_gather_as_estimate_does():
    """The batch memoizes the data-parallel terms across a search's knob sets; FP8 parameters gather in 1 byte under a
    tensor-scaled recipe (walls/iteration.py gathered_weight_bytes), so a batch timed under BF16 first must not lend
    that gather to fp8-current (an H100 grid pinned to bf16 and fp8-current, through the API), nor fp8-delayed its
    optimizer step to fp8-current: both gather 1 byte, but the step writes 1 byte under delayed scaling and re-reads
    the master for a fresh amax under current scaling (iteration.step_weight_bytes)."""
    gpu, lay = load_gpu("h100"), Layout(world_size=64, ep=8)
    batch = build_batch(SPEC, [(lay, 1)])
    for knobs in (Knobs(precision=p) for p in ("bf16", "fp8-delayed", "fp8-current", "fp8-blockwise")):
        step = batch_step_seconds(SPEC, batch, WL.seq_length, WL.global_batch_size, knobs, gpu, efficiency(gpu.key))
        assert float(step["step"][0]) == pytest.approx(estimate(SPEC, gpu, lay, WL, knobs).time["step_seconds"],
                                                      rel=1e-9), knobs.precision


@pytest.mark.parametrize("precision", ["fp8-current", "fp8-delayed", "mxfp8"])
def test_without_the_distributed_optimizer_the_weights_stay_bf16(precision):
    """Megatron-LM refuses --fp8-param-gather without the distributed optimizer (training/arguments.py validate_args;
    Muon's layer-wise one passes, as the flag is checked before Muon takes it over): the recipe preset's FP8 weights
    give way to BF16 ones and their FP8 cache there, the config says so, and the switch stated on is refused."""
    assert not Knobs(precision=precision, distributed_optimizer=False).fp8_params
    assert Knobs(precision=precision, optimizer="muon").fp8_params
    with pytest.raises(MoetuneError, match="fp8_param_gather needs the distributed optimizer"):
        Knobs(precision=precision, distributed_optimizer=False, fp8_param_gather=True)
    knobs = Knobs(precision=precision, distributed_optimizer=False)
    e = estimate(SPEC, load_gpu("gb200"), LAYOUT, WL, knobs)
    assert to_config(e)["mixed_precision.fp8_param_gather"] is False
    assert "fp8_weight_cache" in e.stages[0].items and "fp8_weights" not in e.stages[0].items


def test_a_saved_result_reloads_the_switch_as_given():
    """A saved result records fp8_param_gather as sized (the preset's value) and as given (fp8_param_gather_set, null:
    the preset's) and reloads as given: blockwise's preset off had been read back as a stated off, so explain --plan's
    move to the tensorwise recipe (fp8_current_scaling) kept BF16 weights where plan and explain with flags take FP8
    ones, and predicted another gain."""
    e = estimate(SPEC, load_gpu("h100"), LAYOUT, WL, Knobs(precision="fp8-blockwise"))
    saved = e.to_json()["knobs"]
    assert (saved["fp8_param_gather"], saved["fp8_param_gather_set"]) == (False, None)
    again = estimate_from_json(e.to_json())
    assert again.knobs.fp8_param_gather is None and replace(again.knobs, precision="fp8-current").fp8_params
    stated = estimate(SPEC, load_gpu("h100"), LAYOUT, WL, Knobs(precision="fp8-current", fp8_param_gather=False))
    assert estimate_from_json(stated.to_json()).knobs.fp8_param_gather is False
    old = stated.to_json()
    del old["knobs"]["fp8_param_gather_set"]  # saved before the key: as sized
    assert estimate_from_json(old).knobs.fp8_param_gather is False
