"""planner/release_fit.py: the knob sets a named release can run, judged by its fields (megatron_releases.csv,
bridge_releases.csv; tests/configio cites the facts)."""

import sys
from pathlib import Path

import pytest

from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.planner.knob_fields import knob_fields
from moetune.planner.release_fit import lacking, model_lacking, release_grid, release_model, release_pins
from moetune.specs.hardware import load_gpu
from moetune.specs.hf_config import spec_from_hf
from moetune.specs.registry import load_model

sys.path.insert(0, str(Path(__file__).parents[1] / "oracle"))
from dsa_configs import GLM5  # noqa: E402

GRID = [Knobs(dispatcher="hybridep"), Knobs(dispatcher="deepep"), Knobs(precision="mxfp8", fp8_output_proj=True),
        Knobs(offload_modules=frozenset({"expert_fc1"}))]


def test_before_0_16_hybridep_and_offloading_are_left_out_and_the_mxfp8_head_falls_back():
    """0.15 lacks moe_flex_dispatcher_backend and offload_modules (from 0.16), fp8_output_proj (from 0.18): HybridEP and
    activation offloading cannot run there, DeepEP can (the backend held at its default, moe_enable_deepep the
    release's switch), and MXFP8 runs without the output projection in MXFP8."""
    kept, lacks = release_grid(GRID, "0.15")
    assert kept == [Knobs(dispatcher="deepep"), Knobs(precision="mxfp8", fp8_output_proj=False)]
    assert {"model.moe_flex_dispatcher_backend", "model.offload_modules", "model.fp8_output_proj"} <= set(lacks)
    assert release_grid(GRID, "0.19") == (GRID, ())


def test_a_pinned_set_the_release_cannot_run_is_one_line():
    with pytest.raises(MoetuneError, match=r"^--megatron-core 0\.15: every knob set searched needs what Megatron-Core "
                                           r"0\.15 lacks: model\.moe_flex_dispatcher_backend \(Megatron-Core has it "
                                           r"from 0\.16 on\)"):
        release_grid([Knobs(dispatcher="hybridep")], "0.15")


def test_a_muon_pin_is_named_alone_though_some_sets_lack_more():
    """Muon (dist_muon: Megatron-LM --optimizer from core_v0.16.0, arguments.py:2056-2058) beside HybridEP, whose
    backend field 0.15 lacks too: every set lacks dist_muon, which the one line names (the --fix pin), not the
    dispatcher."""
    grid = [Knobs(optimizer="muon", dispatcher="hybridep"), Knobs(optimizer="muon", dispatcher="alltoall")]
    with pytest.raises(MoetuneError, match=r"lacks: optimizer\.optimizer=dist_muon \(Megatron-Core has it from 0\.16 "
                                           r"on\); change the --fix"):
        release_grid(grid, "0.15")
    assert release_grid(grid, "0.16")[0] == grid


def test_a_default_held_or_aliased_field_is_no_lack():
    """moe_paged_stash off is Megatron's default (a release without it runs that); the data's length has an alias
    Bridge 0.2.0 has (dataset.sequence_length), which emit writes."""
    assert lacking({"model.moe_paged_stash": False, "dataset.seq_length": 4096}, "0.2.0") == []
    assert lacking({"model.moe_paged_stash": True}, "0.2.0") == ["model.moe_paged_stash"]


def test_a_model_the_release_cannot_build_is_one_line():
    """GLM-5 is priced on DSA's cuDNN kernels (dsa_kernel_backend, a TransformerConfig field from 0.19)."""
    spec = spec_from_hf(GLM5, name="glm5", origin="glm5.json")
    with pytest.raises(MoetuneError, match=r"^--megatron-core 0\.18: .* needs model\.dsa_kernel_backend"):
        model_lacking(spec, load_gpu("h100"), "0.18")
    model_lacking(spec, load_gpu("h100"), "0.19")
    model_lacking(load_model("deepseek-v3"), load_gpu("h100"), "0.13")  # MLA and MTP: every release has them


def test_graphs_fall_back_to_the_scopes_the_release_captures():
    """Before 0.16 the scope is one string (attn, full or full_iteration): the router's graphs drop, attention's stay;
    before 0.15 there is no cuda_graph_impl, and Transformer Engine's graphs run by external_cuda_graph over 'attn'
    (transformer_config.py @core_v0.14.0), so attention's graphs stay there too."""
    scoped = Knobs(cuda_graph_scope=("attn", "moe_router", "moe_preprocess"))
    assert release_grid([scoped], "0.15")[0] == [Knobs(cuda_graph_scope=("attn",))]
    assert release_grid([scoped], "0.16")[0] == [scoped]
    for old in ("0.13", "0.14"):
        assert release_grid([scoped, Knobs(cuda_graph_scope=())], old)[0] == [Knobs(cuda_graph_scope=("attn",)),
                                                                              Knobs(cuda_graph_scope=())]


