"""The planner's pick for published tuned recipes is predicted at least as fast, and the difference is
explained (settings changed, seconds saved per wall)."""

import pytest

from moetune.layout.validate import Workload
from moetune.planner.enumerate import splits_for
from moetune.planner.estimate import estimate
from moetune.planner.runs import load_configured_runs
from moetune.planner.search import plan
from moetune.planner.versus import versus

# Every published run whose configuration is complete, the TFLOP/s-only ones included (194 recipes).
RUNS = {r.run_id: r for r in load_configured_runs()}
RECIPES = sorted(RUNS)


@pytest.mark.parametrize("run_id", RECIPES)
def test_pick_is_at_least_as_fast_as_the_published_recipe(run_id):
    run = RUNS[run_id]
    recipe = estimate(run.model, run.gpu, run.layout, run.workload, run.knobs)
    result = plan(run.model, run.gpu, run.layout.world_size,
                  Workload(seq_length=run.workload.seq_length, global_batch_size=run.workload.gbs(run.layout)),
                  routing=run.knobs.routing, top=1, fixed={"main_grads_fp32": run.knobs.main_grads_fp32})
    pick = result.results[0]
    assert pick.fits
    assert pick.time["tokens_per_s_per_gpu"] >= recipe.time["tokens_per_s_per_gpu"] * 0.999
    v = versus(pick, recipe)
    assert v["speedup"] == pytest.approx(pick.time["tokens_per_s_per_gpu"] / recipe.time["tokens_per_s_per_gpu"])
    saved = sum(w["saved"] for w in v["walls"].values())
    assert saved == pytest.approx(recipe.time["step_seconds"] - pick.time["step_seconds"], rel=1e-9, abs=1e-12)
    if v["speedup"] > 1.001:
        assert v["changes"], "a faster pick must differ in some setting"
    # the groups of changed settings, applied in turn, end at the pick: their effects multiply to the speedup
    effects = v["effects"]
    assert sorted(k for e in effects for k in e["settings"]) == sorted(v["changes"])
    if effects and effects[-1]["in_turn"] is not None:
        product = 1.0
        for e in effects:
            product *= 1 + (e["in_turn"] or 0.0)
        assert product == pytest.approx(v["speedup"], rel=1e-6)


def test_the_search_holds_the_gb300_card_layout():
    """R094's hand-written "Et*4|(t*4|)*14tmL" (PP2 x VPP8, delay_wgrad with EP overlap) is a candidate: the pick
    on its cluster is predicted at least as fast because the search holds that exact configuration (delay_wgrad pinned:
    unpinned, a result keeps it only where it saves 0.1% of the step, ranking.DELAY_WGRAD_MIN_GAIN)."""
    run = RUNS["R094"]
    result = plan(run.model, run.gpu, 256, Workload(seq_length=4096, global_batch_size=4096), routing="force-balance",
                  top=1, fixed={"tp": 1, "cp": 1, "pp": 2, "vpp": 8, "ep": 32, "etp": 1, "mbs": 1,
                                "precision": ["mxfp8"],
                                "dispatcher": ["hybridep"], "cuda_graph_scope": [("full_iteration",)],
                                "recompute": "none", "ep_overlap": [True], "delay_wgrad": True,
                                "main_grads_fp32": False, "optimizer_offload_fraction": [0.0]})
    pick = result.results[0]
    assert pick.knobs.delay_wgrad
    assert pick.stages == estimate(run.model, run.gpu, run.layout, run.workload, run.knobs).stages


def test_the_search_holds_the_kimi_k2_recipe_layout():
    """Kimi-K2's 61 layers split over PP4 x VPP4 only by a layout string (uneven ends must be multiples of VPP): the
    search writes the one Bridge's recipe uses (R185, "Et*4|(t*4|)*14tL") and so holds that exact configuration (a
    re-split would change it only where that pays, planner/pipeline_balance.py). It once offered PP4 with VPP 1 only,
    so EP overlap (which needs VPP with PP) never ran on PP4 and the GB200 pick was the slower layout without it."""
    run = RUNS["R185"]
    result = plan(run.model, run.gpu, 256, Workload(seq_length=4096, global_batch_size=4096), routing="force-balance",
                  top=1, fixed={"tp": 1, "cp": 1, "pp": 4, "vpp": 4, "ep": 64, "etp": 1,
                                "mbs": run.workload.micro_batch_size, "fp8_output_proj": False,
                                "overlap_param_gather": False,
                                "precision": ["mxfp8"], "dispatcher": ["hybridep"], "cuda_graph_scope": [()],
                                "recompute_modules": frozenset({"mla_up_proj"}),
                                "ep_overlap": [False], "main_grads_fp32": run.knobs.main_grads_fp32,
                                "optimizer_offload_fraction": [0.0]})
    assert splits_for(run.model, 4, 4) == [{"pipeline_layout": run.layout.pipeline_layout}]
    pick, recipe = result.results[0], estimate(run.model, run.gpu, run.layout, run.workload, run.knobs)
    assert pick.time["step_seconds"] <= recipe.time["step_seconds"]
    # its three 16-layer ranks pace it alike: relieving them one at a time never lowers the step, so the string stays
    assert pick.layout.pipeline_layout == run.layout.pipeline_layout
    overlapped = plan(run.model, run.gpu, 256, Workload(seq_length=4096, global_batch_size=4096),
                      routing="force-balance", top=1, fixed={"pp": 4, "ep_overlap": [True]})
    assert overlapped.results[0].layout.vpp > 1


