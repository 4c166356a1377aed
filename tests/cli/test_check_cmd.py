"""check as a user runs it on config files and overrides, with --model: findings worded in the config's names,
and files it cannot read refused in one line."""

import json
import sys
from pathlib import Path

import pytest
from cli_run import run


def test_an_empty_config_file_is_an_error_for_every_command(capsys, tmp_path):
    """A file that sets nothing (empty, or comments only) is refused by name, even beside other inputs: estimate and
    emit had run Megatron's defaults on it; an input of only cluster facts still has nothing to check."""
    empty, comment, blank_json = tmp_path / "empty.yaml", tmp_path / "comment.yaml", tmp_path / "empty.json"
    empty.write_text("")
    comment.write_text("# only a comment\n")
    blank_json.write_text("\n")  # had read 'JSON syntax error at line 1: Expecting value'
    for args in (["check", str(empty), "--gpu", "h100", "--gpus", "8"],
                 ["check", str(blank_json)], ["emit", str(blank_json), "--gpu", "h100", "--gpus", "8"],
                 ["check", str(comment), "--set", "model.tensor_model_parallel_size=2"],
                 ["estimate", "qwen3-30b-a3b", "--config", str(empty), "--gpu", "h100", "--gpus", "16"],
                 ["emit", str(comment), "--gpu", "h100", "--gpus", "16"]):
        code, _, err = run(args, capsys)
        assert code == 2 and "sets nothing" in err, args
    code, _, err = run(["check", "--gpu", "h100", "--gpus", "8"], capsys)
    assert code == 2 and "nothing to read" in err
    code, out, _ = run(["check", "--set", "model.tensor_model_parallel_size=2"], capsys)
    assert code == 0 and "1 config keys read" in out


@pytest.mark.parametrize(("sets", "needle"), [
    (["model.cuda_graph_scope=[attention]", "model.cuda_graph_impl=transformer_engine"],
     "unknown CUDA-graph scope(s) attention"),
    (["model.tensor_model_parallel_size=0"], "model.tensor_model_parallel_size (0) must be at least 1"),
    (["model.expert_tensor_parallel_size=0"], "must be at least 1"),
    (["model.tensor_model_parallel_size=-2"], "must be at least 1"),
    (["model.moe_layer_freq=abc"], "expected an integer, a list of 0/1"),
])
def test_check_with_a_model_reports_bad_sizes_in_one_line(sets, needle, tmp_path, capsys):
    args = ["check", "--set", "model.expert_model_parallel_size=16", "--gpu", "h100", "--gpus", "16", "--model",
            "qwen3-30b-a3b"]
    code, _, err = run([*args, *[x for s in sets for x in ("--set", s)]], capsys)
    assert code == 2 and needle in err and "Traceback" not in err


def test_check_with_a_model_judges_overrides_over_their_recipe(tmp_path, capsys):
    """The gpt-oss-120b H100 perf overrides (moe_act recompute, no precision named) on the recipe Bridge's bridge and
    recipe complete (grouped GEMM, alltoall, BF16): no Megatron-Core error; a per-layer MoE pattern of the wrong
    length and a top-k over the experts are errors."""
    path = tmp_path / "o.txt"
    path.write_text("model.tensor_model_parallel_size=1\nmodel.pipeline_model_parallel_size=4\n"
                    "model.expert_model_parallel_size=8\nmodel.recompute_granularity=selective\n"
                    "model.recompute_modules=[layernorm,moe_act]\n")
    args = ["check", str(path), "--model", "gpt-oss-120b", "--gpu", "h100", "--gpus", "64"]
    code, out, _ = run(args, capsys)
    assert code == 0 and "0 error(s)" in out
    for sets, rule in ((["model.moe_layer_freq=[1,0]"], "model.moe_layer_freq_length"),
                       (["model.moe_router_topk=200"], "model.topk_over_experts")):
        code, out, _ = run([*args, "--set", sets[0], "--json"], capsys)
        assert code == 1 and rule in {f["rule"] for f in json.loads(out)["findings"]}


