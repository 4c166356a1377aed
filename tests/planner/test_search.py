"""The planner: batched evaluation agrees with `estimate`, results fit and are ranked, --fix is honoured."""

import itertools
import random
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from moetune.errors import MoetuneError
from moetune.layout.dsa_split import keeps_index_groups
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.defaults import default_dispatcher
from moetune.planner.enumerate import enumerate_layouts
from moetune.planner.estimate import estimate
from moetune.planner.knob_grid import knob_grid
from moetune.planner.moves import TIGHT_SHARE
from moetune.planner.ranking import CP_SHORT_MARGIN, preference, within
from moetune.planner.search import plan
from moetune.planner.search_state import Search
from moetune.specs.hardware import load_gpu
from moetune.specs.hf_config import spec_from_hf
from moetune.specs.platform import platform_defaults
from moetune.specs.registry import load_model
from moetune.walls.batch import batch_step_seconds
from moetune.walls.batch_bytes import batch_memory
from moetune.walls.batch_layouts import build_batch
from moetune.walls.efficiency import efficiency
from moetune.walls.overheads import default_overheads


def _model(name: str):
    """A built-in model, or one of the DSA test configs (tests/oracle/dsa_configs.py: none ships built in)."""
    if name not in ("GLM5", "GLM52"):
        return load_model(name)
    sys.path.insert(0, str(Path(__file__).parents[1] / "oracle"))
    from dsa_configs import GLM5, GLM52_SHARING
    return spec_from_hf({**GLM5, **(GLM52_SHARING if name == "GLM52" else {})}, name=name, origin=f"{name}.json")


