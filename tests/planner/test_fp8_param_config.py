"""FP8 parameters (Knobs.fp8_param_gather) through the config a plan writes and reads, the estimate's JSON and the
BF16 twin fp8_evidence weighs."""

import contextlib
from dataclasses import replace

import pytest

from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.param_gather import FP8_RECIPES
from moetune.layout.validate import Workload
from moetune.planner.config_map import to_config
from moetune.planner.estimate import estimate
from moetune.planner.fp8_evidence import same_config_in_bf16
from moetune.planner.from_config import from_config
from moetune.planner.knob_fields import PRECISION
from moetune.rules.derive import derive
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model

SPEC = load_model("qwen3-30b-a3b")
LAYOUT = Layout(world_size=16, ep=8)
WL = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256)


@pytest.mark.parametrize("precision,gather", [("fp8-current", False), ("mxfp8", True), ("fp8-blockwise", True)])
def test_the_config_carries_the_switch_both_ways(precision, gather):
    """to_config writes what the wall sized (MXFP8 with the grad-buffer reuse Bridge asserts beside it), and
    from_config reads it back; a config silent on it keeps BF16 weights, as Bridge and Megatron-LM default it."""
    gpu = load_gpu("b200")
    e = estimate(SPEC, gpu, LAYOUT, WL, Knobs(precision=precision, fp8_param_gather=gather))
    config = {**to_config(e), "cluster.num_gpus": 16}
    assert config["mixed_precision.fp8_param_gather"] is gather
    assert config["mixed_precision.reuse_grad_buf_for_mxfp8_param_ag"] is (gather and precision == "mxfp8")
    assert from_config(config)[2].fp8_params is gather
    silent = {k: v for k, v in config.items() if not k.startswith("mixed_precision.fp8_param")}
    assert from_config(silent)[2].fp8_params is False
    assert e.to_json()["knobs"]["fp8_param_gather"] is gather


def test_the_bf16_twin_of_an_fp8_plan_drops_the_switch():
    """fp8_evidence's same-config-in-BF16 variant must not carry an FP8-only switch into BF16."""
    e = estimate(SPEC, load_gpu("h100"), LAYOUT, WL, Knobs(precision="fp8-current", fp8_param_gather=True))
    assert same_config_in_bf16(e).knobs == replace(e.knobs, precision="bf16", fp8_param_gather=None)


@pytest.mark.parametrize("precision", sorted(FP8_RECIPES))
def test_the_rules_and_the_knobs_refuse_fp8_weights_beside_the_offload_alike(precision):
    """Megatron-LM steps FP8 weights in the optimizer's CPU offload under the delayed recipe alone (validate_args):
    check's derived fact (rules fit.does_not_fit, precision.fp8_params_with_optimizer_offload) and the knobs the
    estimate and planner build ask one test, layout/param_gather.py offload_refuses_params."""
    config = {"mixed_precision.bf16": True, **PRECISION[precision], "mixed_precision.fp8_param_gather": True}
    refused = derive(config)["offload_refuses_fp8_params"]
    assert refused is (precision != "fp8-delayed")
    knobs = {"precision": precision, "fp8_param_gather": True, "optimizer_offload_fraction": 1.0}
    with pytest.raises(MoetuneError, match="delayed") if refused else contextlib.nullcontext():
        Knobs(**knobs)
