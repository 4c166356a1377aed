"""Bad input to any command: one line naming what is wrong, exit code 2, never a traceback (a JSON object
too under --json)."""

import json
import subprocess
import sys

import pytest
from cli_run import run


@pytest.mark.parametrize(("args", "needle"), [
    (["estimate", "no-such-model", "--gpu", "h100", "--gpus", "8"], "unknown model"),
    (["estimate", "mixtral-8x7b", "--gpu", "tpu9", "--gpus", "8"], "unknown GPU"),
    (["estimate", "mixtral-8x7b", "--gpu", "h100", "--gpus", "8", "--ep", "16"], "ETP*EP*PP"),
    (["estimate", "mixtral-8x7b", "--gpu", "h100", "--gpus", "16", "--ep", "16"], "num_moe_experts"),
    (["estimate", "deepseek-v3", "--gpu", "h100", "--gpus", "64", "--pp", "8", "--ep", "8"], "num_layers (61)"),
    (["estimate", "mixtral-8x7b", "--gpu", "h100", "--gpus", "8", "--ep", "8", "--gbs", "7"], "global batch size"),
    (["estimate", "mixtral-8x7b", "--gpu", "h100", "--gpus", "8", "--recompute-modules", "attn"], "recompute module"),
    (["estimate", "mixtral-8x7b", "--gpu", "h100", "--gpus", "8", "--optimizer-offload", "1.5"], "optimizer-offload"),
    (["estimate", "deepseek-v3", "--gpu", "h100", "--gpus", "16", "--pp", "2", "--ep", "8",
      "--pipeline-layout", "Et*30|t*30mL"], "places 60 decoder layers"),
    (["estimate", "mixtral-8x7b", "--gpu", "a100", "--gpus", "8", "--precision", "fp8-blockwise"], "no fp8"),
    (["estimate", "mixtral-8x7b", "--gpu", "h100", "--gpus", "8", "--precision", "mxfp8"], "needs a Blackwell"),
    (["estimate", "mixtral-8x7b", "--gpu", "h100", "--gpus", "8", "--bogus"], "No such option"),
    (["estimate", "qwen3-235b-a22b", "--gpu", "h100", "--gpus", "256", "--tp", "4", "--cp", "8", "--pp", "8",
      "--ep", "8", "--seq", "131072", "--account-for-embedding", "--account-for-loss", "--cp-comm-type", "a2a+p2p",
      "--hcp-a2a-size", "3"], "must divide CP (8)"),
    (["estimate", "mixtral-8x7b", "--gpu", "h100", "--gpus", "8", "--hcp-a2a-size", "2"],
     "--hcp-a2a-size 2 sizes the a2a group of --cp-comm-type a2a+p2p, but --cp-comm-type is left at auto and CP is 1"),
    # an a2a size beside auto: one line says so, and that CP 3 hosts no a2a+p2p group (nor 8 one of 3), or to add it
    (["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "24", "--ep", "8", "--seq", "6144", "--cp", "3",
      "--hcp-a2a-size", "3"], "left at auto, and CP 3 cannot host a group of 3 (it must divide CP and split a TP "
     "rank's heads): drop --hcp-a2a-size (no a2a group of 2 or more runs a2a+p2p at CP 3"),
    (["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "8", "--cp", "8", "--hcp-a2a-size", "3",
      "--cp-comm-type", "p2p"], "but --cp-comm-type is p2p, and CP 8 cannot host a group of 3"),
    (["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "8", "--cp", "8", "--hcp-a2a-size", "2"],
     "but --cp-comm-type is left at auto: add --cp-comm-type a2a+p2p, or drop --hcp-a2a-size"),
    (["estimate", "mixtral-8x7b", "--gpu", "h100", "--gpus", "8", "--cp-comm-type", "a2a"], "CP is 1 here"),
    (["estimate", "mixtral-8x7b", "--gpu", "h100", "--gpus", "8", "--cuda-graph-scope", ""],
     "--cuda-graph-scope is empty"),
    (["estimate", "qwen3-235b-a22b", "--gpu", "h100", "--gpus", "256", "--tp", "4", "--cp", "8", "--pp", "8",
      "--ep", "8", "--seq", "131072", "--account-for-embedding", "--account-for-loss", "--cp-comm-type", "a2a+p2p"],
     "no a2a group of 2 or more that divides CP, splits the 1 KV groups of a TP 4 rank and fits the 8-GPU NVLink"),
    (["plan", "mixtral-8x7b", "--gpu", "h100", "--gpus", "8", "--gbs", "64", "--fix", "cp_comm_type=ring"],
     "expected one of p2p"),
    (["plan", "mixtral-8x7b", "--gpu", "h100", "--gpus", "8", "--gbs", "64", "--fix", "tp_comm_overlap=true",
      "--fix", "precision=fp8-blockwise"], "Userbuffers take no blockwise-FP8"),
    # Transformer Engine asserts on an FP8 GEMM input of 4,097 tokens (fuzz audit: plan had picked it)
    (["estimate", "dbrx", "--gpu", "h100", "--gpus", "16", "--seq", "4097", "--gbs", "64", "--pp", "8", "--etp", "2",
      "--precision", "fp8-blockwise"], "multiple of 8, got 4097"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle, capsys):
    code, out, err = run(args, capsys)
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_an_unwritable_output_fails_in_one_line(tmp_path, capsys, monkeypatch):
    """calibrate --write checks its path before the fit; emit --out and a write that fails anyway name the path."""
    import moetune.cli.calibrate_published as calibrate_published
    monkeypatch.setattr(calibrate_published, "calibrate", lambda *a: pytest.fail("fitted before checking --write"))
    for target in (tmp_path / "no" / "such" / "x.toml", tmp_path):
        code, _, err = run(["calibrate", "--write", str(target)], capsys)
        assert code == 2 and str(target) in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    from moetune.errors import MoetuneError
    from moetune.files import write_text
    with pytest.raises(MoetuneError, match="cannot write the file"):
        write_text(tmp_path, "x", "--out")


def test_console_script_runs():
    proc = subprocess.run([sys.executable, "-m", "moetune.cli.main", "estimate", "x", "--gpu", "h100", "--gpus", "8"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown model")


@pytest.mark.parametrize(("args", "needle"), [
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--fix", "tp=2", "--fix", "tp=4"],
     "--fix tp=4: tp is pinned by an earlier --fix already; give each key once"),  # recompute's reason had read too
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "256", "--fix", "ep_overlap=true", "--fix",
      "pp=4", "--fix", "vpp=1"], "with pp=4 needs VPP > 1"),
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--fix", "recompute=none", "--fix",
      "recompute_modules=moe_act"], "recompute_modules only with recompute=selective"),
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--fix",
      "optimizer_offload_fraction=2"], "--fix optimizer_offload_fraction=2: expected a number in [0, 1]"),
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--fix", "fp8_output_proj=true"],
     "the LM head runs in mxfp8 only under an mxfp8 recipe"),
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--fix", "optimizer=sgd"],
     "--fix optimizer=sgd: expected adam or muon"),
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--fix", "optimizer=muon", "--fix",
      "optimizer_offload_fraction=1"], "Muon runs without the optimizer's CPU offload"),
    (["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--recompute", "none",
      "--recompute-modules", "moe_act"], "--recompute none with --recompute-modules"),
    (["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--cuda-graph-scope", "none,attn"],
     "'none' turns CUDA graphs off"),
    (["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--dispatcher", "alltoall",
      "--flex-num-sms", "8"], "--flex-num-sms sets the SMs of DeepEP/HybridEP kernels"),
    (["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--token-imbalance", "nan"],
     "token_imbalance (nan) must be a number >= 1"),
    (["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--token-imbalance", "100"],
     "token_imbalance (100) cannot exceed EP (16)"),
    (["explain", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--rank", "2"], "--rank picks a result"),
    # sequence parallel splits each CP rank's seq/CP tokens over TP: 65544 / 4 = 16386, not a multiple of 4
    (["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64", "--ep", "8", "--tp", "4", "--cp", "4", "--seq",
      "65544"], "tokens per CP rank (seq/CP) (16386) must be divisible by TP"),
    (["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64", "--ep", "8", "--recompute", "selective",
      "--offload-modules", "attn_proj"], "attn_proj needs core_attn too"),
    (["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--recompute", "selective",
      "--recompute-modules", "mla_up_proj,moe_act"], "mla_up_proj needs multi-latent attention"),
    (["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64", "--ep", "8", "--cp-comm-type", "a2a+p2p",
      "--hcp-a2a-size", "2"], "CP is 1 here"),
    # a2a CP splits each TP rank's 2 KV groups over CP 8: Transformer Engine cannot (one line, as a2a+p2p's)
    (["estimate", "qwen3-235b-a22b", "--gpu", "h100", "--gpus", "256", "--tp", "2", "--cp", "8", "--pp", "4",
      "--vpp", "6", "--account-for-embedding", "--account-for-loss", "--ep", "32", "--seq", "65536", "--gbs", "64",
      "--cp-comm-type", "a2a"], "cp_comm_type a2a at CP 8: the 32 heads and 2 KV groups of a TP 2 rank"),
    (["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64", "--ep", "8", "--seq", "65536", "--cp", "2",
      "--cp-comm-type", "a2a+p2p"], "CP 2 leaves no ring beside an a2a group"),
    (["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--set", "model.expert_model_parallel_size=16",
      "--set", "model.fine_grained_activation_offloading=true", "--set", "model.offload_modules=[]"],
     "fine_grained_activation_offloading is on with no model.offload_modules"),
    (["estimate", "qwen3-235b-a22b", "--gpu", "h100", "--gpus", "256", "--set", "model.context_parallel_size=32",
      "--set", "model.expert_model_parallel_size=8", "--set", "model.seq_length=131072",
      "--set", "model.cp_comm_type=a2a+p2p", "--set", "model.hierarchical_context_parallel_sizes=[2,8]"],
     "must be [a2a, p2p] multiplying to context_parallel_size (32)"),
    # sizes past what any job holds fail before numpy overflows on them (they had been tracebacks or hangs)
    (["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "99999999999999999999999"],
     "is past the 131,072 GPUs moetune plans for"),
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "1000000000", "--gbs", "1024"],
     "is past the 131,072 GPUs moetune plans for"),
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024", "--seq", "99999999999999999999"],
     "seq_length (99,999,999,999,999,999,999) is past the 8,388,608 moetune plans for: lower it"),
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024", "--fix", "ep=\u00b2"],
     "--fix ep=\u00b2: expected a positive integer"),
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024", "--fix", "routing=force-balance"],
     "set it with --routing"),
    # plan's own --token-imbalance (the refusal had pointed at estimate's), its range, its routing, and a pinned EP
    # too small to hold it (the busiest of 2 ranks holds at most 2x the mean: layout/validate.py)
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024", "--fix", "token_imbalance=1.1"],
     "--fix token_imbalance: set it with --token-imbalance 1.1, not --fix"),
    *[(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024", "--token-imbalance", value],
       f"Invalid value for '--token-imbalance': {value} must be a number >= 1, the busiest expert rank's tokens over "
       "the mean")
      for value in ("0.9", "nan", "inf")],
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024", "--token-imbalance", "1.2",
      "--routing", "force-balance"], "--token-imbalance (1.2) weighs dropless routing"),
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024", "--token-imbalance", "3", "--fix",
      "ep=2"], "--token-imbalance 3 with --fix ep=2: the busiest of 2 expert ranks holds at most every token"),
    # a bad value of these pins had been refused in estimate's words: no --fix named, or --pipeline-layout, a flag
    # plan has not
    *[(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024", "--fix", pin], needle)
      for pin, needle in (("precision=fp9", "--fix precision=fp9: expected one of bf16, fp8-blockwise"),
                          ("dispatcher=deep", "--fix dispatcher=deep: expected one of alltoall, deepep"),
                          ("cuda_graph_scope=attn,mpl", "--fix cuda_graph_scope=attn,mpl: unknown CUDA-graph scope"),
                          ("recompute_modules=moe_act,mpl", "--fix recompute_modules=moe_act,mpl: unknown recompute"),
                          ("offload_modules=fc1", "--fix offload_modules=fc1: unknown offload module(s) ['fc1']"),
                          ("pipeline_layout=Et|xL", "--fix pipeline_layout=Et|xL: unknown symbols ['x']"))],
])
def test_conflicting_or_impossible_flags_are_one_line(args, needle, capsys):
    code, out, err = run(args, capsys)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_an_unreadable_file_is_one_line(tmp_path, capsys, monkeypatch):
    """The system refusing a read (permissions) is the path and the reason, not a traceback."""
    from pathlib import Path
    def refuse(self, *a, **k):
        raise PermissionError(13, "Permission denied", str(self))
    monkeypatch.setattr(Path, "read_text", refuse)
    code, _, err = run(["estimate", "qwen3-30b-a3b", "--gpu", str(tmp_path / "c.toml"), "--gpus", "16"], capsys)
    assert code == 2 and "Permission denied" in err and len(err.strip().splitlines()) == 1