@pytest.mark.parametrize(("model", "gpu", "world", "seq", "gbs", "fixed"), [
    ("qwen3-30b-a3b", "h100", 16, 4096, 256, {}),
    ("deepseek-v3", "gb200", 256, 4096, 1024, {}),
    ("gpt-oss-20b", "b200", 16, 8192, 64, {}),
    ("deepseek-v3", "h100", 256, 4096, 1024, {"offload_modules": frozenset({"expert_fc1", "moe_act"})}),
    # long context: each layout's CP exchange is chosen in the batch as estimate names it (walls/context_parallel.py)
    ("deepseek-v3", "h100", 256, 65536, 64, {}),
    ("gpt-oss-120b", "h100", 64, 32768, 64, {}),
    # EP 1 and EP > 1 side by side under dropless routing: the busiest-rank factor applies only across expert ranks
    ("qwen3-30b-a3b", "h100", 8, 4096, 64, {}),
    # Muon's Newton-Schulz step, per layout's TP, DP and EDP (walls/muon.py), on an MLA model
    ("moonlight-16b-a3b", "h100", 32, 4096, 256, {"optimizer": "muon", "optimizer_offload_fraction": [0.0]}),
    # DeepSeek Sparse Attention (walls/dsa.py): its indexer, CP all-gathers and saved tensors, batch as scalar; index
    # sharing (GLM-5.2) too, at a length whose CP and TP layouts the search keeps
    ("GLM5", "h100", 416, 131072, 520, {}),
    ("GLM52", "h100", 64, 16384, 64, {}),
])
def test_batched_evaluation_equals_estimate(model, gpu, world, seq, gbs, fixed):
    spec, g = _model(model), load_gpu(gpu)
    wl = Workload(seq_length=seq, global_batch_size=gbs)
    layouts = enumerate_layouts(spec, g, world, wl, {})
    rng = random.Random(0)
    cands = [(lay, m) for lay in rng.sample(layouts, min(40, len(layouts))) for m in (1, 2)
             if gbs % (m * lay.dp) == 0 and (lay.vpp == 1 or gbs // (m * lay.dp) % lay.pp == 0)
             and keeps_index_groups(spec, lay)]
    assert len({lay.ep for lay, _ in cands}) > 1
    batch = build_batch(spec, cands)
    for knobs in rng.sample(knob_grid(spec, g, platform_defaults(g), fixed, "dropless"), 6):
        peak = batch_memory(spec, batch, seq, gbs, knobs, default_overheads(), arch=g.arch)
        step = batch_step_seconds(spec, batch, seq, gbs, knobs, g, efficiency(g.key))["step"]
        for i, (lay, m) in enumerate(cands):
            if knobs.dispatcher == "deepep" and lay.ep * lay.etp == 1:
                continue  # Megatron-Core refuses DeepEP there, and so does estimate; the plan's _fits drops it
            e = estimate(spec, g, lay, Workload(seq_length=seq, micro_batch_size=m, global_batch_size=gbs), knobs)
            assert peak[i] == pytest.approx(e.peak_bytes, rel=1e-6), (lay, m, knobs)
            assert step[i] == pytest.approx(e.time["step_seconds"], rel=1e-9), (lay, m, knobs)


def test_plan_results_fit_and_are_ranked():
    spec, g = load_model("qwen3-30b-a3b"), load_gpu("h100")
    result = plan(spec, g, 16, Workload(seq_length=4096, global_batch_size=1024), top=8)
    assert result.candidates_evaluated > 100_000 and result.feasible > 0
    assert result.results and all(r.fits for r in result.results)
    speeds = [r.time["tokens_per_s_per_gpu"] for r in result.results]
    # ranked fastest first, ties within 1% broken by the seeds' preferences
    assert all(b <= a * 1.01 for a, b in itertools.pairwise(speeds))
    assert max(speeds) == pytest.approx(speeds[0], rel=0.01)


@pytest.mark.parametrize(("model", "gpu", "world", "gbs", "routing", "pins"), [
    ("gpt-oss-120b", "b200", 64, 1280, "force-balance", ({"mbs": 4}, {"ep": 8})),
    ("qwen3-next-80b-a3b", "h100", 128, 256, "force-balance", ({"tp": 1},)),
])
def test_a_pin_never_finds_a_faster_pick(model, gpu, world, gbs, routing, pins):
    """Pinning a choice only shrinks the search, so the unpinned pick is within the 1% band of every pinned one. The
    re-split had stopped at the first in-band candidate out of its reach, before the re-splittable PP4 layouts (the
    recipe audit: gpt-oss-120b +3.1% under --fix mbs=4, Qwen3-Next +2.4% under --fix tp=1)."""
    spec, g = load_model(model), load_gpu(gpu)
    wl = Workload(seq_length=4096, global_batch_size=gbs)
    free = plan(spec, g, world, wl, top=1, routing=routing).results[0].time["tokens_per_s_per_gpu"]
    for pin in pins:
        pinned = plan(spec, g, world, wl, fixed=pin, top=1, routing=routing).results[0].time["tokens_per_s_per_gpu"]
        assert free >= pinned / 1.01, pin


def test_fix_pins_layout_and_knobs():
    spec, g = load_model("deepseek-v3"), load_gpu("h100")
    fixed = {"ep": 64, "tp": 2, "precision": ["fp8-blockwise"], "dispatcher": ["deepep"]}
    result = plan(spec, g, 1024, Workload(seq_length=4096, global_batch_size=8192), fixed=fixed, top=3)
    for r in result.results:
        assert (r.layout.ep, r.layout.tp, r.knobs.precision, r.knobs.dispatcher) == (64, 2, "fp8-blockwise", "deepep")


def test_enumeration_keeps_tp_inside_nvlink_and_respects_divisibility():
    spec, g = load_model("qwen3-235b-a22b"), load_gpu("h100")
    layouts = enumerate_layouts(spec, g, 256, Workload(seq_length=4096, global_batch_size=2048), {})
    assert layouts
    assert all(lay.tp <= 8 and lay.etp <= 8 for lay in layouts)
    # TP divides the 4 KV groups or is a multiple of them (Megatron-Core >= core_v0.16.0), and both are searched
    g = spec.num_query_groups
    assert all(spec.num_moe_experts % lay.ep == 0 and (g % lay.tp == 0 or lay.tp % g == 0) for lay in layouts)
    assert {lay.tp for lay in layouts} == {1, 2, 4, 8}
    # the published Bridge recipe layout (TP2 PP8 VPP4 EP32, embedding and loss counted as layers) is among them
    assert any((lay.tp, lay.pp, lay.vpp, lay.ep, lay.account_for_embedding) == (2, 8, 4, 32, True) for lay in layouts)


def test_nothing_fits_is_reported_not_raised():
    spec, g = load_model("deepseek-v3"), load_gpu("a100")
    result = plan(spec, g, 8, Workload(seq_length=4096, global_batch_size=64), top=3)
    assert result.results == [] and result.feasible == 0 and result.candidates_evaluated > 0
    assert np.isfinite(result.search_seconds)


def test_equal_dispatchers_rank_the_platform_default_first():
    """On 8 H100 all EP traffic stays on NVLink, the fitted H100 all-to-all efficiencies sit at their cap and
    HybridEP's 32 SMs outrun NVLink4, so the dispatchers tie; the seeds' default mapping (flex + DeepEP on H100)
    breaks the tie, and the HybridEP twin is named on the DeepEP row rather than taking a row of its own
    (planner/twins.py). (On NVLink5, 32 SMs bind HybridEP: tests/walls/test_comms.py.)"""
    res = plan(load_model("qwen3-30b-a3b"), load_gpu("h100"), 8, Workload(seq_length=4096, global_batch_size=512),
               top=3, fixed={"mbs": 2, "tp": 1, "ep": 8, "precision": ["fp8-blockwise"]})
    first, twins = res.results[0], res.same_prediction[0]
    assert [t.knobs.dispatcher for t in twins] == ["hybridep"]
    assert (twins[0].layout, twins[0].knobs.recompute, twins[0].knobs.cuda_graph_scope) == \
        (first.layout, first.knobs.recompute, first.knobs.cuda_graph_scope)
    assert twins[0].time["step_seconds"] == pytest.approx(first.time["step_seconds"], rel=1e-9)
    assert not any(r.knobs.dispatcher == "hybridep" for r in res.results)  # each folded into its DeepEP twin
    assert first.knobs.dispatcher == platform_defaults(load_gpu("h100"))["dispatcher"] == "deepep"


def test_near_ties_ask_each_layouts_own_default_dispatcher():
    """At EP 1 the default dispatcher is alltoall (no all-to-all to accelerate: defaults.default_dispatcher), so a
    near-tie between an EP1 layout and an EP > 1 one on the platform's DeepEP, at the same model parallelism and
    recompute, is decided by the seeds' next preferences (more DP, less TP), not by a backend EP 1 cannot run.
    Qwen3-30B-A3B on 16 B200s in BF16 has such pairs in its top 40; the platform's dispatcher had ranked every EP1
    layout down. (In MXFP8, whose weights are held in FP8 alone, and with the re-split bound counting every rank, its
    EP1 rows sit at other recompute sets than their EP > 1 twins.)"""
    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("b200")
    wl = Workload(seq_length=4096, global_batch_size=256)
    res = plan(spec, gpu, 16, wl, top=40, fixed={"cp": 1, "precision": ["bf16"]}, weigh_offload=False)
    fastest = res.results[0].time["step_seconds"]

    def rank(r) -> tuple:  # what decides before the dispatcher, and what after it
        tight = r.peak_bytes > gpu.capacity_bytes * (1 - TIGHT_SHARE)
        return (within(r.time["step_seconds"], fastest), tight, r.layout.tp * r.layout.pp, r.knobs.recompute)

    pairs = [(i, j) for i, a in enumerate(res.results) for j, b in enumerate(res.results) if i != j
             and a.layout.ep == 1 < b.layout.ep and rank(a) == rank(b) and a.layout.dp == b.layout.dp
             and a.layout.tp < b.layout.tp and b.knobs.dispatcher == default_dispatcher(gpu, b.layout)]
    assert pairs and default_dispatcher(gpu, res.results[pairs[0][1]].layout) == "deepep"
    assert all(i < j for i, j in pairs)  # less TP first: the EP1 layout runs its own default too


def test_a_pinned_dispatcher_ranks_no_layout_down_for_a_default_the_search_leaves_out():
    """With --fix dispatcher=alltoall on H100 no EP8 candidate can run its default DeepEP, so none is ranked down
    for it and the seeds' EP before TP puts EP8 ahead of EP1; searched beside DeepEP, its alltoall is off its own
    default and ranks after the EP1 layout's, which runs its own (alltoall at EP 1)."""
    gpu, knobs = load_gpu("h100"), Knobs(dispatcher="alltoall")
    ep1, ep8 = Layout(world_size=16, ep=1), Layout(world_size=16, ep=8)

    def rank(lay, searched) -> tuple:  # what a Search of these dispatchers ranks the candidate by
        s = SimpleNamespace(gpu=gpu, dispatchers=frozenset(searched), defaults={})
        return preference(lay, knobs, Search.dispatcher(s, lay), 4096)

    assert rank(ep8, {"alltoall"}) < rank(ep1, {"alltoall"})
    assert rank(ep1, {"alltoall", "deepep"}) < rank(ep8, {"alltoall", "deepep"})


def test_activation_offload_is_the_last_resort_when_nothing_fits():
    """R160's pinned layout (Qwen3-235B-A22B, 256 GB200, PP4 VPP6 EP64, MBS 3, selective moe_act/layernorm, no
    optimizer offload) fits nowhere without offloading; the planner then offloads expert_fc1 and moe_act inputs,
    as the published run did."""
    fixed = {"tp": 1, "cp": 1, "pp": 4, "vpp": 6, "ep": 64, "mbs": 3, "precision": ["mxfp8"],
             "recompute_modules": frozenset({"moe_act", "layernorm"}), "optimizer_offload_fraction": [0.0]}
    wl = Workload(seq_length=4096, global_batch_size=3072)
    res = plan(load_model("qwen3-235b-a22b"), load_gpu("gb200"), 256, wl, fixed=fixed, top=2, routing="force-balance")
    assert res.results and all(r.fits for r in res.results)
    assert all(r.knobs.offload_modules == frozenset({"expert_fc1", "moe_act"}) for r in res.results)
    pinned = plan(load_model("qwen3-235b-a22b"), load_gpu("gb200"), 256, wl, top=2, routing="force-balance",
                  fixed={**fixed, "offload_modules": frozenset()})
    assert pinned.results == []  # pinning "no offload" keeps the search to what was asked


def test_optimizer_offload_comes_after_everything_that_fits_without_it():
    """Seeds/000 Phase 1, offloading last: Qwen3-30B-A3B on 8 H100 with 3 GiB kept free had picked optimizer
    offload at +3% over the fastest candidate without it; now the pick runs without offload. Qwen3-235B-A22B on 24
    H100 fits nowhere without it, so the second pass offloads the optimizer."""
    light = plan(load_model("qwen3-30b-a3b"), load_gpu("h100"), 8, Workload(seq_length=4096, global_batch_size=512),
                 top=3, headroom_gib=3)
    assert light.results and all(r.knobs.optimizer_offload_fraction == 0 for r in light.results)
    offloaded = plan(load_model("qwen3-30b-a3b"), load_gpu("h100"), 8,
                     Workload(seq_length=4096, global_batch_size=512), top=1, headroom_gib=3,
                     fixed={"optimizer_offload_fraction": [1.0]})
    assert offloaded.results[0].fits and offloaded.results[0].knobs.optimizer_offload_fraction == 1
    heavy = plan(load_model("qwen3-235b-a22b"), load_gpu("h100"), 24,
                 Workload(seq_length=4096, global_batch_size=240), top=1)
    assert heavy.results[0].fits and heavy.results[0].knobs.optimizer_offload_fraction == 1
    assert not heavy.results[0].knobs.offload_modules  # the optimizer's offload sufficed: no activation offload


def test_headroom_keeps_memory_free():
    """Mixtral-8x7B on 16 H100: the unconstrained pick uses 77.9 of 78 GiB; with 6 GiB of headroom every result
    leaves 6 GiB free, and a headroom the GPU cannot give is one error."""
    spec, gpu, wl = load_model("mixtral-8x7b"), load_gpu("h100"), Workload(seq_length=4096, global_batch_size=256)
    tight = plan(spec, gpu, 16, wl, top=1)
    roomy = plan(spec, gpu, 16, wl, top=3, headroom_gib=6)
    assert tight.results[0].peak_bytes > gpu.capacity_bytes - 6 * 2**30
    assert roomy.results and all(r.peak_bytes <= gpu.capacity_bytes - 6 * 2**30 for r in roomy.results)
    assert roomy.results[0].time["step_seconds"] >= tight.results[0].time["step_seconds"]
    assert roomy.capacity_gib == tight.capacity_gib and roomy.headroom_gib == 6
    with pytest.raises(MoetuneError, match="--headroom"):
        plan(spec, gpu, 16, wl, headroom_gib=80)



def test_an_estimate_moved_to_another_gpu_keeps_no_facts_of_the_first():
    """Estimate.memo caches facts by name alone, and rule_findings.cp_sizing reads the GPU (its NVLink domain): a copy
    on another GPU (dataclasses.replace) must start its own memo, not answer with the first GPU's. plan weighs a row
    against its --headroom budget with fits_on, which copies nothing."""
    from moetune.planner.rule_findings import cp_sizing

    e = estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), Layout(world_size=32, tp=2, cp=4, ep=4),
                 Workload(seq_length=65536, global_batch_size=32), Knobs(precision="bf16", recompute="full"))
    cp_sizing(e)
    moved = replace(e, gpu=load_gpu("gb200"))
    assert "cp_sizing" in e.memo and "cp_sizing" not in moved.memo
    budget = replace(e.gpu, memory_gib=e.peak_bytes / 2**30 - 1)  # 1 GiB less than the peak
    assert e.fits_on(e.gpu) == e.fits and not e.fits_on(budget)


