"""The CLI as a user runs it: JSON contracts, tables, and one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest

from moetune.cli.main import main


def run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_estimate_json_contract(capsys):
    code, out, _ = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--tp", "2", "--pp", "2",
                        "--ep", "8", "--seq", "4096", "--mbs", "1", "--gbs", "64", "--json"], capsys)
    data = json.loads(out)
    assert code == 0
    assert data["layout"] == {"tp": 2, "cp": 1, "dp": 4, "pp": 2, "vpp": 1, "etp": 1, "ep": 8, "edp": 1}
    assert [s["stage"] for s in data["stages"]] == [0, 1]
    for s in data["stages"]:
        assert s["bytes"]["total"] == sum(v for k, v in s["bytes"].items() if k != "total")
        assert isinstance(s["params"], int)
    mem = data["memory"]
    assert mem["peak_bytes"] == max(s["bytes"]["total"] for s in data["stages"])
    assert mem["fits"] == (mem["peak_bytes"] <= mem["capacity_bytes"])
    assert data["stages"][mem["worst_stage"]]["bytes"]["total"] == mem["peak_bytes"]


def test_estimate_table(capsys):
    code, out, _ = run(["estimate", "mixtral-8x7b", "--gpu", "h100", "--gpus", "8", "--ep", "8"], capsys)
    assert code == 0 and "optimizer_states" in out and "stage 0" in out
    # it does not fit: a what-if (exit 0) that says where the fit steps are and what fails on it
    assert "does NOT fit (`explain` with these flags gives the seeds' fit steps; `check --model` exits 1 on it)" \
        in " ".join(out.split())


@pytest.mark.parametrize(("args", "rule"), [
    (["--ep", "16", "--ep-overlap", "--recompute", "full"], "ep_overlap.full_recompute"),  # Megatron-Core refuses
    (["--gpu", "gb200", "--ep", "16", "--dispatcher", "deepep"], "dispatcher.deepep_platform"),  # Bridge refuses
])
def test_estimate_names_the_rule_errors_of_what_it_estimates(args, rule, capsys):
    """A configuration Megatron would refuse still gets its numbers, with the refusal next to them, and exits 1 as
    `check` does (it had exited 0, so a script gating on estimate passed what Bridge asserts against: model audit)."""
    base = ["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "64"]
    code, out, err = run([*base, *args, "--json"], capsys)
    data = json.loads(out)  # one JSON document: the estimate, with the checks
    errors = [c["rule"] for c in data["checks"] if c["severity"] == "error"]
    assert code == 1 and rule in errors and data["time"]["tokens_per_s_per_gpu"] > 0
    assert err.startswith(f"error: {len(errors)} rule error(s): Megatron or the seeds refuse this configuration")
    code, out, _ = run([*base, *args], capsys)
    assert code == 1 and f"Check error {rule}" in out
    code, out, _ = run([*base, "--ep", "16", "--dispatcher", "alltoall", "--json"], capsys)
    assert [c for c in json.loads(out)["checks"] if c["severity"] == "error"] == []


@pytest.mark.parametrize(("switch", "refusal"), [("--fp8-param-gather", "fp8_param_gather needs an FP8 recipe"),
                                                 ("--fp4-param-gather", "fp4_param_gather needs --precision nvfp4")])
def test_estimate_says_quantized_weights_without_their_recipe_once(switch, refusal, capsys):
    """The knobs refuse FP8 (NVFP4) weights under BF16 before anything is estimated: one error line, exit 2, the
    fault said once (the refusal names rule precision.fp8/fp4_params_without_* as its same_as, which only check
    reads)."""
    code, out, err = run(["estimate", "qwen3-30b-a3b", "--gpu", "b200", "--gpus", "8", "--precision", "bf16",
                          switch], capsys)
    assert code == 2 and out == "" and err.count(refusal) == 1 and len(err.strip().splitlines()) == 1


def test_models_show_json(capsys):
    code, out, _ = run(["models", "show", "deepseek-v3", "--json"], capsys)
    data = json.loads(out)
    for key in ("total_params", "active_params", "mtp_params", "embedding_params", "num_layers", "num_moe_layers",
                "num_experts", "topk", "shared_experts", "attention"):
        assert key in data
    assert (data["attention"], data["num_layers"], data["num_moe_layers"], data["topk"]) == ("mla", 61, 58, 8)


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


def test_models_and_hardware_list(capsys):
    assert run(["models"], capsys)[0] == 0
    code, out, _ = run(["hardware", "--json"], capsys)
    assert code == 0 and {g["key"] for g in json.loads(out)} >= {"a100", "h100", "h200", "b200", "b300", "gb200",
                                                                 "gb300"}
    code, out, _ = run(["hardware", "b300"], capsys)  # the table names what its published runs read as
    assert code == 0 and "as if the NIC ran at 400 Gb/s a GPU, not 800" in out.replace("\n", " ")
    assert "NIC ran" not in run(["hardware", "b200"], capsys)[1]


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
     "no a2a group of 2 or more that divides CP, splits the 4 KV groups over TP 4"),
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


def test_a_bad_baseline_fails_before_the_search(tmp_path, capsys, monkeypatch):
    import moetune.cli.plan_cmd as plan_cmd
    monkeypatch.setattr(plan_cmd, "plan", lambda *a, **k: pytest.fail("searched before reading --baseline"))
    bad = tmp_path / "b.json"
    bad.write_text('{"results": []}')
    code, _, err = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--baseline",
                        str(bad)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_an_unwritable_output_fails_in_one_line(tmp_path, capsys, monkeypatch):
    """calibrate --write checks its path before the fit; emit --out and a write that fails anyway name the path."""
    import moetune.cli.calibrate_cmd as calibrate_cmd
    monkeypatch.setattr(calibrate_cmd, "calibrate", lambda *a: pytest.fail("fitted before checking --write"))
    for target in (tmp_path / "no" / "such" / "x.toml", tmp_path):
        code, _, err = run(["calibrate", "--write", str(target)], capsys)
        assert code == 2 and str(target) in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    from moetune.errors import MoetuneError
    from moetune.files import write_text
    with pytest.raises(MoetuneError, match="cannot write the file"):
        write_text(tmp_path, "x", "--out")


LAB_GPU = ('gpus_per_node = 4\n[gpu]\nname = "X"\narch = "hopper"\nbf16_tflops = 500\nfp8_tflops = 1000\n'
           'fp4_tflops = 0\nmemory_gib = 64\nhbm_tbps = 2\nnvlink_gbps = 200\nnvlink_domain = 4\n'
           'gpus_per_node = 4\nnic_gbps = 200\nhost_link_gbps = 64\ngemm_tile = 128\ntdp_w = 500\n')


def test_a_gpu_of_ones_own_runs_every_command(tmp_path, capsys):
    """A cluster file with its own [gpu] table: its name is no catalog key, so the rule checks and the dispatcher
    search must read the file back (GpuSpec.ref), as the estimate JSON does; they once asked the catalog for it."""
    lab = tmp_path / "lab.toml"
    lab.write_text(LAB_GPU)
    base = ["qwen3-30b-a3b", "--gpu", str(lab), "--gpus", "16"]
    assert run(["estimate", *base, "--ep", "8", "--gbs", "256", "--json"], capsys)[0] == 0
    assert run(["explain", *base, "--ep", "8", "--gbs", "256"], capsys)[0] == 0
    code, out, _ = run(["plan", *base, "--gbs", "256", "--top", "1", "--json"], capsys)
    assert code == 0 and json.loads(out)["results"][0]["gpu"] == str(lab)


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


def test_user_cluster_toml(tmp_path, capsys):
    toml = tmp_path / "mycluster.toml"
    toml.write_text('gpu = "h100"\nmemory_gib = 70\nnic_gbps = 200\n')
    code, out, _ = run(["estimate", "mixtral-8x7b", "--gpu", str(toml), "--gpus", "8", "--ep", "8", "--json"], capsys)
    assert code == 0 and json.loads(out)["memory"]["capacity_bytes"] == 70 * 2**30
    toml.write_text('gpu = "h100"\nwarp_drive = 1\n')
    code, _, err = run(["estimate", "mixtral-8x7b", "--gpu", str(toml), "--gpus", "8"], capsys)
    assert code == 2 and "unknown field(s) warp_drive" in err


def test_console_script_runs():
    proc = subprocess.run([sys.executable, "-m", "moetune.cli.main", "estimate", "x", "--gpu", "h100", "--gpus", "8"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown model")


def test_plan_that_finds_nothing_says_how_far_off_and_exits_1(capsys):
    """Kimi-K2 (1T parameters) on 64 H100: no layout fits; the line names the least memory any candidate needs."""
    code, out, _ = run(["plan", "kimi-k2", "--gpu", "h100", "--gpus", "64", "--seq", "4096", "--gbs", "1024"], capsys)
    assert code == 1
    assert "nothing fits: the lightest candidate" in out and "GiB per GPU of 78" in out
    code, out, _ = run(["plan", "kimi-k2", "--gpu", "h100", "--gpus", "64", "--seq", "4096", "--gbs", "1024",
                        "--json"], capsys)
    data = json.loads(out)
    assert code == 1 and data["results"] == [] and data["nothing_fits"]["lightest_peak_gib"] > 78
    assert data["nothing_fits"]["reason"].endswith("add GPUs or shorten the sequence")
    # pins that narrowed the search are the first remedy named (fuzz audit: the advice had never mentioned them)
    code, out, _ = run(["plan", "deepseek-v3", "--gpu", "h100", "--gpus", "64", "--gbs", "512", "--fix", "pp=1",
                        "--fix", "precision=bf16"], capsys)
    assert code == 1 and "loosen --fix pp=1 --fix precision=bf16, add GPUs" in out


def test_plan_notes_the_data_parallel_sizes_the_global_batch_rules_out(capsys):
    code, out, _ = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64", "--seq", "4096", "--gbs", "1000",
                        "--top", "1"], capsys)
    assert code == 0
    assert "GBS 1000 is not a multiple of DP x MBS for DP 16, 32, 64" in out and "GBS 1024 would allow DP 64" in out
    code, out, _ = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64", "--seq", "4096", "--gbs", "1000",
                        "--top", "1", "--json"], capsys)
    assert json.loads(out)["gbs_excluded_dp"] == [16, 32, 64] and json.loads(out)["gbs_allowing_widest_dp"] == 1024


def test_plan_says_what_the_optimizer_offload_alternative_changes_beside_the_offload(capsys):
    """The offload is added to the pick's search, not put in recompute's place: where the alternative still
    recomputes whole layers (GLM-4.5 at 128k on 136 H100), the note says so and names the layout it moves to; where
    it recomputes less (Qwen3-235B at 128k on 64 H100), it names the lighter recompute."""
    for job in (["glm-4.5", "--gpus", "136", "--gbs", "136"], ["qwen3-235b-a22b", "--gpus", "64", "--gbs", "64"]):
        args = ["plan", *job, "--gpu", "h100", "--seq", "131072", "--top", "1"]
        code, out, _ = run([*args, "--json"], capsys)
        data = json.loads(out)
        pick, alt = data["results"][0], data["offload_alternative"]
        assert code == 0 and pick["knobs"]["recompute"] == "full" and alt["knobs"]["optimizer_offload_fraction"] == 1
        code, out, _ = run(args, capsys)
        note = " ".join(out.split()).split("#1 recomputes whole layers; ")[1].split(". The seeds")[0]
        assert "offload instead" not in note and note.startswith("offloading the optimizer to the CPU frees"), note
        assert ("still recomputing whole layers" in note) == (alt["knobs"]["recompute"] == "full"), note
        assert ("instead of full" in note) == (alt["knobs"]["recompute"] != "full"), note
        moved = {k: alt["layout"][k] for k in ("tp", "cp", "pp", "ep")} != {k: pick["layout"][k] for k in
                                                                           ("tp", "cp", "pp", "ep")}
        assert (f"the layout TP{alt['layout']['tp']} CP{alt['layout']['cp']}" in note) == moved, note


def test_plan_names_the_dropless_factor_it_charged(capsys):
    args = ["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq", "4096", "--gbs", "1024", "--top", "1",
            "--fix", "ep=16"]  # EP > 1: the busiest expert rank is charged (EP 1 x ETP picks are not, another test)
    code, out, _ = run(args, capsys)
    from moetune.layout.knobs import DROPLESS_IMBALANCE
    assert code == 0 and f"busiest of EP 16 expert ranks is charged {DROPLESS_IMBALANCE:.2f}x the mean" in \
        " ".join(out.split())
    code, out, _ = run([*args, "--routing", "force-balance"], capsys)
    assert code == 0 and "busiest of" not in out


def test_explain_takes_a_config_json_model_or_a_saved_plan(shared_data, tmp_path, capsys):
    """A Hugging Face config.json as MODEL is a model; a saved `plan --json` as the argument is a plan."""
    config = str(shared_data / "models" / "glm-4.5.config.json")
    code, out, _ = run(["explain", config, "--gpu", "gb200", "--gpus", "96", "--tp", "2", "--pp", "6", "--ep", "16",
                        "--first-stage-layers", "14", "--last-stage-layers", "14", "--seq", "8192", "--gbs", "384"],
                       capsys)
    assert code == 0 and out.startswith("Fit: fits") and "TP2 x CP1 x DP8 x PP6" in out
    code, out, _ = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--top", "1",
                        "--json"], capsys)
    saved = tmp_path / "plan.json"
    saved.write_text(out)
    code, out, _ = run(["explain", str(saved)], capsys)
    assert code == 0 and out.startswith("Fit:")
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


def test_nothing_fits_says_when_memory_is_not_the_reason(capsys):
    """Kimi-K2 on 144 GB200 (one 72-rank NVLink domain) with HybridEP pinned at EP48: every EP group but the first
    straddles two domains, so no candidate is legal though the lightest fits in memory; the answer says so."""
    code, out, _ = run(["plan", "kimi-k2", "--gpu", "gb200", "--gpus", "144", "--seq", "4096", "--gbs", "1152",
                        "--fix", "ep=48", "--fix", "dispatcher=hybridep", "--top", "1"], capsys)
    assert code == 1 and "candidates fit in memory" in out and "NVLink domains" in out


def test_estimate_defaults_the_cp_exchange_to_one_that_runs(capsys):
    """gpt-oss's attention sinks run context parallel only over a2a: left out, the exchange is the legal one that hides
    best (a2a here, as Bridge's gpt-oss recipes set), reported as defaulted; Megatron's own p2p is refused by a rule."""
    base = ["estimate", "gpt-oss-120b", "--gpu", "h100", "--gpus", "64", "--cp", "8", "--ep", "8", "--seq", "32768",
            "--json"]
    code, out, _ = run(base, capsys)
    data = json.loads(out)
    assert code == 0 and data["knobs"]["cp_comm_type"] == "a2a" and "cp_comm_type" in data["defaulted"]
    assert "cp.sinks_need_a2a" not in {c["rule"] for c in data["checks"]}
    code, out, _ = run(base + ["--cp-comm-type", "p2p"], capsys)
    assert "cp.sinks_need_a2a" in {c["rule"] for c in json.loads(out)["checks"]}


def test_a_cp_1_result_s_own_exchange_passes_again(capsys):
    """estimate reports p2p at CP 1 (Megatron's unset cp_comm_type): passing that back is no silent no-op to refuse,
    where another exchange at CP 1 is."""
    base = ["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "8", "--json"]
    code, out, _ = run(base, capsys)
    assert code == 0 and json.loads(out)["knobs"]["cp_comm_type"] == "p2p"
    code, again, _ = run(base + ["--cp-comm-type", "p2p"], capsys)
    assert code == 0 and json.loads(again)["time"] == json.loads(out)["time"]
    assert run(base + ["--cp-comm-type", "a2a"], capsys)[0] == 2


def test_uneven_pipeline_split_is_printed_so_it_can_be_passed_again(capsys):
    """61 layers over PP4: the table and explain name the split (a layout row without it cannot be re-run)."""
    code, out, _ = run(["plan", "kimi-k2", "--gpu", "gb200", "--gpus", "256", "--seq", "4096", "--gbs", "4096",
                        "--top", "1", "--fix", "pp=4", "--fix", "vpp=1", "--json"], capsys)
    pick = json.loads(out)["results"][0]
    layout = pick["pipeline"]["pipeline_layout"]  # the ranks re-split by planner/pipeline_balance.py
    assert code == 0 and layout
    code, out, _ = run(["estimate", "kimi-k2", "--gpu", "gb200", "--gpus", "256", "--pp", "4", "--ep", "64",
                        "--tp", str(pick["layout"]["tp"]), "--cp", str(pick["layout"]["cp"]),
                        "--pipeline-layout", layout, "--json"], capsys)
    assert code == 0 and json.loads(out)["pipeline"]["pipeline_layout"] == layout
    code, out, _ = run(["estimate", "kimi-k2", "--gpu", "gb200", "--gpus", "256", "--pp", "4", "--ep", "64",
                        "--first-stage-layers", "13", "--last-stage-layers", "16"], capsys)
    assert code == 0
    assert "first stage 13 layers, last stage 16 layers" in " ".join(out.split())
    code, out, _ = run(["explain", "kimi-k2", "--gpu", "gb200", "--gpus", "256", "--pp", "4", "--vpp", "4",
                        "--ep", "64", "--pipeline-layout", "Et*4|(t*4|)*14tL"], capsys)
    assert code == 0 and "pipeline layout Et*4|(t*4|)*14tL" in out


def test_plan_searches_under_muon_where_pinned(capsys):
    """Kimi-K2's recipes train with dist_muon; plan could only search Adam (no --fix optimizer): its picks carry Muon,
    its state and its Newton-Schulz step, and emit it as dist_muon."""
    code, out, _ = run(["plan", "kimi-k2", "--gpu", "gb300", "--gpus", "256", "--seq", "4096", "--gbs", "4096",
                        "--top", "2", "--fix", "optimizer=muon", "--json"], capsys)
    results = json.loads(out)["results"]
    assert code == 0 and results and all(r["knobs"]["optimizer"] == "muon" for r in results)
    assert all(r["knobs"]["optimizer_offload_fraction"] == 0 for r in results)
    assert all(r["time"]["compute_by_class"]["optimizer_step"] > 0.02 for r in results)
    # the tables show the searched knobs only: the pinned optimizer is named under them, in plan and estimate
    code, out, _ = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--top", "1",
                        "--fix", "optimizer=muon"], capsys)
    text = " ".join(out.split())
    assert code == 0 and "Optimizer (every row): Muon under the layer-wise distributed optimizer" in text
    code, out, _ = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "8",
                        "--optimizer", "muon"], capsys)
    assert code == 0 and "Newton-Schulz GEMMs included" in " ".join(out.split())


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


def test_a_pinned_pipeline_layout_is_kept_as_written(capsys):
    """--fix pipeline_layout keeps the recipe's string (no re-split) on every result, at any PP x VPP it fits."""
    text = "Et*4|(t*4|)*14tmL"
    code, out, _ = run(["plan", "deepseek-v3", "--gpu", "gb200", "--gpus", "256", "--seq", "4096", "--gbs", "4096",
                        "--top", "3", "--fix", f"pipeline_layout={text}", "--json"], capsys)
    results = json.loads(out)["results"]
    assert code == 0 and results
    assert all(r["pipeline"]["pipeline_layout"] == text for r in results)
    assert all(r["layout"]["pp"] * r["layout"]["vpp"] == 16 for r in results)


@pytest.mark.parametrize("fix, words", [
    (["pipeline_layout=Et*4|(t*4|)*14tL"], "places 0 MTP layers but the run has 1"),
    (["pipeline_layout=Et*4|(t*4|)*14tmL", "pp=3"], "has 16 stages: it needs PP > 1 with PP x VPP = 16"),
    (["pipeline_layout=Et*61mL"], "has 1 stage, which is no pipeline"),
    (["pipeline_layout=Eq|tmL"], "unknown symbols ['q']"),
])
def test_a_pinned_pipeline_layout_that_cannot_run_is_one_line(capsys, fix, words):
    args = ["plan", "deepseek-v3", "--gpu", "gb200", "--gpus", "256", "--seq", "4096", "--gbs", "4096"]
    for f in fix:
        args += ["--fix", f]
    code, out, err = run(args, capsys)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err



@pytest.mark.parametrize(("text", "reason"), [
    ("Et|xL", "unknown symbols ['x']; use E (embedding), t (layer), m (MTP), L (loss), | (stage break), (..)*N "
              "and x*N"),
    ("Et|(t*4L", "unbalanced parentheses, or a group without its *N (write (t*4|)*14)"),
    ("Et*99999999999|tL", "t*99999999999 expands to more than 100,000 symbols; give one t per decoder layer"),
])
def test_a_pinned_pipeline_layout_that_does_not_parse_names_the_pin(text, reason, capsys):
    """The layout parser's refusal names the string as plan's user typed it, --fix pipeline_layout=..., whole: not
    estimate's --pipeline-layout flag, which plan has not (it had been named so, then cut off after the fact)."""
    code, _, err = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024", "--fix",
                        f"pipeline_layout={text}"], capsys)
    assert code == 2 and err.strip() == f"error: --fix pipeline_layout={text}: {reason}"


