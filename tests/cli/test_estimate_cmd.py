"""estimate as a user runs it: its JSON contract and table, the knobs it defaults and says so, and the
configurations it prices with the refusal beside them or refuses in one line."""

import json

import pytest
from cli_run import run


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
    code, _, err = run(["estimate", "nemotron3-nano-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16",
                        "--mtp-layers", "1"], capsys)
    assert code == 2 and "builds no MTP block" in err and len(err.strip().splitlines()) == 1


def test_mtp_layers_on_a_checkpoint_without_them_train_from_scratch(capsys):
    """A model whose checkpoint ships no MTP module trains --mtp-layers N from scratch, each layer built as the
    decoder's last (Megatron-LM gpt_builders.py), where moetune had refused it: slower than without, and no
    mtp_beyond_checkpoint warning (nothing to fine-tune past)."""
    args = ["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--json"]
    runs = {n: json.loads(run([*args, "--mtp-layers", str(n)], capsys)[1]) for n in (0, 1)}
    assert runs[1]["pipeline"]["mtp_num_layers"] == 1 and runs[0]["pipeline"]["mtp_num_layers"] == 0
    assert runs[1]["time"]["step_seconds"] > runs[0]["time"]["step_seconds"]
    assert not [c for c in runs[1]["checks"] if c["rule"] == "model.mtp_beyond_checkpoint"]


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


@pytest.mark.parametrize(("model", "layout", "depth", "warned"), [
    ("glm-4.5-air", ["--gpus", "64", "--ep", "8", "--pp", "2"], 1, False),  # the checkpoint's one MTP module
    ("glm-4.5-air", ["--gpus", "64", "--ep", "8", "--pp", "2"], 3, True),
    ("qwen3-next-80b-a3b", ["--gpus", "16", "--ep", "16"], 1, False),  # one module its config.json does not name
    ("qwen3-next-80b-a3b", ["--gpus", "16", "--ep", "16"], 2, True),
    # num_mtp_modules 3, which Bridge does not map: any MTP trains from scratch, as on a checkpoint that ships none
    ("minimax-m2", ["--gpus", "64", "--ep", "8", "--pp", "2"], 3, False),
])
def test_mtp_layers_past_the_checkpoint_warn(model, layout, depth, warned, capsys):
    """Megatron-Core builds every MTP layer --mtp-layers asks for, and those past the checkpoint's modules start from
    random initialisation (Bridge maps only the checkpoint's): a warning among the checks, text and JSON, not a
    refusal (a deeper MTP is a legitimate run)."""
    args = ["estimate", model, "--gpu", "h100", *layout, "--mtp-layers", str(depth)]
    code, out, _ = run([*args, "--json"], capsys)
    found = [c for c in json.loads(out)["checks"] if c["rule"] == "model.mtp_beyond_checkpoint"]
    assert code == 0 and bool(found) == warned
    if warned:
        assert found[0]["severity"] == "warning" and f"mtp_num_layers={depth}" in found[0]["message"]
        assert "random initialisation" in found[0]["message"]
        code, out, _ = run(args, capsys)
        assert code == 0 and "warning model.mtp_beyond_checkpoint" in out


@pytest.mark.parametrize(("gpu", "precision", "said"), [
    ("h100", "fp8-blockwise", "fp8_param_gather=False"),  # the blockwise preset keeps BF16 weights
    ("gb200", "mxfp8", "fp8_param_gather=True"),
    ("b200", "nvfp4", "fp4_param_gather=True"),
])
def test_estimate_says_the_parameter_switch_value_it_defaulted_to(gpu, precision, said, capsys):
    """The 'defaulted to platform values' line gives the preset's value the estimate ran (it had printed the unset
    knob, 'fp8_param_gather=None'), and under NVFP4 no FP8 switch, which that recipe does not take."""
    code, out, _ = run(["estimate", "olmoe-1b-7b", "--gpu", gpu, "--gpus", "8", "--precision", precision], capsys)
    line = next(x for x in out.splitlines() if x.startswith("defaulted to platform values"))
    assert code == 0 and said in line and "=None" not in line
    assert ("fp8_param_gather" in line) == (precision != "nvfp4")


