"""check and emit --megatron-bridge X.Y.Z: a Bridge release's own fields and those of the Megatron-Core its
3rdparty/Megatron-LM submodule pins (bridge_releases.csv, bridge_pins.csv; tests/configio/test_bridge_releases.py
cites the facts). What it lacks is an error (check) or left out at its default, else refused (emit)."""

import json

import pytest
from cli_run import run


def _errors(args, capsys):
    code, out, _ = run(["check", *args, "--json"], capsys)
    return code, [f for f in json.loads(out)["findings"] if f["rule"] == "check.not_in_release"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A saved qwen3-30b-a3b estimate: it writes the fields it sets over a recipe, moe_paged_stash=false among them."""
    import contextlib
    import io

    from moetune.cli.main import main
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--json"]) == 0
    path = tmp_path_factory.mktemp("saved") / "e.json"
    path.write_text(out.getvalue())
    return str(path)


def test_emit_for_bridge_0_4_2_checks_clean_there(saved, tmp_path, capsys):
    """Bridge 0.4.2 pins Megatron-Core 0.17.1 (no moe_paged_stash: a field from core_v0.18.0 on) and its
    GPTDatasetConfig has no seq_length (a field from v0.6.0 on; Megatron-Core's sequence_length before it): emit
    leaves the default-held field out, spells the data's length dataset.sequence_length, and what it writes checks
    clean under 0.4.2, the overrides and the Megatron-LM launch."""
    out = tmp_path / "run"
    code, said, _ = run(["emit", saved, "--megatron-bridge", "0.4.2", "--out", str(out)], capsys)
    overrides = (out / "overrides.txt").read_text()
    assert code == 0 and "--megatron-bridge 0.4.2" in said
    assert "moe_paged_stash" not in overrides and "dataset.sequence_length=4096" in overrides.splitlines()
    assert "dataset.seq_length" not in overrides
    for inputs in ([out / "overrides.txt"], [out / "env.sh", out / "megatron_lm_args.txt"]):
        assert _errors([*map(str, inputs), "--megatron-bridge", "0.4.2"], capsys)[1] == []


def test_the_main_spelling_checked_against_bridge_0_4_2(saved, tmp_path, capsys):
    """The files emit writes for Megatron-LM main's names, checked against Bridge 0.4.2: each field it lacks is an
    error, naming the Bridge release that has it; the data's length says to write the alias 0.4.2 has."""
    out = tmp_path / "run"
    assert run(["emit", saved, "--out", str(out)], capsys)[0] == 0
    code, found = _errors([str(out / "overrides.txt"), "--megatron-bridge", "0.4.2"], capsys)
    said = {f["message"].split(" ", 1)[0]: f["message"] for f in found}
    assert code == 1 and {"model.moe_paged_stash", "dataset.seq_length"} <= set(said)
    pinned = "in Megatron Bridge 0.4.2 (Megatron-Core 0.17.1 at Megatron-LM 2edffadb528e)"
    assert pinned in said["model.moe_paged_stash"]
    assert "upgrade to Megatron Bridge 0.5.0 or later" in said["model.moe_paged_stash"]
    assert "write it as dataset.sequence_length" in said["dataset.seq_length"]
    assert _errors([str(out / "overrides.txt"), "--megatron-bridge", "0.6.0"], capsys)[1] == []


def test_a_planned_field_a_bridge_release_lacks_is_refused(capsys):
    """moe_flex_dispatcher_num_sms: a TransformerConfig field only at Megatron-LM commits after Bridge 0.5.1's pin."""
    args = ["emit", "--set", "model.num_layers=4", "--set", "model.moe_flex_dispatcher_num_sms=24", "--gpus", "8",
            "--allow-errors"]
    assert run([*args, "--megatron-bridge", "0.6.0"], capsys)[0] == 0
    code, out, err = run([*args, "--megatron-bridge", "0.5.1"], capsys)
    assert code == 2 and not out and err.count("\n") == 1
    assert err.startswith("error: --megatron-bridge 0.5.1: the config sets what that release lacks: "
                          "model.moe_flex_dispatcher_num_sms") and "upgrade Megatron Bridge" in err


@pytest.mark.parametrize(("args", "said"), [
    (["--megatron-bridge", "0.4"], "--megatron-bridge 0.4: not a release moetune knows the names of; use one of "
                                   "0.2.0, 0.2.1,"),
    (["--megatron-bridge", "0.4.2", "--megatron-core", "0.17"], "--megatron-core 0.17 and --megatron-bridge 0.4.2: "
                                                                "pass one"),
])
@pytest.mark.parametrize("command", ["check", "emit"])
def test_bad_release_options_are_one_line_exit_2(command, args, said, capsys):
    code, _, err = run([command, "--set", "model.num_layers=4", "--gpus", "8", *args], capsys)
    assert code == 2 and err.count("\n") == 1 and said in err


@pytest.mark.parametrize(("args", "said"), [
    (["--megatron-bridge", "0.4"], "error: --megatron-bridge 0.4: not a release moetune knows the names of; use one of "
                                   "0.2.0, 0.2.1,"),
    (["--megatron-core", "0.20"], "error: --megatron-core 0.20: not a release moetune knows the names of; use one of "
                                  "0.13, 0.13.1,"),
    (["--megatron-bridge", "0.4.2", "--megatron-core", "0.17"], "error: --megatron-core 0.17 and --megatron-bridge "
                                                                "0.4.2: pass one"),
])
@pytest.mark.parametrize("command", ["plan", "estimate"])
def test_plan_and_estimate_refuse_a_bad_release_in_one_line_first(command, args, said, capsys):
    """plan and estimate check the release once, as the command's reading opens (configio/release_context.py reading),
    before any search, and estimate before its layout (TP 3 does not divide the 8 GPUs): one line, exit 2, nothing on
    stdout."""
    layout = ["--tp", "3"] if command == "estimate" else []
    code, out, err = run([command, "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "8", "--gbs", "64", *layout, *args],
                         capsys)
    assert code == 2 and not out and err.count("\n") == 1 and err.startswith(said)


def test_estimate_names_the_release_its_reading_checked(capsys):
    """estimate --megatron-core 0.16.0 targets core_v0.16.0, the release table's column 0.16 (releases.py
    known_release), in its text and in the JSON emit and check of the saved estimate read."""
    args = ["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "8", "--ep", "8", "--megatron-core", "0.16.0"]
    code, out, _ = run(args, capsys)
    assert code == 0 and "For Megatron-Core 0.16 (--megatron-core 0.16): defaulted knobs take what it runs" in out
    code, out, _ = run([*args, "--json"], capsys)
    assert code == 0 and json.loads(out)["release"] == {
        "release": "0.16", "family": "core", "option": "--megatron-core 0.16", "described": "Megatron-Core 0.16",
        "fields_it_lacks": []}


def test_an_alias_is_checked_as_written(tmp_path, capsys):
    """model.cuda_graph_modules (Megatron-Core's newer name, from core_v0.18.0 on) folds into cuda_graph_scope, and
    is checked as written: 0.17's TransformerConfig stops on it. The fold had hidden it (checked as cuda_graph_scope,
    which 0.17 has)."""
    path = tmp_path / "o.txt"
    path.write_text("model.cuda_graph_impl=transformer_engine\nmodel.cuda_graph_modules=[attn]\n")
    code, found = _errors([str(path), "--megatron-core", "0.17"], capsys)
    assert code == 1 and [f["message"].split(" ", 1)[0] for f in found] == ["model.cuda_graph_modules"]
    assert _errors([str(path), "--megatron-core", "0.18"], capsys)[1] == []


def test_plan_for_a_release_searches_what_it_runs_and_emit_takes_it(tmp_path, capsys):
    """plan --megatron-core 0.15 of DeepSeek-V3 on GB200: no HybridEP (moe_flex_dispatcher_backend came in 0.16) nor
    MXFP8 output projection (0.18) in any row; the saved plan names the release, and emit without an option writes
    for it (no --moe-flex-dispatcher-backend, which 0.15's parser lacks), saying so."""
    code, out, _ = run(["plan", "deepseek-v3", "--gpu", "gb200", "--gpus", "256", "--gbs", "4096", "--top", "3",
                        "--megatron-core", "0.15", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["release"]["option"] == "--megatron-core 0.15"
    assert "model.moe_flex_dispatcher_backend" in data["release"]["fields_it_lacks"]
    rows = [r["knobs"] for r in data["results"]]
    assert rows and all(k["dispatcher"] != "hybridep" and not k["fp8_output_proj"] for k in rows)
    saved = tmp_path / "p.json"
    saved.write_text(out)
    code, said, _ = run(["emit", str(saved), "--out", str(tmp_path / "run")], capsys)
    assert code == 0 and "written for Megatron-Core 0.15 (--megatron-core 0.15)" in said
    assert "--moe-flex-dispatcher-backend" not in (tmp_path / "run" / "megatron_lm_args.txt").read_text()


def test_plan_of_a_model_the_release_cannot_build_is_one_line(capsys):
    code, out, err = run(["plan", "deepseek-v3", "--gpu", "h100", "--gpus", "64", "--gbs", "256", "--megatron-bridge",
                          "0.4"], capsys)
    assert code == 2 and not out and err.count("\n") == 1 and "use one of 0.2.0" in err


def test_explain_of_a_plan_for_a_release_says_what_each_move_needs(tmp_path, capsys):
    """A plan kept to Megatron-Core 0.15 (GB200, no HybridEP): explain's retune moves that 0.15 cannot run name the
    release that can (the flex backend field and the router's graph scopes came in 0.16): the gain of an upgrade."""
    code, out, _ = run(["plan", "deepseek-v3", "--gpu", "gb200", "--gpus", "256", "--gbs", "4096", "--top", "1",
                        "--megatron-core", "0.15", "--json"], capsys)
    saved = tmp_path / "p.json"
    saved.write_text(out)
    code, out, _ = run(["explain", "--plan", str(saved), "--json"], capsys)
    moves = {m["rule"]: m for m in json.loads(out)["retune"]}
    assert code == 0 and moves["dispatcher_hybridep"]["predicted_gain"] > 0
    assert moves["dispatcher_hybridep"]["needs_release"] == "Megatron-Core 0.16 (model.moe_flex_dispatcher_backend)"
    assert all(m["needs_release"] is None or "Megatron-Core 0.1" in m["needs_release"] for m in moves.values())


def test_a_hybrid_for_bridge_0_3_1_uses_its_provider_s_pattern_field(tmp_path, capsys):
    """Bridge before 0.4.0 names the pattern hybrid_override_pattern (mamba_provider.py:99 @v0.3.1), and pins a
    Megatron-Core without '|' stage separators (0.16.1): plan keeps Nemotron-3-Nano at PP 1, emit writes the older
    name, and the overrides and launch check clean there."""
    code, out, _ = run(["plan", "nemotron3-nano-30b-a3b", "--gpu", "h100", "--gpus", "64", "--gbs", "256", "--top", "1",
                        "--megatron-bridge", "0.3.1", "--json"], capsys)
    assert code == 0 and json.loads(out)["results"][0]["layout"]["pp"] == 1
    saved = tmp_path / "p.json"
    saved.write_text(out)
    assert run(["emit", str(saved), "--out", str(tmp_path / "run")], capsys)[0] == 0
    overrides = (tmp_path / "run" / "overrides.txt").read_text()
    assert "model.hybrid_override_pattern=" in overrides and "model.hybrid_layer_pattern" not in overrides
    for inputs in ([tmp_path / "run" / "overrides.txt"], [tmp_path / "run" / "env.sh", tmp_path / "run" /
                                                            "megatron_lm_args.txt"]):
        assert _errors([*map(str, inputs), "--megatron-bridge", "0.3.1"], capsys)[1] == []


def test_a_release_without_the_last_resort_offload_says_nothing_fits(capsys):
    """Kimi-K2 does not fit on 64 H100; plan's last resort offloads the routed experts' activations, which 0.15 cannot
    (offload_modules came in 0.16): the answer is nothing fits (exit 1), not a refusal of a pass nobody pinned."""
    code, out, err = run(["plan", "kimi-k2", "--gpu", "h100", "--gpus", "64", "--gbs", "256", "--megatron-core",
                          "0.15"], capsys)
    assert code == 1 and "nothing fits" in out and not err


QWEN_GB200 = ["qwen3-30b-a3b", "--gpu", "gb200", "--gpus", "64", "--ep", "16"]


def test_estimate_for_a_release_moves_defaulted_knobs_and_refuses_given_ones(tmp_path, capsys):
    """On GB200 the platform defaults HybridEP and graphs over attn, moe_router and moe_preprocess; Megatron-Core 0.15
    has neither the flex backend field nor the router's scope values (0.16): the defaulted dispatcher falls back to
    alltoall (the seeds' safe bring-up), the scope to attention, and the saved estimate names the release, which
    explain's retune moves and emit take. A --dispatcher hybridep the user gave is one line."""
    code, out, _ = run(["estimate", *QWEN_GB200, "--megatron-core", "0.15", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["knobs"]["dispatcher"] == "alltoall" and data["knobs"]["cuda_graph_scope"] == ["attn"]
    assert data["release"]["option"] == "--megatron-core 0.15" and "flex_num_sms" not in data["defaulted"]
    code, out, _ = run(["explain", *QWEN_GB200, "--megatron-core", "0.15", "--json"], capsys)
    needs = {m["rule"]: m["needs_release"] for m in json.loads(out)["retune"]}
    assert needs.get("dispatcher_hybridep") == "Megatron-Core 0.16 (model.moe_flex_dispatcher_backend)"
    code, out, err = run(["estimate", *QWEN_GB200, "--megatron-core", "0.15", "--dispatcher", "hybridep"], capsys)
    assert code == 2 and not out and err.count("\n") == 1 and "model.moe_flex_dispatcher_backend" in err