def test_a_pinned_cp_exchange_beside_a_pinned_cp_of_1_is_one_line(capsys):
    """At CP 1 nothing is exchanged: estimate refuses --cp-comm-type there, and plan refuses the two pins together."""
    code, _, err = run(["plan", "glm-4.5-air", "--gpu", "h100", "--gpus", "64", "--gbs", "512", "--fix", "cp=1",
                        "--fix", "cp_comm_type=a2a"], capsys)
    assert code == 2 and "--fix cp=1 leaves nothing to exchange" in err and len(err.strip().splitlines()) == 1


def test_plan_takes_p2p_pinned_at_cp_1_as_estimate_does(capsys):
    """p2p is what a CP-1 result reports (Megatron-Core validates cp_comm_type only at CP > 1): plan had refused
    --fix cp=1 --fix cp_comm_type=p2p, which estimate takes as --cp 1 --cp-comm-type p2p; the pin is inert there."""
    base = ["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq", "4096", "--gbs", "256", "--top", "2",
            "--fix", "cp=1", "--json"]
    code, pinned, err = run(base + ["--fix", "cp_comm_type=p2p"], capsys)
    assert code == 0, err
    code, free, _ = run(base, capsys)
    assert json.loads(pinned)["results"] == json.loads(free)["results"]