def test_ep1_candidates_are_listed_once_with_alltoall():
    """At EP=1 no token leaves the rank, so DeepEP/HybridEP would repeat the alltoall candidate: Qwen3-30B-A3B on
    72 GB200 picks EP1 layouts, each listed once."""
    result = plan(load_model("qwen3-30b-a3b"), load_gpu("gb200"), 72, Workload(seq_length=4096, global_batch_size=576),
                  top=5)
    ep1 = [r for r in result.results if r.layout.ep == 1]
    assert ep1 and all(r.knobs.dispatcher == "alltoall" for r in ep1)
    keys = [(r.layout, r.workload.micro_batch_size, r.knobs) for r in result.results]
    assert len(keys) == len(set(keys))


def test_hybridep_groups_stay_inside_the_jobs_nvlink_domains():
    """240 GB200s run in Slurm segments of 15 nodes: 60-rank NVLink domains. EP40's second group (ranks 40-79)
    straddles two, so HybridEP at EP40 is not offered (rule dispatcher.hybridep_ep_exceeds_domain); EP20
    tiles the domains and is (GLM-4.5: 160 experts)."""
    spec, gpu = load_model("glm-4.5"), load_gpu("gb200")
    wl = Workload(seq_length=4096, global_batch_size=960)
    for ep, offered in ((40, False), (20, True)):
        fixed = {"ep": ep, "tp": 1, "pp": 6, "dispatcher": ["hybridep"], "precision": ["mxfp8"]}
        assert bool(plan(spec, gpu, 240, wl, fixed=fixed, top=1).results) is offered, ep