def test_the_megatron_fsdp_flag_prices_what_its_config_does(capsys):
    """--megatron-fsdp S is the flag for a config's ddp.use_megatron_fsdp with data_parallel_sharding_strategy S: the
    same memory and time either way; it had no flag, so estimate's flags could not ask for it."""
    base = ["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--json"]
    # the config's other settings as flags: Megatron's BF16, alltoall, no graphs, BF16 router, overlaps off
    same = ["--precision", "bf16", "--dispatcher", "alltoall", "--cuda-graph-scope", "none", "--moe-router-dtype",
            "none", "--no-overlap-grad-reduce", "--no-overlap-param-gather"]
    code, flags, err = run(base + same + ["--ep", "8", "--megatron-fsdp", "optim_grads_params"], capsys)
    assert code == 0, err
    code, config, err = run(base + ["--set", "model.expert_model_parallel_size=8",
                                    "--set", "ddp.use_megatron_fsdp=true",
                                    "--set", "ddp.data_parallel_sharding_strategy=optim_grads_params",
                                    "--set", "checkpoint.ckpt_format=fsdp_dtensor"], capsys)
    assert code == 0, err
    a, b = json.loads(flags), json.loads(config)
    assert a["knobs"]["megatron_fsdp"] == b["knobs"]["megatron_fsdp"] == "optim_grads_params"
    assert a["memory"]["peak_bytes"] == b["memory"]["peak_bytes"]
    assert a["time"]["step_seconds"] == pytest.approx(b["time"]["step_seconds"], rel=1e-9)
    code, plain, _ = run(base + same + ["--ep", "8"], capsys)
    assert json.loads(plain)["memory"]["peak_bytes"] > a["memory"]["peak_bytes"] + 10 * 2**30  # weights, grads sharded


def test_megatron_fsdp_beside_no_distributed_optimizer_is_one_line(capsys):
    code, _, err = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "8", "--megatron-fsdp",
                        "optim", "--no-distributed-optimizer"], capsys)
    assert code == 2 and err.strip() == ("error: --megatron-fsdp runs the distributed optimizer (Megatron-LM and "
                                         "Bridge turn it on under Megatron FSDP): drop --no-distributed-optimizer")


def test_megatron_fsdp_beside_muon_is_one_line(capsys):
    """estimate had priced --megatron-fsdp with --optimizer muon, which Megatron-LM asserts against and plan refuses
    as two pins; a Bridge-launcher estimate's checks said nothing (rule fsdp.muon reads Megatron-LM launches)."""
    code, _, err = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "8", "--megatron-fsdp",
                        "optim_grads_params", "--optimizer", "muon"], capsys)
    assert code == 2 and err.strip() == ("error: --megatron-fsdp with --optimizer muon: Megatron-LM asserts Megatron "
                                         "FSDP runs Adam or SGD only (arguments.py validate_args @core_v0.18.2; rule "
                                         "fsdp.muon); drop one of them")


def test_estimate_and_plan_on_96_gb200_say_the_rack_is_partial(capsys):
    """qwen3-30b-a3b on 96 GB200 at EP32 (audit): two 48-GPU Slurm segments, so EP32 crosses between partly used
    racks; estimate (table and JSON) and plan's pick say so, and at EP16, inside a segment, nothing is added."""
    flags = ["--gpu", "gb200", "--gpus", "96"]
    code, out, _ = run(["estimate", "qwen3-30b-a3b", *flags, "--ep", "32"], capsys)
    assert code == 0 and "note: 96 GPUs in Slurm segments of 12 nodes" in out and "EP32 crosses between racks" in out
    code, out, _ = run(["estimate", "qwen3-30b-a3b", *flags, "--ep", "32", "--json"], capsys)
    assert "48 of its 72 GPUs" in json.loads(out)["partial_domain_note"]
    code, out, _ = run(["estimate", "qwen3-30b-a3b", *flags, "--ep", "16", "--json"], capsys)
    assert code == 0 and "partial_domain_note" not in json.loads(out)
    code, out, _ = run(["plan", "qwen3-30b-a3b", *flags, "--gbs", "384", "--fix", "ep=32"], capsys)
    assert code == 0 and "note on #1: 96 GPUs in Slurm segments of 12 nodes" in out
