"""Results made under a user's --efficiency / --overheads file say so: JSON records each file's path, text output names
them in one line, and the track record stays the shipped constants' (planner/track_record.estimate_record says why)."""

import json

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
