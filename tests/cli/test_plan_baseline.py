"""plan --baseline: read before the search, and the baseline's own choices (optimizer, FP8 recipe) searched."""

import json

import pytest
from cli_run import run


def test_a_bad_baseline_fails_before_the_search(tmp_path, capsys, monkeypatch):
    import moetune.cli.plan_cmd as plan_cmd
    monkeypatch.setattr(plan_cmd, "plan", lambda *a, **k: pytest.fail("searched before reading --baseline"))
    bad = tmp_path / "b.json"
    bad.write_text('{"results": []}')
    code, _, err = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--baseline",
                        str(bad)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_muon_baseline_is_planned_under_muon(tmp_path, capsys):
    """Muon or Adam is the training's choice: a --baseline that trains with Muon had been planned under Adam, and the
    optimizer read as a setting the pick changes."""
    job = ["--gpu", "h100", "--gpus", "16", "--seq", "4096", "--gbs", "512"]
    code, out, _ = run(["estimate", "qwen3-30b-a3b", *job, "--ep", "8", "--optimizer", "muon", "--json"], capsys)
    base = tmp_path / "base.json"
    base.write_text(out)
    code, out, _ = run(["plan", "qwen3-30b-a3b", *job, "--top", "1", "--baseline", str(base), "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["results"][0]["knobs"]["optimizer"] == "muon"
    assert "optimizer.optimizer" not in data["versus_baseline"]["changes"]
    code, _, err = run(["plan", "qwen3-30b-a3b", *job, "--baseline", str(base), "--fix", "optimizer=adam"], capsys)
    assert code == 2 and "compare plans under one optimizer" in err


def test_a_baselines_fp8_recipe_is_searched_and_an_unsearched_move_is_named(tmp_path, capsys):
    """The recipe audit: plan switched R200's fp8-current recipe to the seeds' blockwise (-0.1%) while explain then
    offered current scaling back (+6.8%). The baseline's own recipe is now a candidate, and plan names the moves it
    leaves unsearched on purpose that gain on its pick, as explain does."""
    base = tmp_path / "base.json"
    code, out, _ = run(["estimate", "qwen3-235b-a22b", "--gpu", "h100", "--gpus", "256", "--tp", "2", "--pp", "8",
                        "--vpp", "4", "--ep", "32", "--gbs", "2048", "--precision", "fp8-current", "--dispatcher",
                        "alltoall", "--ep-overlap", "--delay-wgrad", "--routing", "force-balance",
                        "--account-for-embedding", "--account-for-loss", "--json"], capsys)
    assert code == 0
    base.write_text(out)
    args = ["plan", "qwen3-235b-a22b", "--gpu", "h100", "--gpus", "256", "--gbs", "2048", "--routing", "force-balance",
            "--top", "1", "--json"]
    code, out, _ = run([*args, "--baseline", str(base)], capsys)
    assert code == 0 and json.loads(out)["results"][0]["knobs"]["precision"] == "fp8-current"
    code, out, _ = run(args, capsys)  # without it the seeds' Hopper recipe stays, and plan says what explain would
    data = json.loads(out)
    assert data["results"][0]["knobs"]["precision"] == "fp8-blockwise"
    move = {m["rule"]: m for m in data["unsearched_moves"]}["fp8_current_scaling"]
    assert move["predicted_gain"] > 0.03


def test_a_baseline_weighed_under_another_token_imbalance_is_another_job(tmp_path, capsys):
    """A baseline estimated under a measured --token-imbalance against a plan charged the default would credit the
    router to the layout: refused with the flag that matches them, accepted once it does."""
    job = ["--gpu", "gb200", "--gpus", "8", "--gbs", "64"]
    code, out, _ = run(["estimate", "qwen3-30b-a3b", *job, "--ep", "8", "--token-imbalance", "1.1", "--json"], capsys)
    base = tmp_path / "base.json"
    base.write_text(out)
    code, _, err = run(["plan", "qwen3-30b-a3b", *job, "--top", "1", "--baseline", str(base)], capsys)
    assert code == 2 and "token imbalance 1.1 vs the default" in err and "--token-imbalance" in err
    code, out, _ = run(["plan", "qwen3-30b-a3b", *job, "--top", "1", "--baseline", str(base), "--token-imbalance",
                        "1.1", "--json"], capsys)
    assert code == 0 and "versus_baseline" in json.loads(out)