def test_plan_table_cells_are_folded_never_cut(capsys):
    """A cell must stay whole to be passed again: DeepSeek-V3's re-split layout strings on 1,024 H100 are longer
    than the layout column, and the table folds them instead of ending them with an ellipsis."""
    code, out, _ = run(["plan", "deepseek-v3", "--gpu", "h100", "--gpus", "1024", "--seq", "4096", "--gbs", "8192"],
                       capsys)
    cells = "".join(line.split("│")[2].strip() for line in out.splitlines() if line.count("│") > 3)
    assert code == 0 and "…" not in out
    code, js, _ = run(["plan", "deepseek-v3", "--gpu", "h100", "--gpus", "1024", "--seq", "4096", "--gbs", "8192",
                       "--json"], capsys)
    assert all(r["pipeline"]["pipeline_layout"] in cells for r in json.loads(js)["results"])


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


def test_a_pick_check_says_what_its_own_fix_predicts(capsys):
    """Qwen3-Next-80B-A3B at 32k on 48 GB200: the pick keeps CP 1 and the long-context rule asks for CP 4; the search
    already weighed that, so the check carries the fix's prediction (slower here: its linear-attention layers need
    no 4K shards, and CP 4 leaves DP 1)."""
    assert main(["plan", "qwen3-next-80b-a3b", "--gpu", "gb200", "--gpus", "48", "--seq", "32768", "--gbs", "96",
                 "--top", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    pick = data["results"][0]
    check = next(c for c in data["pick_checks"] if c["rule"] == "longctx.cp_sizing")
    assert pick["layout"]["cp"] == 1 and check["with_fix"]["fits"]
    assert check["with_fix"]["tokens_per_s_per_gpu"] < pick["time"]["tokens_per_s_per_gpu"]


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
    code, _, err = run(["check", str(plan), "--overheads", str(heavy)], capsys)
    assert code == 2 and "only --model runs" in err


@pytest.mark.parametrize(("args", "needle"), [
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--fix", "tp=2", "--fix", "tp=4"],
     "--fix tp=4: conflicts with an earlier --fix"),
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
     "seq_length (99999999999999999999) is past the 8,388,608"),
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024", "--fix", "ep=\u00b2"],
     "--fix ep=\u00b2: expected a positive integer"),
    (["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024", "--fix", "routing=force-balance"],
     "set it with --routing"),
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


@pytest.mark.parametrize(("line", "needle"), [
    ('memory_gib = "seventy"', "memory_gib ('seventy') must be a finite number"),
    ('arch = "blackwell"', "arch ('blackwell') differs from H100 SXM5's (hopper)"),
    ("nvlink_domain = 7.5", "nvlink_domain (7.5) must be a whole number"),
    # figures no machine has together
    ("gpus_per_node = 3", "nvlink_domain (8) and gpus_per_node (3) must divide one another"),
    ("nvlink_domain = 7", "nvlink_domain (7) and gpus_per_node (8) must divide one another"),
    ("tdp_w = -5", "tdp_w (-5) must be 0 or more"),
    ("fp8_tflops = -1", "fp8_tflops (-1) must be 0 or more"),
    ("host_memory_gib = -1", "host_memory_gib (-1) must be positive"),
])
def test_a_cluster_file_of_the_wrong_types_is_one_line(line, needle, tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text(f'gpu = "h100"\n{line}\n')
    code, _, err = run(["estimate", "qwen3-30b-a3b", "--gpu", str(path), "--gpus", "16", "--ep", "16"], capsys)
    assert code == 2 and f"{path}: " in err and needle in err


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


def test_the_largest_model_allowed_plans_without_overflow(shared_data, tmp_path, capsys):
    """Just under the parameter bound (8.2e14: 60,000 experts of width 12,000), the planner's batched numpy counts
    still fit in 64 bits: it finds nothing fits (exit 1), with no traceback."""
    data = json.loads((shared_data / "models" / "qwen3-235b-a22b.config.json").read_text())
    path = tmp_path / "edge.json"
    path.write_text(json.dumps({**data, "num_experts": 60_000, "moe_intermediate_size": 12_000}))
    code, out, err = run(["plan", str(path), "--gpu", "h100", "--gpus", "4096", "--gbs", "4096"], capsys)
    assert code == 1 and "nothing fits" in out + err and "Traceback" not in err


def test_a_snapshot_directory_is_read_through_its_config_json(shared_data, tmp_path, capsys):
    snap = tmp_path / "Qwen3-30B-A3B"
    snap.mkdir()
    (snap / "config.json").write_text((shared_data / "models" / "qwen3-30b-a3b.config.json").read_text())
    code, out, _ = run(["estimate", str(snap), "--gpu", "h100", "--gpus", "16", "--ep", "16", "--json"], capsys)
    assert code == 0 and json.loads(out)["model"] == "Qwen3-30B-A3B"
    code, _, err = run(["estimate", str(tmp_path), "--gpu", "h100", "--gpus", "16"], capsys)
    assert code == 2 and "a directory without a config.json" in err


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


def test_megatron_lm_arguments_without_the_distributed_optimizer_count_every_state(capsys):
    """Qwen3-30B-A3B on 16 H100 at EP 16: the same layout fits with the distributed optimizer (73.8 GiB) and not
    without it, Megatron-LM's default when --use-distributed-optimizer is absent."""
    base = ("--expert-model-parallel-size 16 --moe-token-dispatcher-type alltoall --bf16 --seq-length 4096 "
            "--micro-batch-size 1 --global-batch-size 256")
    peaks = {}
    for extra in ("", " --use-distributed-optimizer"):
        code, out, _ = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--mlm-args", base + extra,
                            "--json"], capsys)
        peaks[extra] = json.loads(out)["memory"]
    assert peaks[" --use-distributed-optimizer"]["fits"] and not peaks[""]["fits"]


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