def test_a_global_batch_that_rules_out_data_parallel_sizes_says_which():
    """GBS 1000 on 64 H100: DP 16, 32 and 64 do not divide it, so those layouts are never searched, and the result
    names them; GBS 1024 rules out none, and its search holds the DP-64 layouts the first one could not."""
    spec, g = load_model("qwen3-30b-a3b"), load_gpu("h100")
    odd = plan(spec, g, 64, Workload(seq_length=4096, global_batch_size=1000), top=1)
    assert odd.gbs_excluded_dp == [16, 32, 64]
    assert all(1000 % (r.layout.dp * r.workload.micro_batch_size) == 0 for r in odd.results)
    even = plan(spec, g, 64, Workload(seq_length=4096, global_batch_size=1024), top=1)
    assert even.gbs_excluded_dp == [] and even.layouts > odd.layouts
    wl = Workload(seq_length=4096, global_batch_size=1024)
    assert {lay.dp for lay in enumerate_layouts(spec, g, 64, wl, {})} >= {16, 32, 64}
    # DeepSeek-V3 at 128k with GBS 128 on 256 GB200: DP 256 is ruled out by the batch, but no DP-256 layout (TP, CP
    # and PP all 1) would fit 128k tokens a rank anyway, so it is not offered as what a larger GBS would open
    long = plan(load_model("deepseek-v3"), load_gpu("gb200"), 256, Workload(seq_length=131072, global_batch_size=128),
                top=1)
    assert long.results and 256 not in long.gbs_excluded_dp