def test_bad_input_under_json_is_json_on_stdout_too(capsys):
    """A script reading --json output gets a JSON object for bad input (exit 2) as well as the error line."""
    code, out, err = run(["estimate", "nosuch-model", "--gpu", "h100", "--gpus", "8", "--json"], capsys)
    assert code == 2 and err.startswith("error: unknown model 'nosuch-model'")
    assert json.loads(out) == {"error": err.strip()[len("error: "):], "exit_code": 2}
    code, out, _ = run(["estimate", "nosuch-model", "--gpu", "h100", "--gpus", "8"], capsys)
    assert code == 2 and out == ""


@pytest.mark.parametrize(("args", "needle"), [
    (["estimate", "deepseek-v3", "--gpu", "h100", "--gpus", "256", "--ep", "32", "--mtp-layers", "100000000"],
     "exceeds the model's 61 decoder layers"),
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "256", "--fix", "ep=" + "9" * 5000],
     "expected a positive integer"),
])
def test_huge_numbers_are_one_line(args, needle, capsys):
    """From a fuzz: an MTP depth of 10^8 had hung building its layout, a 5,000-digit pin had hit Python's int limit."""
    code, _, err = run(args, capsys)
    assert code == 2 and needle in err and "Traceback" not in err


@pytest.mark.parametrize(("where", "key", "value", "needle"), [
    ("pipeline", "vocab_divisor", 0, "vocab_divisor (0) must be positive"),  # had divided by zero
    ("pipeline", "mtp_num_layers", 99, "holds a value moetune cannot take (the MTP depth (99) exceeds the model"),
    ("workload", "global_batch_size", 7, "damaged.json: global batch size (7) must be divisible"),  # file unnamed
    ("knobs", "cuda_graph_scope", "attn", "knobs.cuda_graph_scope is str 'attn', not a list"),  # read as a, t, t, n
    # null had raised TypeError (int(None)) splitting the pipeline, a traceback
    ("pipeline", "account_for_embedding", None, "damaged.json: account_for_embedding is None; it takes true or false"),
    ("pipeline", "account_for_loss", None, "account_for_loss is None; it takes true or false"),
    ("pipeline", "sequence_parallel", "yes", "sequence_parallel is 'yes'; it takes true or false"),
    # a string had raised TypeError sizing the activations; a negative or a switch had been taken as a factor
    ("knobs", "routed_buffer_factor", "abc", "routed_buffer_factor ('abc') must be a number > 0"),
    ("knobs", "routed_buffer_factor", -2.0, "routed_buffer_factor (-2.0) must be a number > 0"),
    ("knobs", "routed_buffer_factor", True, "routed_buffer_factor (True) must be a number > 0"),
])
def test_a_damaged_saved_result_is_one_line_naming_the_value(where, key, value, needle, tmp_path, capsys):
    """From a fuzz of a saved estimate: a zero vocabulary divisor raised ZeroDivisionError in padded_vocab_size, and
    an out-of-range value was said to be 'of the wrong type'."""
    code, out, _ = run(["estimate", "olmoe-1b-7b", "--gpu", "h100", "--gpus", "8", "--ep", "8", "--json"], capsys)
    data = json.loads(out)
    data[where][key] = value
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(data))
    code, _, err = run(["explain", "--plan", str(path)], capsys)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("key", ["workload", "knobs", "gpus"])  # without "layout" it is no saved result to explain
