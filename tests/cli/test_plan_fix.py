"""plan --fix: pins kept as written, and pins that cannot run together refused in one line naming the pin."""

import json

import pytest
from cli_run import run


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


@pytest.mark.parametrize("pin", ["dispatcher=deepep", "dispatcher=hybridep", "ep_overlap=true"])
def test_pins_that_need_ep_beside_ep_1_name_the_pair(pin, capsys):
    code, _, err = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "256", "--fix", pin,
                        "--fix", "ep=1"], capsys)
    assert code == 2 and f"--fix {pin} needs EP > 1" in err and "nothing fits" not in err


def test_a_pinned_megatron_fsdp_strategy_runs_on_every_row_and_is_said_once(capsys):
    base = ["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq", "4096", "--gbs", "256", "--top", "3",
            "--fix", "megatron_fsdp=optim_grads"]
    code, out, err = run(base + ["--json"], capsys)
    results = json.loads(out)["results"]
    assert code == 0 and results and all(r["knobs"]["megatron_fsdp"] == "optim_grads" for r in results), err
    code, out, _ = run(base, capsys)
    assert code == 0 and out.count("Megatron FSDP optim_grads") == 1
    assert ("Data-parallel sharding (every row): Megatron FSDP optim_grads: shards the gradients and optimizer state "
            "over DP x CP (experts over EDP)") in out


def test_estimate_and_plan_say_megatron_fsdp_shards_within_each_copy_under_hybrid_sharding(capsys):
    """With N distributed optimizer instances Megatron FSDP shards within each copy's DP x CP / N ranks, outer optim
    the optimizer state over all of them, as explain says (planner/explain_scale.py fsdp_shards); estimate's layout
    line and plan's every-row line had said DP x CP (experts: EDP) whatever N."""
    from moetune.cli.output import fsdp_text
    from moetune.layout.knobs import Knobs
    from moetune.layout.layout import Layout

    knobs = Knobs(megatron_fsdp="optim_grads_params", num_distributed_optimizer_instances=4,
                  outer_dp_sharding_strategy="optim")
    assert fsdp_text(knobs) == ["Megatron FSDP optim_grads_params: shards the weights, gradients and optimizer state "
                                "within each of its 4 copies, over DP x CP / 4 (experts over EDP / 4), and outer optim "
                                "the optimizer state over all DP x CP (experts over EDP)"]
    assert "over DP x CP / 4 = 16 (experts over EDP / 4 = 2), and outer optim the optimizer state over all DP x CP " \
        "64 (EDP 8)" in fsdp_text(knobs, Layout(world_size=64, ep=8))[0]
    code, out, err = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64", "--set",
                          "model.expert_model_parallel_size=8", "--set", "ddp.use_megatron_fsdp=true", "--set",
                          "ddp.data_parallel_sharding_strategy=optim_grads", "--set",
                          "ddp.num_distributed_optimizer_instances=2"], capsys)
    assert ("Megatron FSDP optim_grads: shards the gradients and optimizer state within each of its 2 copies, over "
            "DP x CP / 2 = 32 (experts over EDP / 2 = 4)") in out, err


def test_an_unknown_megatron_fsdp_strategy_is_one_line(capsys):
    code, _, err = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "256", "--fix",
                        "megatron_fsdp=full"], capsys)
    assert code == 2 and err.strip() == ("error: --fix megatron_fsdp=full: expected a data_parallel_sharding_strategy, "
                                         "one of no_shard, optim, optim_grads, optim_grads_params")


@pytest.mark.parametrize(("pin", "extra", "words"), [
    # a full-iteration graph makes a dropless MoE drop tokens past its per-rank budget: not the run priced
    ("cuda_graph_scope=full_iteration", [], "under --routing dropless: a full-iteration graph captures MoE layers"),
    # one graph of the whole step has no per-layer scope beside it (Megatron-LM arguments.py); it had been emitted
    ("cuda_graph_scope=attn,full_iteration", ["--routing", "force-balance"],
     "--fix cuda_graph_scope=attn,full_iteration: full_iteration captures the whole step and stands alone"),
])
def test_a_full_iteration_pin_that_cannot_run_as_priced_is_one_line(pin, extra, words, capsys):
    code, _, err = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024", "--fix", pin,
                        *extra], capsys)
    assert code == 2 and words in " ".join(err.split())
    code, out, err = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "1024", "--top", "1",
                          "--fix", "cuda_graph_scope=full_iteration", "--routing", "force-balance", "--json"], capsys)
    assert code == 0, err
