"""models, and a model given as a file: the catalog's counts, a config.json or snapshot directory, and config
files of the wrong shape refused in one line."""

import json
import sys
from pathlib import Path

import pytest
from cli_run import run


def test_models_show_json(capsys):
    code, out, _ = run(["models", "show", "deepseek-v3", "--json"], capsys)
    data = json.loads(out)
    for key in ("total_params", "active_params", "mtp_params", "embedding_params", "num_layers", "num_moe_layers",
                "num_experts", "topk", "shared_experts", "attention"):
        assert key in data
    assert (data["attention"], data["num_layers"], data["num_moe_layers"], data["topk"]) == ("mla", 61, 58, 8)


def test_a_sparse_attention_model_says_so(capsys, tmp_path):
    """DeepSeek-V3.2's attention is MLA with DeepSeek Sparse Attention's indexer, which estimate and plan refuse:
    `models show` must not call it plain mla."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "oracle"))
    from dsa_configs import DEEPSEEK_V32

    path = tmp_path / "config.json"
    path.write_text(json.dumps(DEEPSEEK_V32))
    code, out, _ = run(["models", "show", str(path), "--json"], capsys)
    assert code == 0 and json.loads(out)["attention"] == "mla+dsa"


def test_models_count_shared_experts_as_the_config_does(capsys):
    """DeepSeek-V2 and ERNIE count theirs (n_shared_experts 2, moe_num_shared_experts 2); Qwen1.5-MoE, Qwen2-57B and
    Nemotron-3-Nano have one wide shared expert (the column had shown width over expert width: 4, 8 and 2)."""
    code, out, _ = run(["models", "--json"], capsys)
    shared = {m["name"]: m["shared_experts"] for m in json.loads(out)}
    assert code == 0 and {name: shared[name] for name in (
        "deepseek-v2", "ernie-4.5-21b-a3b", "deepseek-v3", "qwen1.5-moe-a2.7b", "qwen2-57b-a14b",
        "nemotron3-nano-30b-a3b", "llama4-scout", "mixtral-8x7b", "qwen3-30b-a3b")} == {
        "deepseek-v2": 2, "ernie-4.5-21b-a3b": 2, "deepseek-v3": 1, "qwen1.5-moe-a2.7b": 1, "qwen2-57b-a14b": 1,
        "nemotron3-nano-30b-a3b": 1, "llama4-scout": 1, "mixtral-8x7b": 0, "qwen3-30b-a3b": 0}


def test_bad_config_files(tmp_path, capsys):
    bad_json = tmp_path / "config.json"
    bad_json.write_text("{not json")
    code, _, err = run(["models", "show", str(bad_json)], capsys)
    assert code == 2 and "not valid JSON" in err
    unknown = tmp_path / "u.json"
    unknown.write_text('{"model_type": "bert"}')
    code, _, err = run(["models", "show", str(unknown)], capsys)
    assert code == 2 and "'bert' is not supported" in err
    missing = tmp_path / "m.json"
    missing.write_text('{"model_type": "mixtral", "hidden_size": 4096}')
    code, _, err = run(["models", "show", str(missing)], capsys)
    assert code == 2 and "missing field 'num_hidden_layers'" in err


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("hidden_size", "2048", "field 'hidden_size' ('2048') must be a whole number"),
    ("hidden_size", 2048.5, "field 'hidden_size' (2048.5) must be a whole number"),
    ("tie_word_embeddings", "yes", "field 'tie_word_embeddings' ('yes') must be true or false"),
    ("num_hidden_layers", 0, "field 'num_hidden_layers' (0) must be a whole number from 1 to 10,000"),
    ("n_shared_experts", "1", "field 'n_shared_experts' ('1') must be a whole number of at least 0"),
    # each had overflowed numpy's 64-bit integers in rank_params (a traceback)
    ("hidden_size", 10**12, "field 'hidden_size' (1,000,000,000,000) is past 262,144"),
    ("vocab_size", 10**15, "field 'vocab_size' (1,000,000,000,000,000) is past 16,777,216"),
])
def test_a_config_json_of_the_wrong_types_is_one_line(field, value, needle, shared_data, tmp_path, capsys):
    data = json.loads((shared_data / "models" / "qwen3-30b-a3b.config.json").read_text())
    path = tmp_path / "m.json"
    path.write_text(json.dumps({**data, field: value}))
    code, _, err = run(["estimate", str(path), "--gpu", "h100", "--gpus", "16", "--ep", "16"], capsys)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_a_snapshot_directory_is_read_through_its_config_json(shared_data, tmp_path, capsys):
    snap = tmp_path / "Qwen3-30B-A3B"
    snap.mkdir()
    (snap / "config.json").write_text((shared_data / "models" / "qwen3-30b-a3b.config.json").read_text())
    code, out, _ = run(["estimate", str(snap), "--gpu", "h100", "--gpus", "16", "--ep", "16", "--json"], capsys)
    assert code == 0 and json.loads(out)["model"] == "Qwen3-30B-A3B"
    code, _, err = run(["estimate", str(tmp_path), "--gpu", "h100", "--gpus", "16"], capsys)
    assert code == 2 and "a directory without a config.json" in err


@pytest.mark.parametrize(("word", "hint"), [
    ("deepseek-v3", "for a model's key figures: moetune models show deepseek-v3"),
    ("deepsek-v3", "moetune models show deepseek-v3 (the nearest built-in name)"),  # a misspelt model
    ("config.json", "moetune models show config.json"),  # a model's config.json, as `show` takes one
    ("shw", "did you mean moetune models show MODEL?"),
    ("foo", "`moetune models` lists the built-in models, `moetune models show MODEL` gives one's key figures"),
])
def test_models_given_a_model_for_a_sub_command_points_to_show(word, hint, capsys):
    """`moetune models deepseek-v3` had said only "No such command 'deepseek-v3'" (click's own words)."""
    code, out, err = run(["models", word], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith(f"error: No such command '{word}'")
    assert hint in err
