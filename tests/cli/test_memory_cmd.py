"""`moetune memory`: estimate's memory answer alone, the same numbers."""

import json

from tests.cli.cli_run import run

ARGS = ["deepseek-v3", "--gpu", "h100", "--gpus", "1024", "--tp", "2", "--pp", "8", "--vpp", "4", "--ep", "64",
        "--pipeline-layout", "Et|(tt|)*30mL", "--recompute", "selective", "--recompute-modules", "mla_up_proj,mlp"]


def test_memory_is_estimates_memory_without_the_time(capsys):
    code, out, err = run(["memory", *ARGS, "--json"], capsys)
    assert code == 0, err
    memory = json.loads(out)
    code, out, _ = run(["estimate", *ARGS, "--json"], capsys)
    estimate = json.loads(out)
    assert "time" not in memory and "time" in estimate
    assert memory["stages"] == estimate["stages"] and memory["memory"] == estimate["memory"]
    assert len(memory["stages"]) == 8  # one per pipeline stage


def test_memory_table_names_the_peak_and_the_verdict(capsys):
    code, out, _ = run(["memory", *ARGS], capsys)
    assert code == 0 and "Memory per rank (GiB) by pipeline stage" in out and "usable: fits" in out
    assert "Step time" not in out


def test_a_layout_that_cannot_be_is_one_line(capsys):
    code, _, err = run(["memory", "deepseek-v3", "--gpu", "h100", "--gpus", "1024", "--ep", "3"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--ep" in err


def test_a_configuration_megatron_refuses_exits_1_as_estimate_does(capsys):
    args = ["memory", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--dispatcher", "deepep",
            "--cuda-graph-scope", "full_iteration"]
    code, out, err = run(args, capsys)
    assert code == 1 and "Memory per rank" in out and "rule error(s)" in err
    code, out, _ = run([*args, "--json"], capsys)
    assert code == 1 and {c["rule"] for c in json.loads(out)["checks"]} >= {"cudagraph.full_iteration_dropless"}


def test_a_saved_plan_as_model_is_named_as_one(tmp_path, capsys):
    code, out, _ = run(["estimate", *ARGS, "--json"], capsys)
    (tmp_path / "e.json").write_text(out)
    code, _, err = run(["memory", str(tmp_path / "e.json"), "--gpu", "h100", "--gpus", "1024"], capsys)
    assert code == 2 and "a moetune plan or estimate output, not a model" in err


def test_nvfp4_weights_are_named_so_in_the_table_and_keep_their_json_key(capsys):
    """The quantized weights' line keeps its JSON key (fp8_weights) under every recipe; the table says NVFP4 holds
    them in FP4 (new-user test: it read fp8_weights under NVFP4)."""
    args = ["memory", "qwen3-30b-a3b", "--gpu", "b200", "--gpus", "16", "--ep", "8", "--precision", "nvfp4"]
    _, text, _ = run(args, capsys)
    _, raw, _ = run([*args, "--json"], capsys)
    assert "fp4_weights (NVFP4)" in text and "fp8_weights" not in text
    assert '"fp8_weights"' in raw


def test_memory_says_which_knobs_and_batch_it_defaulted_as_estimate_does(capsys):
    """The table holds deepep_buffers, fp8_weight_cache and cuda_graph_pool lines for knobs the flags never named:
    memory had left out the line that says so (estimate printed it beside the step time). On H200 (Hopper) the seeds'
    defaults are DeepEP + FP8 blockwise with TE-scoped graphs (README, Knobs left out)."""
    args = ["qwen3-next-80b-a3b", "--gpu", "h200", "--gpus", "32", "--ep", "16", "--pp", "2"]
    code, out, _ = run(["memory", *args, "--gbs", "256"], capsys)
    assert code == 0 and "deepep_buffers" in out and "cuda_graph_pool" in out
    (line,) = [x for x in out.splitlines() if x.startswith("defaulted to platform values: ")]
    assert "precision=fp8-blockwise" in line and "dispatcher=deepep" in line
    assert "global batch defaulted" not in out  # --gbs was given
    code, estimate, _ = run(["estimate", *args, "--gbs", "256"], capsys)
    assert line in estimate.splitlines()  # the same line, not a second wording
    code, out, _ = run(["memory", *args], capsys)
    assert code == 0 and "global batch defaulted to MBS x DP x PP = 32" in out  # 1 x 16 x 2
    code, out, _ = run(["memory", *ARGS, "--precision", "bf16", "--dispatcher", "alltoall", "--cuda-graph-scope",
                        "none", "--gbs", "8192"], capsys)
    assert code == 0 and "dispatcher=" not in out and "precision=" not in out