def test_a_slower_pick_names_the_wall_that_lost_most():
    """Read the other way (the recipe as the pick, the planner's pick as the baseline), the comparison is a loss and
    names the wall whose seconds grew most, not the one that grew least."""
    run = RUNS["R221"]
    recipe = estimate(run.model, run.gpu, run.layout, run.workload, run.knobs)
    pick = plan(run.model, run.gpu, run.layout.world_size,
                Workload(seq_length=run.workload.seq_length, global_batch_size=run.workload.gbs(run.layout)),
                routing=run.knobs.routing, top=1).results[0]
    v = versus(recipe, pick)
    lost = min(v["walls"], key=lambda w: v["walls"][w]["saved"])
    assert v["speedup"] < 1 and f"most of the loss in the {lost} wall" in v["why"]


def test_a_baseline_that_is_the_pick_places_no_gain(capsys):
    """A plan's own pick given as its baseline (plan --baseline of its plan --json) had read 'most of the gain in the
    compute wall (3.93 s -> 3.93 s per step)' over an empty table of settings."""
    from moetune.cli.versus_output import print_versus
    run = RUNS["R221"]
    recipe = estimate(run.model, run.gpu, run.layout, run.workload, run.knobs)
    v = versus(recipe, recipe)
    assert v["changes"] == {} and v["why"].startswith("the pick is the baseline's configuration, no setting changed")
    assert "most of the" not in v["why"]
    print_versus(v)
    out = capsys.readouterr().out
    assert "Settings the pick changes" not in out and "Seconds per step by wall" in out


def test_a_different_mtp_depth_is_a_setting_the_pick_changes():
    """explain --baseline of a run trained without MTP against one with it: the depth is listed with the rest."""
    from moetune.layout.layout import Layout
    from moetune.layout.validate import Workload
    from moetune.specs.hardware import load_gpu
    from moetune.specs.registry import load_model
    spec, gpu = load_model("deepseek-v3"), load_gpu("h100")
    wl = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=512)
    with_mtp = estimate(spec, gpu, Layout(world_size=256, pp=4, ep=32, pipeline_layout="Et*15|t*15|t*15|t*16mL"), wl)
    without = estimate(spec.with_mtp(0), gpu, Layout(world_size=256, pp=4, ep=32,
                                                     pipeline_layout="Et*15|t*15|t*15|t*16L"), wl)
    assert versus(without, with_mtp)["changes"]["model.mtp_num_layers"] == [1, None]


def test_a_published_baseline_is_compared_with_its_measurement():
    """The recipe audit: against R097 (Moonlight-16B-A3B, measured 22,528 tokens/s/GPU, predicted -33%, a listed gap)
    the pick read '1.40x the baseline' while its own prediction is below the measurement; the comparison now names the
    measurement and says so."""
    run = RUNS["R097"]
    recipe = estimate(run.model, run.gpu, run.layout, run.workload, run.knobs)
    pick = plan(run.model, run.gpu, 16, Workload(seq_length=4096, global_batch_size=1024), routing=run.knobs.routing,
                top=1).results[0]
    v = versus(pick, recipe)
    assert [t["run_id"] for t in v["baseline_measured"]] == ["R097"] and v["baseline_measured"][0]["listed_gap"]
    ratio = pick.time["tokens_per_s_per_gpu"] / run.tokens_per_s_per_gpu
    assert f"is {ratio:.2f}x the fastest measurement" in v["measured_note"]
    assert ("below what the recipe measured" in v["measured_note"]) == (ratio < 1)
    assert versus(pick, pick.variant(knobs=pick.knobs))["measured_note"] is None  # no published run is the pick


def test_a_baseline_megatron_refuses_says_so():
    """R167 (Mixtral-8x7B on 64 GB200) reads as dropless with MoE-scoped graphs, which rule cudagraph.moe_scope_dropless
    refuses: the comparison names it instead of staying silent (recipe audit)."""
    run = RUNS["R167"]
    recipe = estimate(run.model, run.gpu, run.layout, run.workload, run.knobs)
    v = versus(recipe, recipe)
    assert "cudagraph.moe_scope_dropless" in v["baseline_rule_errors"]
    assert v["effects"] == [] and v["speedup"] == 1