def test_emit_names_the_check_of_the_launch_as_it_runs(tmp_path):
    """emit --out ends with the check of env.sh beside the arguments (HybridEP's topology lives in env.sh): the job's
    GPU and count where the config names them, none where it does not, paths quoted for a shell."""
    import shlex

    from moetune.cli.emit_cmd import check_command

    out = tmp_path / "my run"
    line = check_command({"cluster.gpu": "b300", "cluster.num_gpus": 16}, out)
    assert shlex.split(line) == ["moetune", "check", str(out / "env.sh"), str(out / "megatron_lm_args.txt"),
                                 "--gpu", "b300", "--gpus", "16"]
    assert "--gpu" not in check_command({}, out) and "None" not in check_command({}, out)


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


def test_check_words_layout_errors_in_config_names(tmp_path, capsys):
    """A layout error found by check names the config's fields, not estimate's flags."""
    path = tmp_path / "o.txt"
    path.write_text("model.pipeline_model_parallel_size=4\nmodel.virtual_pipeline_model_parallel_size=2\n"
                    "model.expert_model_parallel_size=8\n")
    code, out, _ = run(["check", str(path), "--model", "gpt-oss-120b", "--gpu", "h100", "--gpus", "64", "--json"],
                       capsys)
    message = next(f["message"] for f in json.loads(out)["findings"] if f["rule"] == "layout.illegal")
    assert "model.virtual_pipeline_model_parallel_size" in message and "--vpp" not in message and "--" not in message


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


