"""NVFP4 parameters (Knobs.fp4_param_gather): the weights held as NVFP4 tensors alone, without the BF16 copy
(walls/model_state.py), gathered as packed 4-bit data (walls/iteration.py), and through the config a plan writes and
reads."""

from dataclasses import replace

import pytest

from moetune.errors import MoetuneError
from moetune.layout.knobs import PRECISIONS, Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.config_map import to_config
from moetune.planner.estimate import estimate
from moetune.planner.fp8_evidence import same_config_in_bf16
from moetune.planner.from_config import from_config
from moetune.planner.knob_fields import PRECISION_PRESET
from moetune.rules.table import load_table
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.batch import batch_step_seconds
from moetune.walls.batch_bytes import batch_memory
from moetune.walls.batch_layouts import build_batch
from moetune.walls.efficiency import efficiency
from moetune.walls.iteration import gathered_weight_bytes
from moetune.walls.memory import memory_wall
from moetune.walls.overheads import default_overheads
from moetune.walls.rank_params import stage_params

SPEC = load_model("qwen3-30b-a3b")
LAYOUT = Layout(world_size=16, ep=8)
WL = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256)
GIB = 2**30
ON, OFF = Knobs(precision="nvfp4"), Knobs(precision="nvfp4", fp4_param_gather=False)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_default_is_what_bridges_preset_for_the_recipe_sets(precision):
    """bf16_with_nvfp4_mixed sets fp4_param_gather=True (rules.yaml mixed_precision_recipes, from Bridge's
    training/mixed_precision.py); no other preset does."""
    preset = load_table().mixed_precision_recipes[PRECISION_PRESET[precision]]
    assert Knobs(precision=precision).fp4_params == bool(preset.get("fp4_param_gather", False))


def test_nvfp4_parameters_drop_the_bf16_copy_of_every_quantized_weight():
    """An NVFP4Tensor weight holds packed E2M1 data row- and column-wise (0.5 B an element each) and an E4M3 scale per
    16 elements each way; with NVFP4 parameters that is all a GEMM weight holds, the BF16 weight goes."""
    p = stage_params(SPEC, LAYOUT)[0]
    quantized = p.quantized  # the GEMM weights (hand-counted in test_fp8_gemm_weights.py)
    kept, held = memory_wall(SPEC, LAYOUT, WL, ON, arch="blackwell")[0].items, memory_wall(
        SPEC, LAYOUT, WL, OFF, arch="blackwell")[0].items
    assert kept["weights"] == 2 * (p.total - quantized) and "fp8_weight_cache" not in kept
    assert kept["fp8_weights"] == held["fp8_weight_cache"] == pytest.approx((2 * 0.5 + 2 / 16) * quantized, abs=1)
    assert held["weights"] - kept["weights"] == 2 * quantized


def test_the_gather_moves_packed_data_and_the_tile_amaxes():
    """DDP's NVFP4 parameter buffer holds half a byte an element (nvfp4_packed_numel); before it the step all-reduces
    one FP32 amax per 16x16 tile (an all-reduce: twice a gather's bytes). BF16 weights under NVFP4 gather 2 B."""
    assert gathered_weight_bytes(ON) == pytest.approx(0.5 + 2 * 4 / (16 * 16))
    assert gathered_weight_bytes(OFF) == 2


def test_the_batch_path_is_estimate_for_both():
    """The planner's batched memory and step time (memoized across knob sets) match estimate's with the switch on and
    off, timed in one batch after BF16."""
    gpu, lay = load_gpu("b200"), Layout(world_size=64, ep=8)
    batch = build_batch(SPEC, [(lay, 1)])
    eff = efficiency(gpu.key)
    for knobs in (Knobs(precision="bf16"), ON, OFF):
        e = estimate(SPEC, gpu, lay, WL, knobs)
        peak = batch_memory(SPEC, batch, WL.seq_length, WL.global_batch_size, knobs, default_overheads(),
                            arch=gpu.arch)[0]
        step = batch_step_seconds(SPEC, batch, WL.seq_length, WL.global_batch_size, knobs, gpu, eff)["step"][0]
        assert float(peak) == pytest.approx(e.peak_bytes, rel=1e-9), knobs
        assert float(step) == pytest.approx(e.time["step_seconds"], rel=1e-9), knobs
    assert estimate(SPEC, gpu, lay, WL, OFF).peak_bytes - estimate(SPEC, gpu, lay, WL, ON).peak_bytes > GIB