def test_a_setting_megatron_refuses_alone_is_priced_and_named():
    """The B300 audit: applied alone to R261's PP8 layout without VPP, EP overlap was shown as +5.8% with nothing said,
    where estimate of that configuration raises ep_overlap.pp_needs_vpp; the effect now names the rule."""
    from dataclasses import replace

    from moetune.planner.rule_findings import rule_errors
    from moetune.planner.versus import config_changes, setting_effects

    run = RUNS["R261"]
    baseline = estimate(run.model, run.gpu, run.layout, run.workload, run.knobs)
    pick = baseline.variant(knobs=replace(baseline.knobs, ep_overlap=True, delay_wgrad=True))
    assert "ep_overlap.pp_needs_vpp" in rule_errors(pick) and "ep_overlap.pp_needs_vpp" not in rule_errors(baseline)
    effects = setting_effects(pick, baseline, config_changes(pick, baseline))
    overlap = next(e for e in effects if "comm_overlap.overlap_moe_expert_parallel_comm" in e["settings"])
    assert overlap["alone"] is not None and "ep_overlap.pp_needs_vpp" in overlap["alone_refused"]


def test_an_error_one_group_brings_is_blamed_on_that_group_alone_in_turn():
    """A pick at PP 2 without VPP beside a baseline with EP overlap at PP 1: the layout group brings
    ep_overlap.pp_needs_vpp, and the groups applied after it (micro-batch, precision) inherit it, not cause it."""
    from dataclasses import replace

    from moetune.layout.layout import Layout
    from moetune.layout.validate import Workload
    from moetune.planner.versus import config_changes, setting_effects
    from moetune.specs.hardware import load_gpu
    from moetune.specs.registry import load_model

    model, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    base = estimate(model, gpu, Layout(world_size=16, ep=8), Workload(seq_length=4096, global_batch_size=256,
                                                                       micro_batch_size=2))
    baseline = base.variant(knobs=replace(base.knobs, ep_overlap=True, precision="bf16"))
    pick = estimate(model, gpu, Layout(world_size=16, pp=2, ep=8),
                    Workload(seq_length=4096, global_batch_size=256, micro_batch_size=1),
                    replace(baseline.knobs, precision="fp8-blockwise"))
    effects = setting_effects(pick, baseline, config_changes(pick, baseline))
    blamed = [e["group"] for e in effects if "ep_overlap.pp_needs_vpp" in (e["in_turn_refused"] or "")]
    assert len(effects) >= 3 and len(blamed) == 1, (blamed, [e["group"] for e in effects])


def test_a_baseline_s_unset_router_dtype_stays_unset_in_the_configs_it_prices():
    """A baseline that leaves moe_router_dtype unset (None: the activations' BF16) on a model whose Bridge model bridge
    sets FP32 (OLMoE, model_fields.py FP32_ROUTER_BRIDGES): the configs setting_effects prices had dropped its None and
    so read the router back as FP32. Given biased experts, whose fc2 bias pass costs more under FP32 probabilities
    (walls/compute.py expert_bias_seconds), a pick that changes one group alone is that group applied alone, and the
    figure must be the pick's own."""
    from dataclasses import replace

    from moetune.layout.layout import Layout
    from moetune.layout.validate import Workload
    from moetune.planner.model_fields import bridge_router_dtype
    from moetune.planner.versus import config_changes, setting_effects
    from moetune.specs.hardware import load_gpu
    from moetune.specs.registry import load_model

    model = replace(load_model("olmoe-1b-7b"), add_mlp_bias=True)
    assert bridge_router_dtype(model) == "fp32"
    base = estimate(model, load_gpu("h100"), Layout(world_size=8, ep=8),
                    Workload(seq_length=4096, global_batch_size=64, micro_batch_size=1))
    baseline = base.variant(knobs=replace(base.knobs, moe_router_dtype=None, dispatcher="alltoall"))
    pick = baseline.variant(knobs=replace(baseline.knobs, overlap_grad_reduce=False))
    fp32_router = baseline.variant(knobs=replace(baseline.knobs, moe_router_dtype="fp32"))
    assert fp32_router.time["tokens_per_s_per_gpu"] != baseline.time["tokens_per_s_per_gpu"]  # the router is priced
    [effect] = setting_effects(pick, baseline, config_changes(pick, baseline))
    gain = pick.time["tokens_per_s_per_gpu"] / baseline.time["tokens_per_s_per_gpu"] - 1
    assert effect["alone"] == pytest.approx(gain, rel=1e-9, abs=1e-12)
    assert effect["in_turn"] == pytest.approx(gain, rel=1e-9, abs=1e-12)