def test_a_saved_result_missing_a_section_names_the_file_once(key, tmp_path, capsys):
    """The file is named by the error that already words it (from_json._need), not by reading the message's text."""
    code, out, _ = run(["estimate", "olmoe-1b-7b", "--gpu", "h100", "--gpus", "8", "--ep", "8", "--json"], capsys)
    data = json.loads(out)
    del data[key]
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(data))
    code, _, err = run(["explain", "--plan", str(path)], capsys)
    assert (code, err.strip()) == (2, f"error: --plan {path} lacks '{key}': pass unmodified `moetune plan/estimate "
                                      "--json` output")


def test_a_saved_result_s_error_is_named_whatever_its_words():
    """A result named by words its error happens to open with is still named: the prefix had been left off wherever
    the message's text began with the name (a layout error read from a result called 'world size')."""
    from moetune.errors import MoetuneError
    from moetune.planner.from_json import estimate_from_json

    data = {"gpus": 16, "model": "qwen3-30b-a3b", "gpu": "h100",
            "layout": {"tp": 3, "cp": 1, "pp": 1, "vpp": 1, "ep": 1, "etp": 1},
            "workload": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 16}, "knobs": {}}
    with pytest.raises(MoetuneError) as err:
        estimate_from_json(data, where="world size")
    assert str(err.value).startswith("world size: world size (16) must be divisible by TP*CP*PP")