def test_check_with_a_model_leaves_no_dropout_to_the_recipe(tmp_path, capsys):
    """A Bridge YAML with core_attn recompute under attention CUDA graphs leaves dropout to the recipe, whose model
    bridge sets none: check --model had judged it at Megatron-Core's 0.1 and failed it ('attention dropout is not
    supported with graphed attention recomputation') where estimate --config ran it. A Megatron-LM launch has no
    recipe: its own 0.1 stands and the error is real."""
    path = tmp_path / "user.yaml"
    path.write_text("model:\n  expert_model_parallel_size: 8\n  recompute_granularity: selective\n"
                    "  recompute_modules: [core_attn, moe_act]\n  cuda_graph_impl: transformer_engine\n"
                    "  cuda_graph_scope: [attn, moe_router, moe_preprocess]\n")
    cluster = ["--model", "deepseek-v2-lite", "--gpu", "h100", "--gpus", "8", "--json"]
    code, out, _ = run(["check", str(path), *cluster], capsys)
    assert "mcore.transformer_config" not in {f["rule"] for f in json.loads(out)["findings"]}
    mlm = ("--expert-model-parallel-size 8 --recompute-granularity selective --recompute-modules core_attn "
           "--cuda-graph-impl transformer_engine --cuda-graph-scope attn moe_router moe_preprocess --bf16")
    code, out, _ = run(["check", "--mlm-args", mlm, *cluster], capsys)
    messages = [f["message"] for f in json.loads(out)["findings"] if f["rule"] == "mcore.transformer_config"]
    assert code == 1 and any("attention dropout" in m for m in messages)


def test_a_long_context_pick_checks_clean(tmp_path, capsys):
    """DeepSeek-V3 on 256 H100 at 32k: the plan's own pick, emitted and checked with --model, has no errors (the
    smallest-layout probe once carried the pick's hierarchical CP sizes to another layout and blamed the config)."""
    code, out, _ = run(["plan", "deepseek-v3", "--gpu", "h100", "--gpus", "256", "--seq", "32768", "--gbs", "512",
                        "--top", "1", "--json"], capsys)
    (tmp_path / "p.json").write_text(out)
    code, out, _ = run(["emit", str(tmp_path / "p.json"), "--out", str(tmp_path / "run")], capsys)
    assert code == 0
    code, out, _ = run(["check", str(tmp_path / "run" / "overrides.txt"), "--model", "deepseek-v3"], capsys)
    assert code == 0 and "0 error(s)" in out


def test_a_config_of_another_model_is_named(tmp_path, capsys):
    """Qwen3-30B-A3B overrides (48 layers, hidden 2048) read with DeepSeek-V3: estimate refuses to estimate one model
    under the other's name; check keeps the config's values and warns."""
    path = tmp_path / "o.txt"
    path.write_text("model.num_layers=48\nmodel.hidden_size=2048\nmodel.expert_model_parallel_size=16\n")
    code, _, err = run(["estimate", "deepseek-v3", "--config", str(path), "--gpu", "h100", "--gpus", "16"], capsys)
    assert code == 2 and "model.num_layers (48 vs deepseek-v3's 61)" in err
    code, out, _ = run(["check", str(path), "--model", "deepseek-v3", "--gpu", "h100", "--gpus", "16", "--json"],
                       capsys)
    assert "check.model_differs" in {f["rule"] for f in json.loads(out)["findings"]}


@pytest.mark.parametrize(("model", "freq", "differs"), [
    ("llama4-maverick", "2", True),  # every even layer, where the config.json has experts on the odd ones
    ("llama4-maverick", "([0]+[1])*24", False),
    ("qwen3-30b-a3b", "2", True), ("qwen3-30b-a3b", "1", False),
    ("deepseek-v3", "([0]*3+[1]*58)", False), ("deepseek-v3", "([0]*1+[1]*60)", True)])
