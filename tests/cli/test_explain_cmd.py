"""explain as a user runs it: of a model, a config.json or a saved result, against a baseline, and the
retune moves it offers."""

import json

import pytest
from cli_run import run


def test_explain_takes_a_config_json_model_or_a_saved_plan(shared_data, tmp_path, capsys):
    """A Hugging Face config.json as MODEL is a model; a saved `plan --json` as the argument is a plan."""
    config = str(shared_data / "models" / "glm-4.5.config.json")
    code, out, _ = run(["explain", config, "--gpu", "gb200", "--gpus", "96", "--tp", "2", "--pp", "6", "--ep", "16",
                        "--first-stage-layers", "14", "--last-stage-layers", "14", "--seq", "8192", "--gbs", "384"],
                       capsys)
    assert code == 0 and out.splitlines()[1].startswith("Fit: fits") and out.startswith("Batch: sequence")
    assert "TP2 x CP1 x DP8 x PP6" in out
    code, out, _ = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--top", "1",
                        "--json"], capsys)
    saved = tmp_path / "plan.json"
    saved.write_text(out)
    code, out, _ = run(["explain", str(saved)], capsys)
    assert code == 0 and out.splitlines()[1].startswith("Fit:")
    code, _, err = run(["explain", "--plan", config], capsys)
    assert code == 2 and "not a `moetune plan --json`" in err


def test_explain_names_a_missing_or_broken_file_as_the_user_gave_it(tmp_path, capsys):
    """A file given as the argument is not named --plan, which the user did not type; after --plan it is."""
    missing, broken = str(tmp_path / "missing.json"), tmp_path / "broken.json"
    broken.write_text("{bad")
    for args, named in ((["explain", missing], missing), (["explain", "--plan", missing], f"--plan {missing}"),
                        (["explain", str(broken)], str(broken)),
                        (["explain", "--plan", str(broken)], f"--plan {broken}")):
        code, _, err = run(args, capsys)
        assert code == 2 and err.startswith(f"error: {named}: "), (args, err)
        assert ("--plan" in err) == ("--plan" in args), (args, err)


def test_a_saved_result_is_explained_as_saved(tmp_path, capsys):
    """explain --plan takes layout, knobs and cluster from the file: flags that would change them are refused, not
    ignored; --token-imbalance weighs the saved dropless run again; a baseline of another model is refused."""
    code, out, _ = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--gbs", "512",
                        "--json"], capsys)
    saved = tmp_path / "e.json"
    saved.write_text(out)
    for extra, needle in ((["--gpu", "b200"], "--gpu: the saved result"), (["--tp", "2"], "--tp: the saved result"),
                          (["qwen3-30b-a3b"], "not both"), (["--rank", "2"], "an estimate holds one result")):
        code, _, err = run(["explain", "--plan", str(saved), *extra], capsys)
        assert code == 2 and needle in err
    code, _, err = run(["emit", str(saved), "--rank", "2"], capsys)  # emit says the cause first, as explain does
    assert code == 2 and err == (f"error: {saved}: --rank 2: an estimate holds one result; --rank picks among a "
                                 "plan's results\n")
    code, heavy, _ = run(["explain", "--plan", str(saved), "--token-imbalance", "3", "--json"], capsys)
    code, plain, _ = run(["explain", "--plan", str(saved), "--json"], capsys)
    assert json.loads(heavy)["profile"]["routing"]["token_imbalance"] == 3
    assert json.loads(plain)["profile"]["routing"]["token_imbalance"] < 3
    code, _, err = run(["plan", "mixtral-8x7b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--baseline",
                        str(saved)], capsys)
    assert code == 2 and "is another job (model qwen3-30b-a3b vs mixtral-8x7b)" in err
    for extra, needle in ((["--gpu", "b200"], "GPU h100 vs b200"), (["--seq", "8192"], "seq 4096 vs 8192"),
                          (["--gbs", "1024"], "GBS 512 vs 1024")):
        args = {"--gpu": "h100", "--seq": "4096", "--gbs": "512", **dict(zip(extra[::2], extra[1::2]))}
        code, _, err = run(["plan", "qwen3-30b-a3b", "--gpus", "16", *[x for kv in args.items() for x in kv],
                            "--baseline", str(saved)], capsys)
        assert code == 2 and needle in err
    # the same model trained without its MTP layer is another job too (it had read 1.54x with nothing explained)
    code, out, _ = run(["estimate", "glm-4.5-air", "--gpu", "h100", "--gpus", "64", "--ep", "8", "--pp", "2",
                        "--gbs", "512", "--json"], capsys)
    saved.write_text(out)
    code, _, err = run(["plan", "glm-4.5-air", "--gpu", "h100", "--gpus", "64", "--gbs", "512", "--mtp-layers", "0",
                        "--baseline", str(saved)], capsys)
    assert code == 2 and "MTP layers 1 vs 0" in err
    # a baseline on B200s a config puts in a 72-GPU domain is not a plan on HGX B200s (it had passed as one)
    code, out, _ = run(["estimate", "qwen3-30b-a3b", "--gpu", "b200", "--gpus", "64", "--set",
                        "train.global_batch_size=512", "--set", "model.expert_model_parallel_size=16", "--set",
                        "cluster.nvlink_domain=72", "--json"], capsys)
    saved.write_text(out)
    code, _, err = run(["plan", "qwen3-30b-a3b", "--gpu", "b200", "--gpus", "64", "--gbs", "512", "--baseline",
                        str(saved)], capsys)
    assert code == 2 and "72-GPU NVLink domain" in err and "vs b200" in err


