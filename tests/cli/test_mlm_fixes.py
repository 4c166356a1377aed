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


def test_estimate_and_explain_write_a_bridge_fix_as_check_does(capsys):
    """estimate/explain's check lines had written a fix's values as Python does (None, True, ['moe_act']), where check
    and the overrides files write null, true, [moe_act]; and rich had read brackets as markup, dropping
    cp.hcp_sizes' '[a2a, p2p]' from its message."""
    from moetune.cli.output import print_checks

    print_checks([{"severity": "error", "rule": "cp.hcp_sizes", "message": "needs sizes [a2a, p2p] whose product",
                   "fix": {}}])
    assert "needs sizes [a2a, p2p] whose product" in capsys.readouterr().out
    print_checks([{"severity": "warning", "rule": "fit.x", "message": "m",
                   "fix": {"model.recompute_method": None, "model.recompute_modules": ["moe_act", "mlp"],
                           "train.manual_gc": True}}])
    assert ("(fix: model.recompute_method=null, model.recompute_modules=[moe_act,mlp], train.manual_gc=true)"
            in " ".join(capsys.readouterr().out.split()))


def test_explain_writes_its_fit_steps_and_retune_moves_as_overrides(capsys):
    """explain's fit steps and Retune table had written their changes as Python does (True, None, ['layernorm',
    'moe_act']) where check and the overrides files write true, null, [layernorm,moe_act]; a Megatron-LM launch's
    steps are its arguments, as its check lines are."""
    layout = ["--gpu", "h100", "--gpus", "16", "--tp", "1", "--ep", "8", "--pp", "1", "--seq", "4096", "--gbs", "256"]
    code, out, err = run(["explain", "qwen3-30b-a3b", *layout], capsys)
    flat = " ".join(out.split())
    assert "model.recompute_modules=[layernorm,moe_act] -> peak" in flat, err
    assert "optimizer.optimizer_cpu_offload=true," in flat and "model.cuda_graph_scope=null" in flat
    assert "=True" not in flat and "=None" not in flat and "['" not in flat
    code, out, err = run(["explain", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--mlm-args",
                          "--expert-model-parallel-size 8 --bf16 --seq-length 4096 --global-batch-size 256"], capsys)
    flat = " ".join(out.split())
    assert "moe_act: --recompute-granularity selective --recompute-modules layernorm moe_act" in flat, err
    assert "model.recompute" not in flat


def test_a_fix_that_clears_recompute_drops_each_flag_once():
    """A fix clearing recompute_granularity and emptying recompute_modules had said --recompute-granularity twice
    ('drop --recompute-granularity, --recompute-granularity, --recompute-modules'), as explain's drop_recompute move
    on a Megatron-LM launch showed."""
    from moetune.emit.mlm import mlm_fix_words

    assert mlm_fix_words({"model.recompute_granularity": None, "model.recompute_modules": [],
                          "model.recompute_method": None}) == ("drop --recompute-granularity, --recompute-modules, "
                                                               "--recompute-method")
