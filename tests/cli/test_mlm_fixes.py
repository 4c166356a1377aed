"""check, estimate and explain of a Megatron-LM launch say each rule's fix as Megatron-LM arguments (emit/mlm.py
mlm_fix_words); a Bridge config keeps its config names."""

import pytest
from cli_run import run

ARGS = "--expert-model-parallel-size 8 --bf16 --tensor-model-parallel-size 2"


@pytest.mark.parametrize("command", ["check", "estimate", "explain"])
def test_check_estimate_and_explain_of_a_megatron_lm_launch_give_megatron_lm_fixes(command, capsys):
    model = [] if command == "check" else ["qwen3-30b-a3b"]
    more = ["--model", "qwen3-30b-a3b"] if command == "check" else []
    code, out, err = run([command, *model, "--gpu", "h100", "--gpus", "16", "--mlm-args", ARGS, *more], capsys)
    flat = " ".join(out.split())
    assert "--moe-router-dtype fp32" in flat and "model.moe_router_dtype=fp32" not in flat, err
    assert "--expert-model-parallel-size 16 --expert-tensor-parallel-size 1" in flat


def test_a_bridge_config_keeps_its_config_names(capsys):
    code, out, _ = run(["check", "--set", "model.expert_model_parallel_size=8", "--set",
                        "model.tensor_model_parallel_size=2", "--gpu", "h100", "--gpus", "16", "--model",
                        "qwen3-30b-a3b"], capsys)
    assert "model.moe_router_dtype=fp32" in " ".join(out.split())