def test_tp_comm_overlap_rides_along_where_userbuffers_take_the_recipe():
    """TP overlap is paired with every precision Transformer Engine's Userbuffers take (not blockwise FP8): on a TP > 1
    pick it is on, hides TP time and is charged its buffers; on TP 1 the result carries it off (Bridge turns it off);
    --fix tp_comm_overlap=false keeps it off and is predicted slower."""
    spec, gpu, wl = load_model("qwen3-235b-a22b"), load_gpu("h100"), Workload(seq_length=4096, global_batch_size=1024)
    pinned = {"tp": 4, "pp": 8, "ep": 8, "precision": ["bf16"], "cuda_graph_scope": [()], "ep_overlap": [False],
              "optimizer_offload_fraction": [0.0], "recompute": "none"}
    on = plan(spec, gpu, 256, wl, top=1, fixed=pinned).results[0]
    off = plan(spec, gpu, 256, wl, top=1, fixed={**pinned, "tp_comm_overlap": False}).results[0]
    assert on.knobs.tp_comm_overlap and not off.knobs.tp_comm_overlap
    assert on.time["exposed_collectives"]["tp"] < off.time["exposed_collectives"]["tp"]
    assert on.time["step_seconds"] < off.time["step_seconds"]
    assert "tp_comm_userbuffers" in on.stages[0].items and "tp_comm_userbuffers" not in off.stages[0].items
    tp1 = plan(spec, gpu, 256, wl, top=1, fixed={**pinned, "tp": 1, "pp": 16}).results[0]
    assert not tp1.knobs.tp_comm_overlap
    blockwise = plan(spec, gpu, 256, wl, top=1, fixed={**pinned, "precision": ["fp8-blockwise"]}).results[0]
    assert not blockwise.knobs.tp_comm_overlap


