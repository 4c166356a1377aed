"""The MoE router's dtype (Knobs.moe_router_dtype, Megatron's moe_router_dtype) as moetune reads it from a config, a
published run and a saved result, and writes it back: a Bridge config that leaves it out runs its model bridge's
(gpt-oss': unset, BF16 probabilities; DeepSeek's: FP32), Megatron-LM arguments Megatron's None, and what a plan was
priced with is what its config states."""

import json

import pytest

from moetune.configio import load_config
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.config_map import to_config
from moetune.planner.estimate import estimate
from moetune.planner.from_config import from_config
from moetune.planner.from_json import estimate_from_json
from moetune.planner.runs import load_runs
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model

GPT_OSS, DSV3 = load_model("gpt-oss-120b"), load_model("deepseek-v3")
LAYOUT = "Et*4|(t*4|)*14tmL"  # DeepSeek-V3 on 256 GB200 (tests/planner/test_config_map.py)
SETS = ["model.expert_model_parallel_size=8", "train.global_batch_size=32", "train.micro_batch_size=4"]


def _router(model, sets=(), mlm_args=None):
    config = load_config(sets=[*SETS, *sets] if mlm_args is None else list(sets), mlm_args=mlm_args, gpu="b200",
                         gpus=8)
    return from_config(config, model)[2].moe_router_dtype


def test_a_bridge_config_that_leaves_it_out_runs_the_model_bridge_s():
    assert (_router(GPT_OSS), _router(DSV3)) == (None, "fp32")


@pytest.mark.parametrize("value", ["fp32", "fp64", None])
def test_a_config_s_own_value_stands(value):
    assert _router(GPT_OSS, [f"model.moe_router_dtype={value or 'null'}"]) == value


def test_a_bridge_config_s_bf16_runs_as_none():
    """Bridge's DeepSeek-V3 GB300 perf recipe sets moe_router_dtype = "bf16", which Megatron-Core's router runs in the
    activations' dtype (only fp32 and fp64 change it): read, not refused, and priced as unset (a review finding)."""
    assert _router(DSV3, ["model.moe_router_dtype=bf16"]) is None


def test_megatron_lm_arguments_that_leave_it_out_run_megatron_s_none():
    args = "--bf16 --expert-model-parallel-size 8 --micro-batch-size 4 --global-batch-size 32"
    assert _router(DSV3, mlm_args=args) is None
    assert _router(GPT_OSS, mlm_args=f"{args} --moe-router-dtype fp32") == "fp32"


def test_a_gpt_oss_bridge_config_without_it_is_priced_with_bf16_probabilities():
    config = load_config(sets=SETS, gpu="b200", gpus=8)
    silent = estimate(GPT_OSS, load_gpu("b200"), *from_config(config, GPT_OSS))
    fp32 = estimate(GPT_OSS, load_gpu("b200"), *from_config({**config, "model.moe_router_dtype": "fp32"}, GPT_OSS))
    assert fp32.time["compute_by_class"]["expert_bias"] / silent.time["compute_by_class"]["expert_bias"] == \
        pytest.approx(68 / 28)


def test_published_runs_ran_their_model_bridge_s():
    dtypes = {(r.model.name, r.knobs.moe_router_dtype) for r in load_runs() if r.model.name in ("gpt-oss-120b",
                                                                                                "deepseek-v3")}
    assert dtypes == {("gpt-oss-120b", None), ("deepseek-v3", "fp32")}


@pytest.mark.parametrize("value", ["fp32", "fp64", None])
def test_a_plan_s_config_and_saved_result_keep_it(value):
    """None is written too (a recipe's model bridge may set FP32), and read back as None, not the bridge's."""
    e = estimate(DSV3, load_gpu("gb200"), Layout(world_size=256, pp=4, vpp=4, ep=64, pipeline_layout=LAYOUT),
                 Workload(seq_length=4096, global_batch_size=1024), Knobs(moe_router_dtype=value))
    config = to_config(e)
    assert config["model.moe_router_dtype"] == value
    assert from_config(config, DSV3)[2].moe_router_dtype == value
    assert estimate_from_json(e.to_json()).knobs.moe_router_dtype == value


def test_an_unknown_dtype_is_refused_in_one_line():
    with pytest.raises(Exception, match="moe_router_dtype 'bf16': choose fp32, fp64 or null"):
        Knobs(moe_router_dtype="bf16")


def test_a_result_saved_before_the_knob_reloads_fp32_listed_as_defaulted(tmp_path, capsys):
    """A saved result without knobs.moe_router_dtype (saved before moetune recorded it) is rebuilt with the FP32
    router every plan's config set, and that is listed as defaulted, as estimate lists its own, where it moves the
    estimate (the fc2 bias pass of gpt-oss's biased experts), and explain says so; a recorded value is the result's."""
    from moetune.cli.main import main
    e = estimate(GPT_OSS, load_gpu("b200"), Layout(world_size=8, ep=8), Workload(seq_length=4096, global_batch_size=32),
                 Knobs(dispatcher="alltoall"))
    e.defaulted = ["global_batch_size"]
    saved = e.to_json()
    assert estimate_from_json(saved).defaulted == ["global_batch_size"]  # the saved list stands
    del saved["knobs"]["moe_router_dtype"]
    old = estimate_from_json(saved)
    assert old.knobs.moe_router_dtype == "fp32" and old.defaulted == ["global_batch_size", "moe_router_dtype"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(saved))
    assert main(["explain", "--plan", str(path)]) == 0
    assert "moe_router_dtype was not given: fp32" in capsys.readouterr().out
    dsv3 = estimate(DSV3, load_gpu("gb200"), Layout(world_size=256, pp=4, vpp=4, ep=64, pipeline_layout=LAYOUT),
                    Workload(seq_length=4096, global_batch_size=1024), Knobs()).to_json()
    del dsv3["knobs"]["moe_router_dtype"]
    assert estimate_from_json(dsv3).defaulted == []  # no biased experts: the dtype moves nothing there
