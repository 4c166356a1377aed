"""estimate and explain of a launch config (--config / --mlm-args / --set) instead of layout and knob flags: the
Megatron-MoE-ModelZoo DeepSeek-V3 config as its H100 best practice launches it."""

import json
from pathlib import Path

import pytest

from modelzoo_launch import H100_ENV as ENV
from modelzoo_launch import H100_FLAGS as FLAGS
from modelzoo_launch import MODELZOO
from moetune.cli.main import main

SAME_AS_FLAGS = ["--tp", "2", "--pp", "8", "--ep", "64", "--pipeline-layout", "Et|(tt|)*30mL", "--precision",
                 "fp8-blockwise", "--dispatcher", "deepep", "--ep-overlap", "--delay-wgrad", "--recompute",
                 "selective", "--recompute-modules", "mla_up_proj,mlp", "--cuda-graph-scope", "none", "--routing",
                 "force-balance", "--gbs", "8192", "--seq", "4096"]
CLUSTER = ["--gpu", "h100", "--gpus", "1024"]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bridge"


@pytest.fixture(autouse=True)
def launcher_env(monkeypatch):
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)


def _json(capsys, *args):
    code = main(list(args))
    return code, json.loads(capsys.readouterr().out)


def _sized(knobs: dict) -> dict:
    """The knobs as sized: as given, Megatron-LM arguments without --fp8-param-gather state it off where flags and a
    plan leave it to the recipe's preset (knobs fp8_param_gather_set)."""
    return {k: v for k, v in knobs.items() if not k.endswith("_param_gather_set")}


def test_config_estimates_what_the_same_flags_estimate(capsys):
    # flags plan a Bridge launch, whose DeepSeek-V3 bridge pads the vocabulary to 1280 x TP; the ModelZoo's YAML asks
    # 3232 x TP (no padding of 129,280 at TP2)
    _, mlm = _json(capsys, "estimate", "deepseek-v3", "--config", str(MODELZOO), "--mlm-args", FLAGS, *CLUSTER,
                   "--json")
    _, from_config = _json(capsys, "estimate", "deepseek-v3", "--config", str(MODELZOO), "--mlm-args",
                           FLAGS + " --make-vocab-size-divisible-by 1280", *CLUSTER, "--json")
    _, from_flags = _json(capsys, "estimate", "deepseek-v3", *SAME_AS_FLAGS, *CLUSTER, "--json")
    assert (mlm["pipeline"]["vocab_divisor"], from_flags["pipeline"]["vocab_divisor"]) == (3232, 1280)
    assert _sized(from_config["knobs"]) == _sized(from_flags["knobs"]) and from_config["layout"] == from_flags["layout"]
    assert from_config["time"]["step_seconds"] == from_flags["time"]["step_seconds"]
    assert mlm["time"]["step_seconds"] < from_flags["time"]["step_seconds"]  # 1,280 fewer output rows
    assert "defaulted" not in from_config  # a config takes no moetune platform default: Megatron's stand


def test_set_overrides_the_config(capsys):
    _, out = _json(capsys, "estimate", "deepseek-v3", "--config", str(MODELZOO), "--mlm-args", FLAGS, *CLUSTER,
                   "--set", "train.global_batch_size=4096", "--json")
    assert out["workload"]["global_batch_size"] == 4096


def test_explain_a_config(capsys):
    code, out = _json(capsys, "explain", "deepseek-v3", "--config", str(MODELZOO), "--mlm-args", FLAGS, *CLUSTER,
                      "--json")
    assert code == 0 and out["fit"]["fits"] and out["scale"]