@pytest.mark.parametrize("precision", ["bf16", "mxfp8", "fp8-current"])
def test_nvfp4_parameters_need_nvfp4(precision):
    with pytest.raises(MoetuneError, match="fp4_param_gather needs --precision nvfp4"):
        Knobs(precision=precision, fp4_param_gather=True)
    with pytest.raises(MoetuneError, match="fp4_param_gather is 'yes'"):
        Knobs(precision="nvfp4", fp4_param_gather="yes")


def test_the_nvfp4_preset_needs_the_distributed_optimizer_a_stated_switch_does_not():
    """The preset keeps NVFP4 weights only with the distributed optimizer, whose shards quantize_nvfp4_param_shard
    casts back (param_gather.py preset_off); Megatron asserts nothing of fp4_param_gather without it, so a stated one
    stands, where a stated fp8_param_gather is refused (its need)."""
    assert not Knobs(precision="nvfp4", distributed_optimizer=False).fp4_params
    assert Knobs(precision="nvfp4", distributed_optimizer=False, fp4_param_gather=True).fp4_params
    assert Knobs(precision="nvfp4", optimizer="muon").fp4_params  # Muon's layer-wise distributed optimizer


@pytest.mark.parametrize("gather", [True, False])
def test_the_config_carries_the_switch_both_ways(gather):
    """to_config writes what the wall sized and from_config reads it back (fp4_param, which Bridge keeps in step, too);
    a config silent on it keeps BF16 weights, as Bridge's MixedPrecisionConfig and Megatron-LM default it."""
    e = estimate(SPEC, load_gpu("b200"), LAYOUT, WL, Knobs(precision="nvfp4", fp4_param_gather=gather))
    config = {**to_config(e), "cluster.num_gpus": 16}
    assert config["mixed_precision.fp4_param_gather"] is gather
    assert from_config(config)[2].fp4_params is gather
    silent = {k: v for k, v in config.items() if k != "mixed_precision.fp4_param_gather"}
    assert from_config(silent)[2].fp4_params is False
    assert from_config({**silent, "mixed_precision.fp4_param": gather})[2].fp4_params is gather
    assert e.to_json()["knobs"]["fp4_param_gather"] is gather


def test_the_bf16_twin_of_an_nvfp4_plan_drops_the_switch():
    e = estimate(SPEC, load_gpu("b200"), LAYOUT, WL, Knobs(precision="nvfp4", fp4_param_gather=True))
    assert same_config_in_bf16(e).knobs == replace(e.knobs, precision="bf16", fp4_param_gather=None)
    assert to_config(same_config_in_bf16(e))["mixed_precision.fp4_param_gather"] is False


def test_an_offloaded_optimizer_keeps_bf16_weights_under_nvfp4():
    """No optimizer CPU offload steps NVFP4 weights: the offload takes Megatron-Core's precision-aware path, and the
    distributed optimizer builds no shard of an NVFP4Tensor to hand its HybridDeviceOptimizer nor casts the master back
    (distrib_optimizer.py). An offloading NVFP4 plan defaults to BF16 weights, says so in its config, and refuses the
    switch stated on, as under a non-delayed FP8 recipe."""
    offload = dict(optimizer_offload_fraction=0.5)
    assert not Knobs(precision="nvfp4", **offload).fp4_params
    with pytest.raises(MoetuneError, match="fp4_param_gather with the optimizer's CPU offload") as refused:
        Knobs(precision="nvfp4", fp4_param_gather=True, **offload)
    assert refused.value.same_as == ("precision.fp4_params_with_optimizer_offload",)
    e = estimate(SPEC, load_gpu("b200"), LAYOUT, WL, Knobs(precision="nvfp4", **offload))
    assert to_config(e)["mixed_precision.fp4_param_gather"] is False
    assert "fp8_weights" not in e.stages[0].items and "fp8_weight_cache" in e.stages[0].items
