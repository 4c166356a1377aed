"""Rule longctx.chunked_attention_bridge: moetune prices Llama 4's attention within its 8192-token chunks, which only
Megatron Bridge's Llama4ModelProvider runs (releases up to v0.3.1); estimate, explain and plan say so past the chunk,
and say nothing at the chunk or for a model that attends over the whole sequence."""

import pytest

from moetune.cli.main import main

RULE = "longctx.chunked_attention_bridge"
LAYOUT = ["--gpu", "gb200", "--gpus", "96", "--tp", "4", "--cp", "2", "--ep", "16", "--recompute", "full"]


def _out(capsys, args) -> str:
    assert main(args) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", ["estimate", "explain"])
def test_past_the_chunk_the_rule_names_the_bridge_release(command, capsys):
    out = _out(capsys, [command, "llama4-scout", *LAYOUT, "--seq", "131072"])
    line = next(x for x in out.splitlines() if RULE in x)
    assert line.startswith(f"Check warning {RULE}") and "8192-token chunks" in line and "up to v0.3.1" in line
    assert "62% of the FLOPs such a step runs" in line  # the estimate's counted_not_run, as its note quotes it


@pytest.mark.parametrize(("model", "seq"), [("llama4-scout", 8192), ("qwen3-30b-a3b", 131072)])
@pytest.mark.parametrize("command", ["estimate", "explain"])
def test_silent_at_the_chunk_and_without_chunks(command, model, seq, capsys):
    assert RULE not in _out(capsys, [command, model, *LAYOUT[:4], "--tp", "2", "--cp", "2", "--ep", "8",
                                     "--recompute", "full", "--seq", str(seq)])


@pytest.mark.parametrize(("seq", "fires"), [(131072, True), (8192, False)])
def test_plan_checks_its_pick(seq, fires, capsys):
    out = _out(capsys, ["plan", "llama4-scout", "--gpu", "gb200", "--gpus", "96", "--gbs", "96", "--seq", str(seq),
                        "--top", "3"])
    assert any(x.startswith(f"Check on #1 warning {RULE}") for x in out.splitlines()) == fires