def test_a_configs_moe_layers_elsewhere_are_another_model(model, freq, differs, capsys):
    """--moe-layer-freq builds experts where it says (TransformerConfig: an int N is every N-th layer from 0): the
    estimate had priced the model's own MoE layers in silence, Llama-4-Maverick's first stage 14% off."""
    code, _, err = run(["estimate", model, "--gpu", "h100", "--gpus", "64", "--mlm-args",
                        f"--bf16 --expert-model-parallel-size 8 --moe-layer-freq {freq}"], capsys)
    assert ("model.moe_layer_freq" in err) is differs and (code == 2) is differs


def test_check_words_layout_errors_in_config_names(tmp_path, capsys):
    """A layout error found by check names the config's fields, not estimate's flags."""
    path = tmp_path / "o.txt"
    path.write_text("model.pipeline_model_parallel_size=4\nmodel.virtual_pipeline_model_parallel_size=2\n"
                    "model.expert_model_parallel_size=8\n")
    code, out, _ = run(["check", str(path), "--model", "gpt-oss-120b", "--gpu", "h100", "--gpus", "64", "--json"],
                       capsys)
    message = next(f["message"] for f in json.loads(out)["findings"] if f["rule"] == "layout.illegal")
    assert "model.virtual_pipeline_model_parallel_size" in message and "--vpp" not in message and "--" not in message


def test_gated_delta_net_under_context_parallel_is_megatron_lm_mains(capsys):
    """megatron-core 0.16 refuses CP on gated delta-net layers; Megatron-LM main runs it (the assert is gone from
    transformer_config.py): check says the installed library skipped it, not that the config is wrong."""
    code, out, _ = run(["check", "--set", "model.context_parallel_size=8", "--set",
                        "model.expert_model_parallel_size=8", "--set", "model.seq_length=131072", "--gpu", "gb200",
                        "--gpus", "128", "--model",
                        "qwen3-next-80b-a3b", "--json"], capsys)
    findings = {f["rule"]: f for f in json.loads(out)["findings"]}
    assert "mcore.transformer_config" not in findings
    assert "Gated delta net does not support context parallel" in findings["mcore.environment"]["message"]


@pytest.mark.parametrize(("name", "text", "needle"), [
    ("dup.yaml", "model:\n  expert_model_parallel_size: 16\n  expert_model_parallel_size: 8\n",
     "key 'expert_model_parallel_size' is given twice in one section (line 3)"),
    ("big.yaml", "model:\n  num_layers: " + "9" * 5000 + "\n", "a value is not a usable number"),
    ("layout.yaml", "model:\n  pipeline_model_parallel_size: 2\n  pipeline_model_parallel_layout: \"Et*4|(t*\"\n",
     "model.pipeline_model_parallel_layout 'Et*4|(t*': unbalanced parentheses"),  # the config's field, not a flag
])
def test_a_config_file_megatron_would_misread_is_one_line(name, text, needle, tmp_path, capsys):
    """A key given twice (PyYAML keeps the last silently), a number past Python's 4,300-digit limit, and a layout
    string Megatron cannot parse, which emit had written out."""
    (tmp_path / name).write_text(text)
    for cmd in (["check"], ["emit"]):
        code, _, err = run([*cmd, str(tmp_path / name), "--gpu", "h100", "--gpus", "16"], capsys)
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, (cmd, err)


def test_a_saved_result_is_checked_against_the_model_it_names(tmp_path, capsys):
    """A saved estimate names its model, so `check FILE` runs its memory wall as `--model` would: Qwen3-30B-A3B at EP8
    on 16 H100s (84 GiB a rank) had passed `check` with no fit error unless --model was given again (audit)."""
    saved = tmp_path / "e.json"
    code, out, _ = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "8", "--json"], capsys)
    saved.write_text(out)
    code, out, _ = run(["check", str(saved), "--json"], capsys)
    rules = {f["rule"] for f in json.loads(out)["findings"]}
    assert code == 1 and "fit.does_not_fit" in rules


