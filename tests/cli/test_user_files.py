"""Results made under a user's --efficiency / --overheads file say so: JSON records each file's path, text output names
them in one line, and the track record stays the shipped constants' (planner/track_record.estimate_record says why)."""

import json

from cli_run import run

from moetune.cli.main import main

ESTIMATE = ["qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--gbs", "1024", "--precision", "bf16",
            "--routing", "force-balance"]


def _files(tmp_path):
    eff, over = tmp_path / "eff.toml", tmp_path / "over.toml"
    eff.write_text("gemm_eff = 0.2\n")  # under it the published H100 runs come out far slower than measured
    over.write_text("cuda_context_gib = 2\n")
    return str(eff.resolve()), str(over.resolve())  # results record the absolute path


def _json(args, capsys):
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_estimate_names_its_files_and_keeps_the_shipped_track_record(tmp_path, capsys):
    eff, over = _files(tmp_path)
    shipped = _json(["estimate", *ESTIMATE], capsys)
    mine = _json(["estimate", *ESTIMATE, "--efficiency", eff, "--overheads", over], capsys)
    assert "efficiency_file" not in shipped and "overheads_file" not in shipped
    assert (mine["efficiency_file"], mine["overheads_file"]) == (eff, over)
    assert mine["time"]["tokens_per_s_per_gpu"] < shipped["time"]["tokens_per_s_per_gpu"]
    record = mine["track_record"]
    assert record.pop("constants") == "shipped" and record.pop("not_under") == eff
    assert record == shipped["track_record"]
    assert main(["estimate", *ESTIMATE, "--efficiency", eff, "--overheads", over]) == 0
    text = capsys.readouterr().out
    assert f"Your files: efficiency constants from {eff}; memory overheads from {over}, over the shipped ones" in text
    assert f"with the shipped constants, not those of {eff}" in text
    assert main(["estimate", *ESTIMATE]) == 0
    assert "Your files" not in capsys.readouterr().out


def test_plan_and_explain_record_the_files_and_explain_plan_reads_them_back(tmp_path, capsys):
    eff, over = _files(tmp_path)
    plan = _json(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024", "--top", "1",
                  "--efficiency", eff, "--overheads", over], capsys)
    assert (plan["efficiency_file"], plan["overheads_file"]) == (eff, over)
    assert plan["results"][0]["efficiency_file"] == eff and plan["track_record"]["not_under"] == eff
    saved = tmp_path / "plan.json"
    saved.write_text(json.dumps(plan))
    again = _json(["explain", "--plan", str(saved)], capsys)
    assert (again["efficiency_file"], again["overheads_file"]) == (eff, over)
    assert main(["explain", "--plan", str(saved)]) == 0
    assert f"Your files: efficiency constants from {eff}; memory overheads from {over}" in capsys.readouterr().out
    flags = _json(["explain", *ESTIMATE, "--efficiency", eff], capsys)
    assert flags["efficiency_file"] == eff and "overheads_file" not in flags


