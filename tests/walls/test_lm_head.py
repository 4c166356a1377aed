"""The LM head's precision: Megatron builds it as its own ColumnParallelLinear, outside Transformer Engine's FP8
autocast, so it runs in BF16 under any FP8 recipe; fp8_output_proj (MXFP8 only) makes it a TE layer under MXFP8
(megatron/core/models/gpt/gpt_model.py, fp8_utils.is_mxfp8_output_proj_active)."""

import pytest

from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.config_map import to_config
from moetune.planner.estimate import estimate
from moetune.planner.from_config import from_config
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.efficiency import efficiency

GPU = load_gpu("gb200")


def _logits(**knobs) -> float:
    e = estimate(load_model("gpt-oss-120b"), GPU, Layout(world_size=64, ep=64),
                 Workload(seq_length=4096, micro_batch_size=4, global_batch_size=1280),
                 Knobs(dispatcher="hybridep", **knobs))
    return e.time["compute_by_class"]["logits"]


def test_fp8_recipes_leave_the_lm_head_in_bf16():
    assert _logits(precision="mxfp8") == pytest.approx(_logits(precision="bf16"), rel=1e-12)


def test_fp8_output_proj_runs_it_at_the_mxfp8_gemm_rate():
    eff = efficiency("gb200")
    bf16_rate = GPU.bf16_tflops * eff["gemm_eff"]
    fp8_rate = GPU.peak_tflops("mxfp8") * eff["fp8_gemm_eff"]
    ratio = _logits(precision="mxfp8", fp8_output_proj=True) / _logits(precision="mxfp8")
    assert ratio == pytest.approx(bf16_rate / fp8_rate, rel=1e-12)
    assert ratio < 1


@pytest.mark.parametrize("precision", ["bf16", "fp8-blockwise", "fp8-current", "nvfp4"])
def test_fp8_output_proj_outside_mxfp8_is_refused(precision):
    with pytest.raises(MoetuneError, match="fp8_output_proj needs --precision mxfp8"):
        Knobs(precision=precision, fp8_output_proj=True)


def test_bridge_config_round_trip():
    e = estimate(load_model("deepseek-v3"), GPU, Layout(world_size=256, pp=4, ep=64, first_stage_layers=16),
                 Workload(seq_length=4096, micro_batch_size=1, global_batch_size=4096),
                 Knobs(precision="mxfp8", dispatcher="hybridep", fp8_output_proj=True))
    config = to_config(e)
    assert config["model.fp8_output_proj"] is True
    assert from_config(config)[2].fp8_output_proj
    # a config that asks for it outside MXFP8 is Megatron's error (rule precision.fp8_output_proj_needs_mxfp8);
    # its time is that of the LM head Megatron would build, in BF16
    assert not from_config({**config, "mixed_precision.fp8_recipe": "blockwise"})[2].fp8_output_proj


def test_cli_refuses_the_flag_outside_mxfp8_in_one_line(capsys):
    from moetune.cli.main import main
    code = main(["estimate", "gpt-oss-120b", "--gpu", "gb200", "--gpus", "64", "--ep", "64", "--precision", "bf16",
                 "--fp8-output-proj"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "fp8_output_proj needs --precision mxfp8" in err


def test_fp8_output_proj_keeps_an_mxfp8_copy_of_the_lm_head_weight():
    """The TE LM head is built outside the layers' FP8-parameter init (transformer_block.py), so its BF16 weight stays
    and TE caches its MXFP8 copy (row- and column-wise bytes and one E8M0 scale per 32 each way): gpt-oss-120b's
    201,088-token vocabulary (padded to 201,088) x 2,880 hidden on the stage holding the loss, about 1.1 GiB at TP 1,
    alike in estimate and the planner's batch."""
    from moetune.walls.batch_bytes import batch_memory
    from moetune.walls.batch_layouts import build_batch
    from moetune.walls.overheads import default_overheads

    spec, lay = load_model("gpt-oss-120b"), Layout(world_size=64, ep=64)
    wl = Workload(seq_length=4096, micro_batch_size=4, global_batch_size=1280)
    knobs = {flag: Knobs(precision="mxfp8", dispatcher="hybridep", fp8_output_proj=flag) for flag in (False, True)}
    estimates = {flag: estimate(spec, GPU, lay, wl, k) for flag, k in knobs.items()}
    peaks = {flag: e.peak_bytes for flag, e in estimates.items()}
    assert estimates[True].stages[-1].items["fp8_output_proj_cache"] == pytest.approx(201_088 * 2_880 * (2 + 2 / 32))
    assert "fp8_output_proj_cache" not in estimates[False].stages[-1].items and peaks[True] > peaks[False]
    batch = build_batch(spec, [(lay, 4)])
    for flag, k in knobs.items():
        assert float(batch_memory(spec, batch, 4096, 1280, k, default_overheads(), arch=GPU.arch)[0]) == pytest.approx(
            peaks[flag], rel=1e-9)