def test_plan_names_the_pick_s_own_warnings_and_tight_margins(capsys):
    """A pinned TP past the NVLink domain is searched as asked, and the pick's rule warning says what it costs;
    each result says whether it fits within the memory estimate's own error."""
    code, out, _ = run(["plan", "deepseek-v2-lite", "--gpu", "h100", "--gpus", "32", "--gbs", "256", "--fix", "tp=16",
                        "--top", "2", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and "scale.tp_outside_nvlink" in {c["rule"] for c in data["pick_checks"]}
    assert all(isinstance(r["tight"], bool) for r in data["results"])
    code, out, _ = run(["plan", "deepseek-v2-lite", "--gpu", "h100", "--gpus", "32", "--gbs", "256", "--fix", "tp=16",
                        "--top", "1"], capsys)
    assert "Check on #1 warning scale.tp_outside_nvlink" in " ".join(out.split())


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


def test_a_cluster_file_with_a_misspelt_architecture_is_refused(tmp_path, capsys):
    """arch = "Hopper" had run as an unknown GPU on the priors (BF16, alltoall, no graphs: 3,427 tokens/s/GPU against
    9,172), with no word."""
    table = tmp_path / "c.toml"
    table.write_text(LAB_GPU.replace('arch = "hopper"', 'arch = "Hopper"'))
    code, _, err = run(["estimate", "qwen3-30b-a3b", "--gpu", str(table), "--gpus", "16", "--ep", "4"], capsys)
    assert code == 2 and "arch ('Hopper') must be one of ampere, hopper, blackwell" in err


def test_an_unreadable_file_is_one_line(tmp_path, capsys, monkeypatch):
    """The system refusing a read (permissions) is the path and the reason, not a traceback."""
    from pathlib import Path
    def refuse(self, *a, **k):
        raise PermissionError(13, "Permission denied", str(self))
    monkeypatch.setattr(Path, "read_text", refuse)
    code, _, err = run(["estimate", "qwen3-30b-a3b", "--gpu", str(tmp_path / "c.toml"), "--gpus", "16"], capsys)
    assert code == 2 and "Permission denied" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("args", "needle"), [
    # Megatron-LM trains in FP32 without --bf16, which moetune has no rates for (it had estimated BF16)
    (["--mlm-args", "--expert-model-parallel-size 8"], "train in FP32"),
    (["--mlm-args", "--expert-model-parallel-size 8 --bf16 --fp16"], "trains in FP16"),
    (["--set", "model.recompute_granularity=selective", "--set", "model.recompute_modules=[bogus]"],
     "model.recompute_modules: unknown recompute module(s) ['bogus']"),
    (["--mlm-args", "--bf16 --recompute-granularity selective --recompute-modules gdp_qkv"],
     "does not model recompute module(s) ['gdp_qkv']"),
    (["--dispatcher", "deepep", "--ep", "1"], "Megatron-Core asserts ETP x EP > 1"),
    (["--set", "model.pipeline_model_parallel_size=2", "--set", "model.pipeline_model_parallel_layout=|",
      "--set", "mixed_precision.bf16=true"], "model.pipeline_model_parallel_layout places 0 decoder layers"),
])
def test_configs_moetune_cannot_price_are_one_line(args, needle, capsys):
    code, _, err = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", *args], capsys)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("pin", ["dispatcher=deepep", "dispatcher=hybridep", "ep_overlap=true"])
def test_pins_that_need_ep_beside_ep_1_name_the_pair(pin, capsys):
    code, _, err = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "256", "--fix", pin,
                        "--fix", "ep=1"], capsys)
    assert code == 2 and f"--fix {pin} needs EP > 1" in err and "nothing fits" not in err