def test_interleaved_picks_run_a_multiple_of_pp_micro_batches():
    """Megatron's interleaved schedule refuses a micro-batch count that PP does not divide; Phi-3.5-MoE on 72 H100
    with GBS 1000 once picked PP9 VPP2 at 125 micro-batches."""
    result = plan(load_model("phi-3.5-moe"), load_gpu("h100"), 72, Workload(seq_length=4096, global_batch_size=1000),
                  top=10)
    assert result.results
    for r in result.results:
        m = r.workload.num_microbatches(r.layout)
        assert r.layout.vpp == 1 or m % r.layout.pp == 0


def test_linear_attention_heads_bound_cp_in_the_search():
    """Qwen3-Next's 16 key heads cap CP at 16 a TP rank: the search skips CP 32 rather than failing on it."""
    result = plan(load_model("qwen3-next-80b-a3b"), load_gpu("h100"), 64,
                  Workload(seq_length=131072, global_batch_size=64), top=3)
    assert result.results and all(16 % (r.layout.cp * r.layout.tp) == 0 or 16 // r.layout.tp % r.layout.cp == 0
                                  for r in result.results)


def test_pinned_tp_comm_overlap_means_tp_above_one():
    result = plan(load_model("qwen3-30b-a3b"), load_gpu("h100"), 16, Workload(seq_length=4096, global_batch_size=512),
                  fixed={"tp_comm_overlap": True}, top=3)
    assert all(r.layout.tp > 1 and r.knobs.tp_comm_overlap for r in result.results)


