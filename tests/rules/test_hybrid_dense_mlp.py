"""A Mamba hybrid builds dense MLP layers only where its hybrid_layer_pattern says '-' (Megatron-Core
hybrid_layer_allocation.py): NVIDIA-Nemotron-3-Nano-30B-A3B (Mamba, attention and MoE layers only) has no layer that
splits ffn_hidden_size over TP, so the width rules read no dense FFN there, though the per-layer moe_layer_freq moetune
emits beside the pattern has 0s for its Mamba and attention layers."""

import json

from moetune.cli.main import main


def _estimate(shared_data, capsys, *layout: str) -> tuple[int, dict]:
    config = str(shared_data / "models" / "nemotron3-nano-30b-a3b.config.json")
    rc = main(["estimate", config, "--gpu", "b200", "--gpus", "64", "--pp", "2", "--seq", "16384", "--json", *layout])
    return rc, json.loads(capsys.readouterr().out)


def test_tp8_mxfp8_has_no_dense_ffn_to_refuse(shared_data, capsys):
    """TP 8 under MXFP8: ffn_hidden_size 1856 / 8 = 232 is no multiple of 16, but no Nemotron-3-Nano layer runs that
    GEMM (the shared expert's 3712 / 8 = 464 and the routed experts' 1856 / ETP 4 = 464 are the ones that do)."""
    rc, out = _estimate(shared_data, capsys, "--tp", "8", "--ep", "2", "--etp", "4", "--cp", "2")
    assert [c["rule"] for c in out["checks"] if c["severity"] == "error"] == []
    assert rc == 0


def _rules(pattern: str) -> set[str]:
    from moetune.configio import load_config
    from moetune.rules import evaluate

    return {f.rule for f in evaluate(load_config(sets=[
        f"model.hybrid_layer_pattern={pattern}", "model.is_hybrid_model=true", "model.num_moe_experts=8",
        "model.moe_layer_freq=[0,0,1,0]", "model.ffn_hidden_size=1000", "model.moe_ffn_hidden_size=512",
        "model.tensor_model_parallel_size=16"]))}


def test_a_pattern_with_mlp_layers_still_checks_their_width():
    """A hybrid whose pattern has '-' layers keeps the dense FFN's TP rule (shape.ffn_divisible_by_tp)."""
    assert "shape.ffn_divisible_by_tp" in _rules("M-E*")
    assert "shape.ffn_divisible_by_tp" not in _rules("MME*")