def test_the_mtp_depth_is_a_flag(tmp_path, capsys):
    """Published DeepSeek-V3 runs "w/o MTP" (R132-R144, layout Et|(tt|)*30L) are estimated with --mtp-layers 0, and
    a plan made with it stays without MTP through its saved JSON; a depth the model cannot shape is one line."""
    args = ["estimate", "deepseek-v3", "--gpu", "gb200", "--gpus", "256", "--pp", "4", "--ep", "64",
            "--pipeline-layout", "Et|(tt|)*30L", "--json"]
    code, _, err = run(args, capsys)
    assert code == 2 and "--mtp-layers N" in err
    code, out, _ = run([*args, "--mtp-layers", "0"], capsys)
    assert code == 0 and json.loads(out)["pipeline"]["mtp_num_layers"] == 0
    code, out, _ = run(["plan", "deepseek-v3", "--gpu", "gb200", "--gpus", "256", "--gbs", "4096", "--mtp-layers", "0",
                        "--top", "1", "--json"], capsys)
    assert code == 0 and json.loads(out)["results"][0]["pipeline"]["mtp_num_layers"] == 0
    code, _, err = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--mtp-layers",
                        "1"], capsys)
    assert code == 2 and "no MTP layer" in err


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


def test_an_overheads_number_past_a_float_is_one_line(tmp_path, capsys):
    path = tmp_path / "o.toml"
    path.write_text("nccl_gib = 1" + "0" * 400 + "\n")
    code, _, err = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--overheads",
                        str(path)], capsys)
    assert code == 2 and "nccl_gib" in err and "must be a number" in err


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("adam_moments_bytes", 3, "must be 4 (FP32 Adam moments) or 2"),
    ("main_grads_fp32", "yes", "takes true or false"),
    ("routing", "random", "choose dropless or force-balance"),
])
def test_a_hand_edited_saved_knob_is_refused_by_name(field, value, needle, tmp_path, capsys):
    assert main(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    data["knobs"][field] = value
    path = tmp_path / "e.json"
    path.write_text(json.dumps(data))
    code, _, err = run(["emit", str(path)], capsys)
    assert code == 2 and needle in err and "Traceback" not in err


def test_estimate_defaults_to_bf16_on_a_gpu_without_fp8(tmp_path, capsys):
    """A cluster file with fp8_tflops = 0: the platform's FP8 recipe cannot run, so estimate defaults to BF16 (as
    plan searches there) and says it defaulted, where it had refused with "use --precision bf16"."""
    gpu = tmp_path / "nofp8.toml"
    gpu.write_text('gpu = "h100"\nfp8_tflops = 0\n')
    args = ["estimate", "qwen3-30b-a3b", "--gpu", str(gpu), "--gpus", "16", "--ep", "16"]
    code, out, _ = run([*args, "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["knobs"]["precision"] == "bf16" and "precision" in data["defaulted"]
    code, out, _ = run(args, capsys)
    assert "precision=bf16 (the GPU has no fp8-blockwise Tensor Core rate)" in out
    code, _, err = run([*args, "--precision", "fp8-current"], capsys)
    assert code == 2 and "has no fp8-current Tensor Core rate" in err


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


def test_plan_says_when_its_tflops_count_attention_that_never_runs(capsys):
    """Llama 4 Scout at 64k on 96 GB200 (the stop's odd-layout check): the pick read 2,361 TFLOP/s/GPU with no word
    that Megatron's count includes the chunked attention the step never runs; estimate said so, plan now does too."""
    code, out, _ = run(["plan", "llama4-scout", "--gpu", "gb200", "--gpus", "96", "--seq", "65536", "--gbs", "96",
                        "--top", "1"], capsys)
    assert code == 0 and "attends within 8,192-token chunks" in " ".join(out.split())


def test_plan_rows_carry_what_estimate_json_has_and_each_is_re_split(capsys):
    """The plan audit: results lacked estimate's checks and track record, and a runner-up kept its even split (5,401
    tokens/s/GPU where `--fix recompute=selective` of the same layout and knobs gives 5,514)."""
    job = ["nemotron3-nano-30b-a3b", "--gpu", "h100", "--gpus", "8", "--seq", "4096", "--gbs", "16"]
    code, out, _ = run(["plan", *job, "--top", "5", "--json"], capsys)
    rows = json.loads(out)["results"]
    code, est, _ = run(["estimate", *job[:-2], "--ep", "8", "--json"], capsys)
    assert set(json.loads(est)) - {"defaulted"} <= set(rows[1])
    for row in rows[1:]:
        if row["layout"]["pp"] > 1 and row["knobs"]["recompute"] == "selective":
            pins = ["--fix", "recompute=selective", "--fix", f"tp={row['layout']['tp']}",
                    "--fix", f"cp={row['layout']['cp']}", "--fix", f"pp={row['layout']['pp']}",
                    "--fix", f"ep={row['layout']['ep']}", "--fix", f"mbs={row['workload']['micro_batch_size']}"]
            code, pinned, _ = run(["plan", *job, "--top", "1", "--json", *pins], capsys)
            best = json.loads(pinned)["results"][0]["time"]["tokens_per_s_per_gpu"]
            assert row["time"]["tokens_per_s_per_gpu"] >= best * 0.995


def test_plan_names_a_faster_cp_layout_its_short_context_weight_ranked_off(capsys):
    """Qwen3-30B-A3B on 16 H100 at 12k: TP1 CP2 predicts +2% over the pick, but below 16k CP ranks as 5% slower; the
    note had been printed only where a CP row was already on the list (plan audit)."""
    code, out, _ = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq", "12288", "--gbs", "48",
                        "--top", "3", "--json"], capsys)
    data = json.loads(out)
    alt = data["short_cp_alternative"]
    assert alt["layout"]["cp"] > 1 and alt["predicted_gain"] > 0.01
    assert all(r["layout"]["cp"] == 1 for r in data["results"])
    code, out, _ = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq", "12288", "--gbs", "48",
                        "--top", "3"], capsys)
    assert f"--fix cp={alt['layout']['cp']}` lists it" in " ".join(out.split())