def test_a_saved_result_whose_batch_does_not_divide_is_fixed_in_the_file(tmp_path, capsys):
    """A saved result's batch that does not divide over its DP says to mend the file, not to change --gbs or --mbs
    (flags explain --plan and emit refuse or do not take); the same batch given as flags still names the flags."""
    code, out, _ = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--gbs", "512",
                        "--json"], capsys)
    saved = json.loads(out)
    saved["workload"]["global_batch_size"] = 510  # not a multiple of MBS 1 x DP 16
    path = tmp_path / "e.json"
    path.write_text(json.dumps(saved))
    for args in (["explain", "--plan", str(path)], ["emit", str(path)]):
        code, _, err = run(args, capsys)
        assert code == 2 and "global batch size (510) must be divisible" in err, (args, err)
        assert "--gbs" not in err and "--mbs" not in err and "global_batch_size" in err, (args, err)
        assert err.count("\n") == 1, (args, err)
    code, _, err = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--gbs", "510"],
                       capsys)
    assert code == 2 and err.rstrip().endswith("change --gbs or --mbs")


def test_a_saved_plan_keeps_its_cluster_files_figures(tmp_path, capsys, monkeypatch):
    """A plan made on a cluster file is explained from anywhere, with the figures it was planned under, even after
    the file is edited."""
    cluster = tmp_path / "c.toml"
    cluster.write_text('gpu = "h100"\nmemory_gib = 70\n')
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(["plan", "qwen3-30b-a3b", "--gpu", "c.toml", "--gpus", "16", "--gbs", "512", "--top", "1",
                        "--json"], capsys)
    saved = tmp_path / "p.json"
    saved.write_text(out)
    cluster.write_text('gpu = "h100"\nmemory_gib = 60\n')
    monkeypatch.chdir("/")
    code, out, _ = run(["explain", "--plan", str(saved), "--json"], capsys)
    assert code == 0 and json.loads(out)["fit"]["capacity_gib"] == 70


def test_explain_when_the_slowest_stage_holds_only_the_loss(capsys):
    """gpt-oss-20b's last of 13 stages holds the LM head alone and paces the step: compute is named by it, and
    the optimizer's time is a named part of the compute wall. (At nine stages of three layers the layers' FP32 fc2
    bias pass under DeepEP, walls/compute.py expert_bias_seconds, outweighs the head.)"""
    layout = ["--gpu", "h100", "--gpus", "104", "--pp", "13", "--ep", "8", "--pipeline-layout", "Et*2|(t*2|)*11L",
              "--gbs", "1040", "--json"]
    code, out, _ = run(["explain", "gpt-oss-20b", *layout], capsys)
    data = json.loads(out)
    assert code == 0 and data["profile"]["why"].startswith("logits")
    code, out, _ = run(["estimate", "gpt-oss-20b", *layout], capsys)
    t = json.loads(out)["time"]
    assert sum(t["compute_by_class"].values()) == pytest.approx(t["walls"]["compute"], rel=1e-9)