def test_a_hybrid_is_pinned_to_one_stage_before_the_split_pattern():
    """moetune writes a hybrid's pipeline split as '|' in --hybrid-layer-pattern (core_v0.17.0); before it the pattern
    is unsplit, so plan keeps such a model at PP 1."""
    hybrid = load_model("nemotron3-nano-30b-a3b")
    assert release_pins(hybrid, "0.16") == {"pp": 1} and release_pins(hybrid, "0.17") == {}
    assert release_pins(load_model("deepseek-v3"), "0.13") == {}


def test_a_user_pin_that_splits_a_hybrid_on_such_a_release_is_one_line():
    with pytest.raises(MoetuneError, match=r"^--megatron-core 0\.16: --fix pp=2 splits .*fix pp=1, or upgrade"):
        release_pins(load_model("nemotron3-nano-30b-a3b"), "0.16", {"pp": 2})
    assert release_pins(load_model("nemotron3-nano-30b-a3b"), "0.16", {"pp": 1}) == {"pp": 1}


def test_ep_overlap_is_left_out_where_megatron_core_lacks_the_field_bridge_applies_it_onto():
    """comm_overlap.overlap_moe_expert_parallel_comm is Bridge's; Bridge sets it on the model's
    overlap_moe_expert_parallel_comm, a TransformerConfig field from core_v0.14.0 on (megatron_releases.csv), so a plan
    for 0.13 runs without EP overlap (its pick had been emitted and then refused for --overlap-moe-expert-parallel-comm,
    which 0.13's parser lacks)."""
    overlap = Knobs(dispatcher="alltoall", ep_overlap=True)
    assert "comm_overlap.overlap_moe_expert_parallel_comm" in lacking(knob_fields(overlap), "0.13")
    assert lacking(knob_fields(overlap), "0.14") == []
    kept, _ = release_grid([overlap, Knobs(dispatcher="alltoall")], "0.13")
    assert kept == [Knobs(dispatcher="alltoall")]


def test_a_bridge_release_reports_tflops_with_its_own_counter(capsys):
    """Bridge v0.4.2 counts gpt-oss's GLU at 2 (its SiLU-only rule) where main counts 3: estimate and plan for that
    release print the TFLOP/s/GPU its log prints (the step and tokens are the same); a Megatron-Core release alone
    keeps Bridge main's count."""
    import json

    from moetune.cli.main import main
    args = ["estimate", "gpt-oss-120b", "--gpu", "h100", "--gpus", "64", "--tp", "4", "--pp", "4", "--ep", "8",
            "--precision", "bf16", "--json"]
    times = {}
    for release in ([], ["--megatron-bridge", "0.4.2"], ["--megatron-core", "0.16"]):
        main(args + release)
        times[tuple(release)] = json.loads(capsys.readouterr().out)["time"]
    main_count, old, core = times.values()
    assert old["flops_convention"] == "bridge-pre-2026-05" and core["flops_convention"] == "bridge"
    assert old["tokens_per_s_per_gpu"] == main_count["tokens_per_s_per_gpu"]
    assert old["tflops_per_gpu"] < main_count["tflops_per_gpu"] / 1.15 and core == main_count


def test_a_release_before_a_fix_is_not_planned_what_it_mis_runs(capsys):
    """Megatron-Core 0.18 trains EP 1 with expert TP unlike TP with an undercounted gradient norm (fixed in 0.19: its
    own rule says so) and 0.14 replays no scoped CUDA graph under EP overlap (from 0.16): Qwen3-235B-A22B on 128
    GB200 had picked TP2 EP1 ETP1 for 0.18, DeepSeek-V3 on 256 B200 attention graphs with EP overlap for 0.14."""
    import json

    from moetune.cli.main import main
    rows = {}
    for release, args in (("0.18", ["qwen3-235b-a22b", "--gpu", "gb200", "--gpus", "128", "--gbs", "4096"]),
                          ("0.14", ["deepseek-v3", "--gpu", "b200", "--gpus", "256", "--gbs", "8192"])):
        assert main(["plan", *args, "--megatron-core", release, "--top", "5", "--json"]) == 0
        rows[release] = json.loads(capsys.readouterr().out)["results"]
    assert all(r["layout"]["ep"] > 1 or r["layout"]["etp"] == r["layout"]["tp"] for r in rows["0.18"])
    assert not any(r["knobs"]["ep_overlap"] and r["knobs"]["cuda_graph_scope"] for r in rows["0.14"])
    assert main(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "256", "--fix", "ep=1",
                 "--fix", "tp=2", "--fix", "etp=1", "--megatron-core", "0.18"]) == 2
    assert "undercounted gradient norm" in capsys.readouterr().err