def test_config_words_name_the_field_with_its_article():
    """A layout error worded for flags reads in the config's names for check and estimate --config: 'choose an --ep'
    had read 'choose an model.expert_model_parallel_size'; a flag the table does not know stays as written."""
    from moetune.cli.options import config_words

    assert config_words("choose an --ep that divides it; change --pp/--vpp, or an --unknown") == (
        "choose a model.expert_model_parallel_size that divides it; change model.pipeline_model_parallel_size/"
        "model.virtual_pipeline_model_parallel_size, or an --unknown")
    # a flag offered beside the key it sets names the key once; another key beside it stays
    assert config_words("(--hcp-a2a-size, or model.hierarchical_context_parallel_sizes [a2a, p2p])") == (
        "(model.hierarchical_context_parallel_sizes [a2a, p2p])")
    assert config_words("set --seq or model.seq_length_extra") == "set model.seq_length or model.seq_length_extra"


def test_a_precision_flag_reads_as_the_config_fields_that_set_it(capsys):
    """The GEMM-shape refusal ends 'or --precision bf16'; check --model (and estimate --config) word it for a config,
    and had left the flag as it was, which a config has no place for."""
    from moetune.cli.options import config_words

    assert config_words("use --seq 4112, or --precision bf16") == (
        "use model.seq_length 4112, or BF16 (mixed_precision.fp8=null mixed_precision.fp4=null)")
    assert config_words("needs --precision mxfp8") == "needs mixed_precision.fp8=e4m3 mixed_precision.fp8_recipe=mxfp8"
    assert config_words("--precision fp9") == "--precision fp9"  # not a recipe: left as written
    sets = ["model.num_layers=48", "model.num_moe_experts=128", "model.expert_model_parallel_size=8",
            "model.seq_length=4100", "train.micro_batch_size=1", "mixed_precision.fp8=e4m3",
            "mixed_precision.fp8_recipe=blockwise"]
    code, out, _ = run(["check", *[a for s in sets for a in ("--set", s)], "--gpu", "h100", "--gpus", "16",
                        "--model", "qwen3-30b-a3b", "--json"], capsys)
    [message] = [f["message"] for f in json.loads(out)["findings"] if f["rule"] == "layout.illegal"]
    assert "multiple of 8, got 4100" in message and "--" not in message and "mixed_precision.fp8=null" in message