def test_a_plan_whose_only_fit_overflows_the_host_says_so():
    """DeepSeek-V3 on 16 GB300: only a full optimizer offload fits the GPU, and its state needs more host memory
    than a Grace gives a GPU: nothing fits, and the reason names the host, not the pinned knobs."""
    from moetune.planner.why_none import nothing_fits
    result = plan(load_model("deepseek-v3"), load_gpu("gb300"), 16, Workload(seq_length=4096, global_batch_size=128))
    assert not result.results
    assert result.lightest_host_gib > result.host_capacity_gib == 223
    assert "host memory per GPU" in nothing_fits(result)


def test_context_parallelism_below_long_context_must_beat_cp1_by_the_models_error(shared_data):
    """DeepSeek-V3 on 1,024 H100 at 4k: TP2 CP2 is predicted 4% over the best CP 1 layout, within the step model's own
    error, so the pick keeps CP 1 (the seeds add CP for long context); pinned, CP 2 is what it predicts. Mixtral-8x22B
    at 8k on 64 H100 (GBS 256), where CP 4 predicts 6% more, still takes it."""
    spec, gpu, wl = load_model("deepseek-v3"), load_gpu("h100"), Workload(seq_length=4096, global_batch_size=8192)
    pick = plan(spec, gpu, 1024, wl, top=1).results[0]
    pinned = plan(spec, gpu, 1024, wl, top=1, fixed={"cp": 2}).results[0]
    gain = pinned.time["tokens_per_s_per_gpu"] / pick.time["tokens_per_s_per_gpu"]
    assert pick.layout.cp == 1 and 1.0 < gain < CP_SHORT_MARGIN
    mixtral = load_model(str(shared_data / "models" / "mixtral-8x22b.config.json"))
    wide = plan(mixtral, gpu, 64, Workload(seq_length=8192, global_batch_size=256), top=1).results[0]
    cp1 = plan(mixtral, gpu, 64, Workload(seq_length=8192, global_batch_size=256), top=1, fixed={"cp": 1}).results[0]
    assert wide.layout.cp > 1
    assert wide.time["tokens_per_s_per_gpu"] > CP_SHORT_MARGIN * cp1.time["tokens_per_s_per_gpu"]


def test_a_hybrid_model_searches_graphs_over_its_mamba_mixers():
    """Every Nemotron-3 Nano recipe captures the Mamba mixers in CUDA graphs (published_runs.csv: attn mamba ...);
    the TE-scoped set the plan searches for a hybrid holds them, and they take the pick's host wall down."""
    spec, gpu = load_model("nemotron3-nano-30b-a3b"), load_gpu("gb300")
    pick = plan(spec, gpu, 8, Workload(seq_length=4096, global_batch_size=256), top=1).results[0]
    assert "mamba" in pick.knobs.cuda_graph_scope
    without = pick.variant(knobs=replace(pick.knobs, cuda_graph_scope=tuple(
        s for s in pick.knobs.cuda_graph_scope if s != "mamba")))
    assert without.time["walls"]["host"] > pick.time["walls"]["host"]