def test_a_result_saved_with_another_gpus_constants_reloads_without_them(tmp_path, capsys):
    """A result saved before --efficiency refused a file with only another GPU's section carries that table: it
    changed no figure of the result, which reloads without it (explain --plan had stopped at the refusal)."""
    import json

    from moetune.cli.main import main
    assert main(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "8", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    data["efficiency_overrides"] = {"gb200": {"nvlink_eff": 0.7}}
    saved = tmp_path / "old.json"
    saved.write_text(json.dumps(data))
    assert main(["explain", "--plan", str(saved), "--json"]) == 0


def test_a_file_that_sets_nothing_for_the_gpu_is_refused_by_every_command(tmp_path, capsys):
    """An empty file, or one with only another GPU's section, is one error line and exit 2 wherever it meets the GPU:
    estimate (flags or a config), explain and plan; a saved result's such table met at explain --plan likewise."""
    for text, sections in (("", "none"), ("[gb200]\nnvlink_eff = 0.7\n", "[gb200]")):
        path = tmp_path / "eff.toml"
        path.write_text(text)
        line = (f"error: --efficiency {path} sets no constant for h100 (sections: {sections}): put them at the top "
                "level for every GPU, or in a [h100] section\n")
        for args in (["estimate", *ESTIMATE], ["explain", *ESTIMATE],
                     ["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--set",
                      "model.expert_model_parallel_size=16"],
                     ["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024"]):
            assert main([*args, "--efficiency", str(path)]) == 2 and capsys.readouterr().err == line
        # a saved result explained under such a file: refused too, not passed over for the result's own table
        assert main(["estimate", *ESTIMATE, "--json"]) == 0
        (tmp_path / "e.json").write_text(capsys.readouterr().out)
        assert main(["explain", str(tmp_path / "e.json"), "--efficiency", str(path)]) == 2
        assert capsys.readouterr().err == line


def test_the_file_is_checked_once_where_it_meets_the_gpu(tmp_path, capsys, monkeypatch):
    """The user's constants are checked against the GPU's shipped ones when the file is loaded, not again by every
    estimate made under them (explain weighs a dozen what-if variants)."""
    import moetune.walls.efficiency as eff_module

    checked = []
    check = eff_module._check_links
    monkeypatch.setattr(eff_module, "_check_links", lambda *a: checked.append(a) or check(*a))
    eff, _ = _files(tmp_path)
    assert main(["explain", *ESTIMATE, "--efficiency", eff, "--json"]) == 0
    assert len(checked) == 1


def test_plan_searches_under_the_users_overheads(tmp_path, capsys):
    """plan --overheads: every candidate carries the user's figure, and explain --plan reads it back."""
    path = tmp_path / "o.toml"
    path.write_text("cuda_context_gib = 20\n")
    args = ["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024", "--top", "2", "--json"]
    assert main([*args, "--overheads", str(path)]) == 0
    heavy = json.loads(capsys.readouterr().out)["results"]
    assert main(args) == 0
    light = json.loads(capsys.readouterr().out)["results"]
    for r in heavy:
        assert r["overheads"] == {"cuda_context_gib": 20}
        assert r["memory"]["peak_bytes"] <= r["memory"]["capacity_bytes"]
        assert max(s["bytes"]["cuda_context"] for s in r["stages"]) == 20 * 2**30
    assert "overheads" not in light[0] and max(s["bytes"]["cuda_context"] for s in light[0]["stages"]) < 2**30


def test_explain_of_a_saved_result_takes_an_empty_overheads_file_as_the_built_in_figures(tmp_path, capsys):
    """An empty --overheads file is the built-in figures given explicitly (as check --model takes it, below); explain
    --plan had passed it over for the saved result's own heavy figures."""
    heavy, saved, empty = tmp_path / "o.toml", tmp_path / "e.json", tmp_path / "none.toml"
    heavy.write_text("cuda_context_gib = 30\n")
    empty.write_text("")
    job = ["qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "256", "--ep", "16"]
    builtin = _json(["explain", *job], capsys)["fit"]["peak_gib"]
    saved.write_text(json.dumps(_json(["estimate", *job, "--overheads", str(heavy)], capsys)))
    kept = _json(["explain", "--plan", str(saved)], capsys)["fit"]["peak_gib"]
    assert kept > builtin + 29  # the saved 30 GiB CUDA context in place of the built-in 0.75 (memory_overheads.toml)
    assert _json(["explain", "--plan", str(saved), "--overheads", str(empty)], capsys)["fit"]["peak_gib"] == builtin


def test_check_judges_the_fit_under_the_plans_own_overheads_or_the_users(tmp_path, capsys):
    """check --model of a saved plan runs the memory wall under the overheads the plan was made with; --overheads
    replaces them, and needs --model (the only thing that reads them)."""
    heavy, plan = tmp_path / "o.toml", tmp_path / "p.json"
    heavy.write_text("cuda_context_gib = 30\n")
    assert main(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "256", "--top", "1",
                 "--json"]) == 0
    plan.write_text(capsys.readouterr().out)
    check = ["check", str(plan), "--model", "qwen3-30b-a3b", "--json"]
    assert main(check) == 0
    assert "fit.does_not_fit" not in capsys.readouterr().out
    assert main([*check, "--overheads", str(heavy)]) == 1
    assert "fit.does_not_fit" in {f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]}
    estimate = tmp_path / "e.json"  # an estimate saved under the heavy figures: check reads them back from it
    assert main(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "256", "--ep", "16", "--json",
                 "--overheads", str(heavy)]) == 0
    estimate.write_text(capsys.readouterr().out)
    assert main(["check", str(estimate), "--model", "qwen3-30b-a3b", "--json"]) == 1
    assert "fit.does_not_fit" in {f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]}
    (tmp_path / "none.toml").write_text("")  # the built-in figures, given explicitly, replace the saved ones
    assert main(["check", str(estimate), "--model", "qwen3-30b-a3b", "--overheads", str(tmp_path / "none.toml")]) == 0
    capsys.readouterr()
    # the saved plan names its model, which --overheads then sizes; a config that names none needs --model
    code, out, _ = run(["check", str(plan), "--overheads", str(heavy), "--json"], capsys)
    assert code == 1 and "fit.does_not_fit" in {f["rule"] for f in json.loads(out)["findings"]}
    code, _, err = run(["check", "--set", "model.num_moe_experts=128", "--overheads", str(heavy)], capsys)
    assert code == 2 and "only --model runs" in err


def test_an_overheads_number_past_a_float_is_one_line(tmp_path, capsys):
    path = tmp_path / "o.toml"
    path.write_text("nccl_gib = 1" + "0" * 400 + "\n")
    code, _, err = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--overheads",
                        str(path)], capsys)
    assert code == 2 and "nccl_gib" in err and "must be a number" in err