def test_a_sparse_attention_model_gets_the_fit_rules(capsys, tmp_path):
    """check --model DeepSeek-V3.2: the memory wall prices DSA now (walls/dsa.py), so the fit rules run where a
    warning check.model_unpriced had said they were skipped (and before that, the error layout.illegal citing
    Megatron-Core's divisibility rules); the config's own rules still run (the ETP warning here)."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "oracle"))
    from dsa_configs import DEEPSEEK_V32

    path = tmp_path / "config.json"
    path.write_text(json.dumps(DEEPSEEK_V32))
    code, out, _ = run(["check", "--set", "model.tensor_model_parallel_size=2", "--model", str(path), "--gpu", "h100",
                        "--gpus", "256", "--json"], capsys)
    found = {f["rule"]: f for f in json.loads(out)["findings"]}
    assert "layout.illegal" not in found and "check.model_unpriced" not in found
    assert code == 1 and "fit.does_not_fit" in found and "scale.prefer_ep_over_etp" in found


def test_a_recipes_cp_exchange_is_filled_in_with_model(tmp_path, capsys):
    """gpt-oss runs attention sinks, which CP exchanges by a2a alone; Bridge's gpt-oss recipes set cp_comm_type a2a
    (recipes/gpt_oss/h100/gpt_oss.py:70), so an overrides file at CP 2 that leaves it to the recipe is clean with
    --model, as without it (--model had filled softmax_type from the recipe but not the exchange: a false error)."""
    path = tmp_path / "go.yaml"
    path.write_text("model:\n  context_parallel_size: 2\n  expert_model_parallel_size: 4\n"
                    "  moe_token_dispatcher_type: flex\n  moe_flex_dispatcher_backend: hybridep\n"
                    "train:\n  micro_batch_size: 1\n  global_batch_size: 64\n")
    code, out, err = run(["check", str(path), "--model", "gpt-oss-20b", "--gpu", "gb200", "--gpus", "8", "--json"],
                         capsys)
    assert "cp.sinks_need_a2a" not in {f["rule"] for f in json.loads(out)["findings"]}, err
    code, out, _ = run(["check", "--mlm-args", "--context-parallel-size 2 --num-experts 32", "--model", "gpt-oss-20b",
                        "--gpu", "gb200", "--gpus", "8", "--json"], capsys)
    assert "cp.sinks_need_a2a" in {f["rule"] for f in json.loads(out)["findings"]}  # no recipe: p2p, refused


def test_tp_without_sp_on_an_expert_parallel_config_is_an_error_without_model(tmp_path, capsys):
    """EP 8 is a MoE model whatever the overrides leave to the recipe (Megatron-Core asserts experts beside EP > 1):
    TP 2 without sequence parallelism had passed without --model."""
    path = tmp_path / "o.yaml"
    path.write_text("model:\n  tensor_model_parallel_size: 2\n  expert_model_parallel_size: 8\n"
                    "  sequence_parallel: false\n")
    code, out, _ = run(["check", str(path), "--json"], capsys)
    assert code == 1 and "scale.moe_tp_needs_sp" in {f["rule"] for f in json.loads(out)["findings"]}


def test_a_misspelled_recompute_module_is_one_finding_that_names_the_module(tmp_path, capsys):
    """moe_act,lyernorm: three errors for one fault (moetune's layout error, Megatron-Core's refusal and the rule),
    none naming layernorm; now one, with the module meant, and the rule's fix corrects the spelling."""
    path = tmp_path / "o.txt"
    path.write_text("model.recompute_granularity=selective\nmodel.recompute_modules=[moe_act,lyernorm]\n"
                    "model.expert_model_parallel_size=8\n")
    code, out, _ = run(["check", str(path), "--json"], capsys)
    found = {f["rule"]: f for f in json.loads(out)["findings"]}
    assert "did you mean layernorm?" in found["fit.unknown_recompute_module"]["message"]
    assert found["fit.unknown_recompute_module"]["fix"] == {"model.recompute_modules": ["moe_act", "layernorm"]}
    code, out, _ = run(["check", str(path), "--model", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "8", "--json"],
                       capsys)
    errors = [f for f in json.loads(out)["findings"] if f["severity"] == "error"]
    assert len(errors) == 1 and "did you mean layernorm?" in errors[0]["message"]