def test_the_hcp_refusal_names_its_config_key_once(tmp_path, capsys):
    """The a2a group refusal offers '--hcp-a2a-size, or model.hierarchical_context_parallel_sizes [a2a, p2p]'; worded
    for a config (check --model, estimate --config) the flag became that key too, and the line named it twice."""
    config = tmp_path / "hcp.yaml"
    config.write_text("model:\n  tensor_model_parallel_size: 2\n  context_parallel_size: 8\n  cp_comm_type: a2a+p2p\n"
                      "  hierarchical_context_parallel_sizes: [4, 2]\n  seq_length: 8192\n")
    code, _, err = run(["estimate", "qwen3-30b-a3b", "--config", str(config), "--gpu", "h100", "--gpus", "16"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "the a2a group (4) must split" in err
    assert err.count("model.hierarchical_context_parallel_sizes") == 1
    assert err.rstrip().endswith("pick another a2a size (model.hierarchical_context_parallel_sizes [a2a, p2p])")
    code, out, _ = run(["check", str(config), "--model", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--json"],
                       capsys)
    [message] = [f["message"] for f in json.loads(out)["findings"] if f["rule"] == "layout.illegal"]
    assert message.count("model.hierarchical_context_parallel_sizes") == 1 and "--hcp-a2a-size" not in message


def test_estimate_takes_the_fp8_parameter_switch_and_says_when_it_defaulted(capsys):
    """--fp8-param-gather / --no-fp8-param-gather set mixed_precision.fp8_param_gather; left out it is the recipe
    preset's (on for MXFP8), reported as defaulted; BF16 weights beside the FP8 copy take more memory."""
    base = ["estimate", "qwen3-30b-a3b", "--gpu", "gb200", "--gpus", "16", "--ep", "8", "--precision", "mxfp8",
            "--json"]
    peaks = {}
    for flag in ("", "--fp8-param-gather", "--no-fp8-param-gather"):
        code, out, _ = run(base + ([flag] if flag else []), capsys)
        data = json.loads(out)
        assert code == 0 and data["knobs"]["fp8_param_gather"] == (flag != "--no-fp8-param-gather")
        assert ("fp8_param_gather" in data["defaulted"]) == (flag == "")
        peaks[flag] = data["memory"]["peak_bytes"]
    assert peaks[""] == peaks["--fp8-param-gather"] < peaks["--no-fp8-param-gather"]
    code, _, err = run(base[:-1] + ["--optimizer-offload", "0.5", "--fp8-param-gather"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "delayed FP8 recipe" in err


def test_estimate_takes_the_nvfp4_parameter_switch(capsys):
    """--fp4-param-gather / --no-fp4-param-gather set mixed_precision.fp4_param_gather; left out it is the NVFP4
    preset's (on), reported as defaulted; BF16 weights beside the NVFP4 copy take more memory; outside NVFP4 the
    switch is refused in one line."""
    base = ["estimate", "qwen3-30b-a3b", "--gpu", "b200", "--gpus", "64", "--ep", "8", "--json"]
    peaks = {}
    for flag in ("", "--no-fp4-param-gather"):
        code, out, _ = run(base + ["--precision", "nvfp4"] + ([flag] if flag else []), capsys)
        data = json.loads(out)
        assert code == 0 and data["knobs"]["fp4_param_gather"] == (flag == "")
        assert ("fp4_param_gather" in data["defaulted"]) == (flag == "")
        peaks[flag] = data["memory"]["peak_bytes"]
    assert peaks[""] < peaks["--no-fp4-param-gather"]
    code, _, err = run(base[:-1] + ["--precision", "mxfp8", "--fp4-param-gather"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "nvfp4" in err