def test_estimate_judges_the_release_it_is_for(capsys):
    """estimate's rule findings read --megatron-core as check's do: Megatron-Core 0.16 splits a Mamba hybrid evenly
    whatever the layout string says (ssm/mamba_block.py), so an uneven split for it is an error; for 0.17 it runs."""
    import json

    from moetune.cli.main import main
    args = ["estimate", "nemotron3-nano-30b-a3b", "--gpu", "h100", "--gpus", "32", "--tp", "2", "--pp", "2", "--ep",
            "8", "--pipeline-layout", "Et*20|t*32L", "--precision", "bf16", "--json"]
    rules = {}
    for release in ("0.16", "0.17"):
        main(args + ["--megatron-core", release])
        rules[release] = {c["rule"] for c in json.loads(capsys.readouterr().out)["checks"]}
    assert "scale.hybrid_split_needs_mcore_017" in rules["0.16"] - rules["0.17"]


def test_a_bridge_release_counts_flops_as_its_own_counter_does():
    """release_model reads a Bridge release's number (configio/releases.py release_number) for walls' counter table:
    v0.2-v0.4.2 predate PR #3947, v0.5.x and v0.6.0 have their own (walls/model_flops.py BRIDGE_RELEASE_COUNTERS). A
    Megatron-Core release, or none, says nothing of Bridge's counter: the model's stays."""
    spec = load_model("gpt-oss-120b")
    got = {r: release_model(spec, r).flops_convention for r in ("0.2.0", "0.4.2", "0.5.0", "0.5.1", "0.6.0", "0.17",
                                                                  None)}
    assert got == {"0.2.0": "bridge-pre-2026-05", "0.4.2": "bridge-pre-2026-05", "0.5.0": "bridge-0.5",
                   "0.5.1": "bridge-0.5", "0.6.0": "bridge-0.6", "0.17": "bridge", None: "bridge"}


@pytest.mark.parametrize(("release", "lay", "why"), [
    ("0.17", Layout(tp=2, ep=1, etp=1, world_size=16), "ep1_etp"),  # before core_v0.19.0 (PR #5916, cd4afffa64)
    ("0.5.1", Layout(tp=2, ep=1, etp=1, world_size=16), "ep1_etp"),  # Bridge 0.5.1 pins Megatron-Core 0.18.2
    ("0.19", Layout(tp=2, ep=1, etp=1, world_size=16), None),
    ("0.6.0", Layout(tp=2, ep=1, etp=1, world_size=16), None),  # Bridge 0.6.0 pins cd4afffa6484, 0.19.0
    ("0.17", Layout(tp=2, ep=1, etp=2, world_size=16), None),  # expert TP as TP: the expert grads reduce as dense
    ("0.17", Layout(tp=2, ep=2, etp=1, world_size=16), None),  # EP > 1: the expert grads reduce over EDP
    (None, Layout(tp=2, ep=1, etp=1, world_size=16), None),
])
def test_the_layouts_a_release_refuses_and_why(release, lay, why):
    from moetune.planner.release_fit import layout_refusal
    assert layout_refusal(load_model("qwen3-30b-a3b"), lay, release) == why


@pytest.mark.parametrize(("release", "pins", "described"), [
    ("0.17", {"pp": 1, "cp": 1}, "Megatron-Core 0.17"),
    ("0.5.1", {}, "Megatron Bridge 0.5.1 (Megatron-Core 0.18.2 at Megatron-LM 458c8d0ecafd)"),
])
def test_a_search_the_release_leaves_no_layout_names_why_with_the_count(release, pins, described):
    """Qwen3-30B-A3B on 16 H100 with EP 1, TP 2 and expert TP 1 pinned: every layout the --fix values leave runs EP 1
    with expert TP unlike TP, which Megatron-Core before 0.19 mis-trains. The line names the reason layout_refusal
    gave with the layouts it refused: one with PP and CP pinned too (TP2 CP1 PP1 DP8), else every layout the pins
    leave (enumerate_layouts, before the release's filter)."""
    from moetune.layout.validate import Workload
    from moetune.planner.enumerate import enumerate_layouts
    from moetune.planner.search import plan
    spec, h100, wl = load_model("qwen3-30b-a3b"), load_gpu("h100"), Workload(seq_length=4096, global_batch_size=256)
    fixed = {"ep": 1, "tp": 2, "etp": 1, **pins}
    n = len(enumerate_layouts(spec, h100, 16, wl, fixed, gbs_excluded=set()))
    leave = "1 layout" if pins else f"{n} layouts"
    assert n > 1 or pins
    with pytest.raises(MoetuneError) as err:
        plan(spec, h100, 16, wl, fixed=fixed, release=release)
    assert str(err.value) == (
        f"{'--megatron-core' if release == '0.17' else '--megatron-bridge'} {release}: every layout the --fix values "
        f"leave ({leave}) is one {described} does not train as moetune sizes it: EP 1 with expert TP unlike TP in "
        f"{leave} (an undercounted gradient norm, fixed in Megatron-Core 0.19); fix etp to the TP, or ep above 1")