def test_retune_changes_are_overrides_that_apply(capsys):
    """A Retune move onto more virtual stages writes the VPP and the pipeline split that goes with it (the uneven
    first/last stage counts cleared), not a placeholder, and estimating the moved config gives its figure."""
    code, out, _ = run(["explain", "qwen3-235b-a22b", "--gpu", "b200", "--gpus", "256", "--tp", "4", "--cp", "4",
                        "--pp", "8", "--ep", "16", "--seq", "65536", "--gbs", "64", "--first-stage-layers", "11",
                        "--last-stage-layers", "11", "--cuda-graph-scope", "none", "--dispatcher", "alltoall",
                        "--json"], capsys)
    moves = {m["rule"]: m for m in json.loads(out)["retune"]}
    change = moves["more_virtual_stages"]["change"]
    assert not any(isinstance(v, str) and v.startswith("<") for m in moves.values() for v in m["change"].values())
    assert change["model.virtual_pipeline_model_parallel_size"] == 2
    assert change["model.num_layers_in_first_pipeline_stage"] is None and change[
        "model.account_for_embedding_in_pipeline_split"] is True
    code, out, _ = run(["estimate", "qwen3-235b-a22b", "--gpu", "b200", "--gpus", "256", "--tp", "4", "--cp", "4",
                        "--pp", "8", "--vpp", "2", "--ep", "16", "--seq", "65536", "--gbs", "64",
                        "--account-for-embedding", "--account-for-loss", "--cuda-graph-scope", "none", "--dispatcher",
                        "alltoall", "--json"], capsys)
    assert json.loads(out)["time"]["tokens_per_s_per_gpu"] == pytest.approx(
        moves["more_virtual_stages"]["new_tokens_per_s_per_gpu"], rel=1e-9)


def test_explain_weighs_a_configuration_against_a_baseline_of_the_same_job(capsys, tmp_path):
    """explain --baseline says what the configuration changes and which wall gains; a saved plan's own comparison is
    carried over; a baseline of another job (here the routing) is refused."""
    job = ["qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "256"]
    code, base, _ = run(["estimate", *job, "--ep", "16", "--dispatcher", "alltoall", "--json"], capsys)
    (tmp_path / "b.json").write_text(base)
    code, out, _ = run(["explain", *job, "--ep", "8", "--baseline", str(tmp_path / "b.json"), "--json"], capsys)
    v = json.loads(out)["versus_baseline"]
    assert code == 0 and v["changes"]["model.expert_model_parallel_size"] == [16, 8]
    code, saved, _ = run(["plan", *job, "--top", "1", "--baseline", str(tmp_path / "b.json"), "--json"], capsys)
    (tmp_path / "p.json").write_text(saved)
    code, out, _ = run(["explain", str(tmp_path / "p.json"), "--json"], capsys)
    assert json.loads(out)["versus_baseline"] == json.loads(saved)["versus_baseline"]
    code, _, err = run(["explain", *job, "--ep", "8", "--routing", "force-balance", "--baseline",
                        str(tmp_path / "b.json")], capsys)
    assert code == 2 and "routing dropless vs force-balance" in err


@pytest.mark.parametrize(("section", "key", "value", "needle", "fields"), [
    ("layout", "ep", 3, "expert mesh ETPxEPxEDPxPP", "layout (ep, etp, pp)"),
    ("layout", "tp", 3, "attention mesh TPxCPxDPxPP", "layout (tp, cp, pp) or gpus"),
])
def test_a_saved_layout_that_does_not_cover_the_ranks_is_fixed_in_the_file(section, key, value, needle, fields,
                                                                             tmp_path, capsys):
    """The mesh errors of a saved result name the file's fields to mend, not --ep/--etp/--pp or --gpus, and emit
    names the file once (it had read '<file>: result: ...')."""
    code, out, _ = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--json"], capsys)
    saved = json.loads(out)
    saved[section][key] = value
    path = tmp_path / "e.json"
    path.write_text(json.dumps(saved))
    for args in (["explain", "--plan", str(path)], ["emit", str(path)]):
        code, _, err = run(args, capsys)
        assert code == 2 and needle in err and f"edit the file's {fields}" in err
        assert "--ep" not in err and "--gpus" not in err and "change" not in err, (args, err)
        assert err.count(str(path)) == 1 and "result:" not in err and err.count("\n") == 1, (args, err)


def test_defaults_print_each_mapping_with_bridge_fields_and_rule(capsys):
    """The Defaults section writes each mapping as Megatron Bridge spells it, with the rule it comes from."""
    code, out, _ = run(["explain", "qwen3-30b-a3b", "--gpu", "gb200", "--gpus", "8", "--ep", "8"], capsys)
    assert code == 0
    out = " ".join(out.split())
    assert ("model.moe_token_dispatcher_type=flex, model.moe_flex_dispatcher_backend=hybridep (seeds/000 First Answer "
            "Checklist: flex + hybridep for GB200/GB300/NVL72 systems)") in out
    assert "mixed_precision.fp8_recipe=mxfp8 (seeds/000 First Answer Checklist: Blackwell to MXFP8)" in out
    assert ("model.cuda_graph_impl=transformer_engine, model.cuda_graph_scope=[attn,moe_router,moe_preprocess] "
            "(seeds/000 First Answer Checklist: dropless MoE TE-scoped CUDA graphs") in out


def test_a_plan_made_with_headroom_is_explained_against_its_budget(tmp_path, capsys):
    """plan --headroom 10 searched Qwen3-30B-A3B on 16 H100 in 68 GiB; explain of it had judged its moves against the
    whole 78 GiB, and named a re-split at 69.9 GiB as one that fits, which the plan had refused. Fit and every move
    are read against the budget now, and it says so; report too."""
    code, stdout, err = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024", "--headroom",
                             "10", "--json"], capsys)
    assert code == 0, err
    plan = tmp_path / "hr.json"
    plan.write_text(stdout)
    code, stdout, err = run(["explain", str(plan), "--json"], capsys)
    assert code == 0, err
    fit, whole = json.loads(stdout)["fit"], json.loads(plan.read_text())["results"][0]["memory"]["capacity_bytes"]
    assert fit["headroom_gib"] == 10 and fit["capacity_gib"] == pytest.approx(whole / 2**30 - 10)
    moves = json.loads(stdout)["retune"]
    assert all(m["new_peak_gib"] <= fit["capacity_gib"] for m in moves if "new_peak_gib" in m)
    code, stdout, _ = run(["explain", str(plan)], capsys)
    assert "against the plan's budget: the GPU less its --headroom 10 GiB" in " ".join(stdout.split())
    code, _, err = run(["report", str(plan), "--out", str(tmp_path / "r.html")], capsys)
    assert code == 0, err
    assert "plan&#x27;s --headroom 10" in (tmp_path / "r.html").read_text() or \
        "plan's --headroom 10" in (tmp_path / "r.html").read_text()