def test_a_full_recompute_pick_names_the_faster_optimizer_offload_alternative():
    """The seeds put offloading after recompute, so full recompute stays the pick; but where the optimizer's CPU
    offload predicts 3% more, plan names it (DeepSeek-V3 at 128k on 256 H100: +18%, seeds/002's own long-context
    pattern offloads the optimizer)."""
    result = plan(load_model("deepseek-v3"), load_gpu("h100"), 256, Workload(seq_length=131072, global_batch_size=256),
                  top=1)
    pick, alt = result.results[0], result.offload_alternative
    assert pick.knobs.recompute == "full" and pick.knobs.optimizer_offload_fraction == 0
    assert alt is not None and alt.knobs.optimizer_offload_fraction == 1.0 and alt.fits
    assert alt.time["tokens_per_s_per_gpu"] >= 1.03 * pick.time["tokens_per_s_per_gpu"]


def test_no_offload_alternative_where_the_pick_does_not_recompute_whole_layers():
    result = plan(load_model("qwen3-30b-a3b"), load_gpu("h100"), 16, Workload(seq_length=4096, global_batch_size=512),
                  top=1)
    assert result.results[0].knobs.recompute != "full" and result.offload_alternative is None


def test_no_candidate_runs_a_gemm_shape_its_recipe_refuses():
    """Fuzz audit: DBRX on 16 H100s at seq 4097 picked FP8 blockwise at TP 1, whose 4,097-token GEMM inputs Transformer
    Engine refuses (assert_dim_for_fp8_exec). Every row now estimates, and none is refused; a pinned FP8 plan that
    fits in memory says which shape stops it."""
    from moetune.layout.gemm_shapes import Widths, gemm_refusal
    from moetune.planner.why_none import nothing_fits

    spec, gpu = load_model("dbrx"), load_gpu("h100")
    result = plan(spec, gpu, 16, Workload(seq_length=4097, global_batch_size=64), top=10)
    assert result.results
    for e in result.results:
        lay, wl = e.layout, e.workload
        assert gemm_refusal(Widths.of(spec), e.knobs.precision, gpu.arch, seq=wl.seq_length, mbs=wl.micro_batch_size,
                            tp=lay.tp, cp=lay.cp, sp=lay.sp, etp=lay.etp) is None, e.knobs.precision
    pinned = {"precision": ["fp8-blockwise"]}
    none = plan(load_model("qwen3-30b-a3b"), gpu, 8, Workload(seq_length=4097, global_batch_size=64), fixed=pinned)
    assert not none.results and none.memory_fits
    assert "multiple of 8, got 4097" in nothing_fits(none, {"precision": "fp8-blockwise"})


def test_a_pinned_megatron_fsdp_strategy_is_searched_as_estimate_prices_it():
    """--fix megatron_fsdp=S: every candidate runs Megatron FSDP's strategy S, the memory bound prunes with it (EP 8
    at EDP 2 without recompute or offload fits no DDP candidate on 16 H100, and fits sharded), and the batch's peak
    and throughput are estimate's for the same configuration."""
    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    wl = Workload(seq_length=4096, global_batch_size=256)
    pins = {"tp": 1, "cp": 1, "pp": 1, "ep": 8, "etp": 1, "recompute": "none", "optimizer_offload_fraction": [0.0],
            "offload_modules": frozenset()}
    assert not plan(spec, gpu, 16, wl, fixed=pins, top=1).results
    for strategy in ("optim_grads", "optim_grads_params"):
        result = plan(spec, gpu, 16, wl, fixed={**pins, "megatron_fsdp": strategy}, top=3)
        assert result.results and all(r.knobs.megatron_fsdp == strategy and r.fits for r in result.results)
        for r in result.results:
            e = estimate(spec, gpu, r.layout, r.workload, r.knobs)
            assert r.peak_bytes == pytest.approx(e.peak_bytes, rel=1e-9)
            assert r.time["step_seconds"] == pytest.approx(e.time["step_seconds"], rel=1e-9)


def test_megatron_fsdp_with_muon_pinned_is_one_line():
    with pytest.raises(MoetuneError, match="Megatron FSDP runs Adam or SGD only"):
        plan(load_model("moonlight-16b-a3b"), load_gpu("h100"), 16, Workload(seq_length=4096, global_batch_size=64),
             fixed={"megatron_fsdp": "optim_grads_params", "optimizer": "muon"})