def test_explain_of_a_json_that_is_neither_a_result_nor_a_model_says_so(tmp_path, capsys):
    """A JSON with no results, layout or model_type had been told '--gpu is required'; a broken one as MODEL was
    told to pass plan output alone, though a config.json is as welcome there."""
    other = tmp_path / "other.json"
    other.write_text('{"foo": 1}')
    code, _, err = run(["explain", str(other)], capsys)
    assert code == 2 and "nor a Hugging Face config.json" in err and err.count("\n") == 1
    broken = tmp_path / "config.json"
    broken.write_text('{"model_type": "qwen3_moe", "hidden_size": 2048\n')
    code, _, err = run(["explain", str(broken), "--gpu", "h100", "--gpus", "8"], capsys)
    assert code == 2 and "not valid JSON" in err and "or a Hugging Face config.json" in err


def test_a_saved_file_that_is_a_failure_or_lacks_its_split_says_so(tmp_path, capsys):
    """emit of a failed plan's JSON had said "lacks 'layout'" (the saved error unsaid), and a plan result whose pipeline
    object was cut read its uneven split as an even one ("num_layers (61) must be divisible by PP*VPP")."""
    failed = tmp_path / "failed.json"
    failed.write_text(json.dumps({"error": "--megatron-core 0.14: gpt-oss-120b needs model.softmax_type",
                                  "exit_code": 2}))
    f = str(failed)
    for argv in (["emit", f], ["explain", f], ["explain", "--plan", f], ["report", f, "--out", str(tmp_path / "r")],
                 ["sweep", "write", f, "--out", str(tmp_path / "sw")]):
        code, _, err = run(argv, capsys)
        assert code == 2 and "the command that wrote it failed (--megatron-core 0.14" in err, argv
    code, out, _ = run(["estimate", "deepseek-v3", "--gpu", "h100", "--gpus", "64", "--pp", "4", "--ep", "8",
                        "--first-stage-layers", "16", "--last-stage-layers", "15", "--json"], capsys)
    saved = json.loads(out)
    del saved["pipeline"]
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps(saved))
    code, _, err = run(["emit", str(cut)], capsys)
    assert code == 2 and "lacks 'pipeline'" in err


def test_estimate_reads_a_saved_plan_as_its_config(tmp_path, capsys):
    """check, emit and diagnose read a saved result as its config; estimate --config had said 'no "config" object'."""
    code, out, _ = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "8", "--json"], capsys)
    path = tmp_path / "e.json"
    path.write_text(out)
    code, again, _ = run(["estimate", "qwen3-30b-a3b", "--config", str(path), "--json"], capsys)
    assert code == 0 and json.loads(again)["time"]["step_seconds"] == pytest.approx(
        json.loads(out)["time"]["step_seconds"], rel=1e-9)


def test_estimate_for_a_release_refuses_a_model_it_cannot_build(capsys):
    """plan and emit refused Qwen3-Next for Megatron-Core 0.15 (no gated delta-net before 0.16); estimate had priced
    it."""
    code, _, err = run(["estimate", "qwen3-next-80b-a3b", "--gpu", "h100", "--gpus", "64", "--ep", "16", "--gbs",
                        "512", "--megatron-core", "0.15"], capsys)
    assert code == 2 and "model.experimental_attention_variant (Megatron-Core has it from 0.16 on)" in err