@pytest.mark.parametrize("command", ["explain", "memory"])
def test_explain_and_memory_judge_the_rules_under_the_release_named(command, capsys):
    """EP 1 with expert TP unlike TP trains with an undercounted gradient norm before Megatron-Core 0.19: under
    --megatron-core 0.17 that is the error rule, as estimate says it, not the warning a run of no named release gets
    (both commands had read the release without opening it for the rules)."""
    args = [command, "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--tp", "2", "--ep", "1", "--etp", "1"]
    _, named, _ = run([*args, "--megatron-core", "0.17", "--json"], capsys)
    _, unnamed, _ = run([*args, "--json"], capsys)
    assert "scale.ep1_etp_needs_mcore_019" in named and "scale.ep1_etp_needs_mcore_019" not in unnamed
    assert "scale.ep1_etp_older_mcore" not in named  # memory lists errors alone; explain the warning, unnamed
    assert ("scale.ep1_etp_older_mcore" in unnamed) == (command == "explain")


def test_explain_exits_1_on_a_rule_error_as_estimate_and_memory_do(capsys):
    """--delay-wgrad without --ep-overlap: Megatron-Core asserts delay_wgrad_compute needs
    overlap_moe_expert_parallel_comm (rule ep_overlap.delay_wgrad_needs_overlap). estimate and memory exited 1 on it
    while explain printed the same "Check error" and exited 0; it now explains, then exits 1 as they do."""
    job = ["qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "8"]
    for command in ("estimate", "memory", "explain"):
        code, out, err = run([command, *job, "--delay-wgrad"], capsys)
        assert code == 1 and "ep_overlap.delay_wgrad_needs_overlap" in out and "1 rule error(s)" in err, command
    code, out, _ = run(["explain", *job, "--delay-wgrad"], capsys)
    assert "Fit:" in out and "Retune" in out  # the explanation is still printed in full
    code, out, _ = run(["explain", *job, "--delay-wgrad", "--json"], capsys)
    assert code == 1 and "ep_overlap.delay_wgrad_needs_overlap" in {c["rule"] for c in json.loads(out)["checks"]}
    assert run(["explain", *job, "--delay-wgrad", "--ep-overlap"], capsys)[0] == 0  # the pair Megatron accepts