@pytest.mark.parametrize(("extra", "needle"), [
    (["--tp", "4"], "--tp: with --config and --mlm-args the layout and knobs are a config's"),
    (["--ep-overlap"], "--ep-overlap: with --config and --mlm-args the layout and knobs are a config's"),
])
def test_flags_the_config_replaces_are_refused(capsys, extra, needle):
    code = main(["estimate", "deepseek-v3", "--config", str(MODELZOO), "--mlm-args", FLAGS, *CLUSTER, *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and needle in err


@pytest.mark.parametrize(("graph_sets", "scope"), [
    # Bridge's current full-iteration recipes: the implementation names it, the scope is empty
    (["model.cuda_graph_impl=full_iteration", "model.cuda_graph_scope=[]"], ["full_iteration"]),
    (["model.cuda_graph_impl=local", "model.cuda_graph_scope=[full_iteration]"], ["full_iteration"]),
    (["model.cuda_graph_impl=transformer_engine", "model.cuda_graph_scope=[attn,moe_router]"], ["attn", "moe_router"]),
    (["model.cuda_graph_impl=local", "model.cuda_graph_scope=[]"], ["attn", "mlp", "moe"]),  # whole layers
    (["model.enable_cuda_graph=true"], ["attn", "mlp", "moe"]),  # the legacy switch: local per-layer graphs
    (["model.cuda_graph_impl=none", "model.cuda_graph_scope=[attn]"], []),
])
def test_a_config_s_cuda_graphs_are_read_as_megatron_core_reads_them(capsys, graph_sets, scope):
    sets = [a for s in graph_sets for a in ("--set", s)]
    _, out = _json(capsys, "estimate", "deepseek-v3", "--config", str(MODELZOO), "--mlm-args", FLAGS, *CLUSTER,
                   *sets, "--json")
    assert out["knobs"]["cuda_graph_scope"] == scope


@pytest.mark.parametrize("files", [["overrides.txt"], ["env.sh", "megatron_lm_args.txt"]])
def test_a_plan_emitted_and_estimated_from_its_config_predicts_what_the_plan_did(capsys, tmp_path, files):
    """plan -> emit -> estimate --config: the Bridge overrides, or the launch torchrun.sh runs, give back the pick's
    own layout, knobs and numbers."""
    _, planned = _json(capsys, "plan", "glm-4.5-air", "--gpu", "h100", "--gpus", "64", "--seq", "4096", "--gbs", "512",
                       "--top", "1", "--json")
    (tmp_path / "plan.json").write_text(json.dumps(planned))
    assert main(["emit", str(tmp_path / "plan.json"), "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    config = [a for f in files for a in ("--config", str(tmp_path / "run" / f))]
    _, again = _json(capsys, "estimate", "glm-4.5-air", *config, "--json")
    pick = planned["results"][0]
    assert again["layout"] == pick["layout"] and _sized(again["knobs"]) == _sized(pick["knobs"])
    assert again["time"]["tokens_per_s_per_gpu"] == pytest.approx(pick["time"]["tokens_per_s_per_gpu"], rel=1e-9)
    assert again["memory"]["peak_bytes"] == pick["memory"]["peak_bytes"]


def test_a_layout_flag_beside_set_names_set(capsys):
    """--set alone makes a config too; the error had named --config / --mlm-args, which were not given (audit)."""
    code = main(["estimate", "kimi-k2", "--gpu", "h100", "--gpus", "64", "--pp", "8", "--set",
                 "model.virtual_pipeline_model_parallel_size=2"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--pp: with --set the layout" in err and "--config" not in err


@pytest.mark.parametrize(("vpp", "needle"), [
    # a Megatron-LM launch (MODEL_ARGS and --mlm-args) is told its own arguments, whichever way a value came in
    ("2", "--num-virtual-stages-per-pipeline-rank (2) contradicts --pipeline-model-parallel-layout"),
    ("1", "--num-virtual-stages-per-pipeline-rank 1 contradicts --pipeline-model-parallel-layout"),
    ("4", None),  # the layout string's own count (32 stages over PP 8): Megatron-Core accepts it
])
def test_a_vpp_beside_a_layout_string_must_be_the_string_s(capsys, vpp, needle):
    """Megatron-Core asserts an explicit VPP equals the layout string's (transformer_config.py "conflicts with
    pipeline_model_parallel_layout"); estimate --config had dropped the config's VPP and estimated the string's,
    exit 0, where check refused it (audit: glm-4.5-air plan's overrides --set VPP 5 beside a 12-a-rank layout)."""
    code = main(["estimate", "deepseek-v3", "--config", str(MODELZOO), "--mlm-args", FLAGS, *CLUSTER, "--set",
                 f"model.virtual_pipeline_model_parallel_size={vpp}", "--json"])
    out = capsys.readouterr().out
    if needle is None:
        assert code == 0 and json.loads(out)["layout"]["vpp"] == 4
    else:
        assert code == 2 and needle in json.loads(out)["error"]


def test_estimate_of_a_config_raises_what_check_raises_of_it(capsys):
    """A rule that reads a field the layout and knobs do not carry (a dataset sequence length other than the model's)
    fails estimate --config as it fails check: estimate had read a config rebuilt from its layout, and passed."""
    recipe = str(FIXTURES / "qwen3_30b_a3b_pretrain_16gpu_h100_bf16.yaml")
    sets = ["--gpu", "h100", "--gpus", "16", "--set", "model.seq_length=4100", "--json"]
    assert main(["check", recipe, *sets]) == 1
    checked = {f["rule"] for f in json.loads(capsys.readouterr().out)["findings"] if f["severity"] == "error"}
    assert main(["estimate", "qwen3-30b-a3b", "--config", recipe, *sets]) == 1
    estimated = {f["rule"] for f in json.loads(capsys.readouterr().out)["checks"] if f["severity"] == "error"}
    assert estimated == checked == {"model.seq_length_matches_dataset"}


@pytest.mark.parametrize(("mlm_args", "hint"), [
    # the README's example as it was written: the shell splits the unquoted layout at | ( ) (it said only "takes one
    # value, got 4"); quoted, the same flags run (tests/test_readme.py)
    ("--mtp-num-layers 1 --pipeline-model-parallel-layout Et|(tt|)*30mL ...",
     "quote it inside --mlm-args, e.g. --mlm-args \"... --pipeline-model-parallel-layout 'Et|(tt|)*30mL'\""),
    ("--pipeline-model-parallel-layout Et tt", "--pipeline-model-parallel-layout 'Et|(tt|)*30mL'"),
    ("--tokenizer-model /ckpt/*/tokenizer.model x", "--tokenizer-model '...'"),  # a glob left in a value
    ("--seq-length 4096 4096", None),  # two plain values: no shell character, nothing to quote
])
def test_a_one_value_flag_split_by_the_shell_says_to_quote_it(capsys, mlm_args, hint):
    code = main(["explain", "deepseek-v3", "--config", str(MODELZOO), "--mlm-args", mlm_args, *CLUSTER])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "takes one value, got" in err
    if hint is None:
        assert "quote" not in err
    else:
        assert hint in err and "the shell splits an unquoted value at | ( )" in err
