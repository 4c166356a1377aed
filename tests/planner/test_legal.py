"""The planner proposes only what `moetune check` accepts: knob sets that break a layout-independent error rule
are dropped before the search, and every pick passes the whole rule table."""

from dataclasses import replace
from itertools import combinations, product

import pytest

from moetune.configio.layout_map import HYBRID_SPLIT, layout_fields
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner import legal
from moetune.planner.config_map import to_config
from moetune.planner.explain import explain
from moetune.planner.legal import knob_errors, knob_rules
from moetune.planner.moves import moves
from moetune.planner.rule_findings import rule_errors
from moetune.planner.search import plan
from moetune.rules import evaluate
from moetune.rules.derive import EXTERNAL
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model


def test_only_layout_independent_error_rules_are_judged_per_knob_set():
    ids = {r.id for r in knob_rules().rules}
    # cudagraph.full_recompute's fix weighs the sequence (a layout fact); its condition does not
    assert {"ep_overlap.moe_recompute", "ep_overlap.mtp_layers", "cudagraph.moe_recompute_router",
            "cudagraph.full_recompute"} <= ids
    assert not ids & {"ep_overlap.needs_ep", "ep_overlap.pp_needs_vpp", "scale.experts_divisible", "fit.does_not_fit"}
    assert all(r.severity == "error" for r in knob_rules().rules)


def test_layout_facts_are_found_by_probing():
    """The layout-dependent facts are computed, not listed: every config name a layout sets, the estimator's facts,
    and what differs between probe layouts, the same whichever architecture the probes use."""
    facts = legal.layout_facts()
    assert {"derived.ep", "derived.multi_node", "derived.ep_crosses_nvlink", "derived.fits", "cluster.num_gpus",
            "model.seq_length", "train.micro_batch_size", "env.NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN",
            "model.pipeline_model_parallel_layout"} <= facts
    assert not facts & {"model.recompute_granularity", "model.moe_token_dispatcher_type", "mixed_precision.fp8"}
    models = legal._PROBE_MODELS
    try:
        legal._PROBE_MODELS = ("qwen3-next-80b-a3b", "nemotron3-nano-30b-a3b", "gpt-oss-120b", "mixtral-8x7b")
        legal.layout_facts.cache_clear()
        assert legal.layout_facts() == facts
    finally:
        legal._PROBE_MODELS = models
        legal.layout_facts.cache_clear()


def test_layout_facts_are_those_of_every_pair_of_probes():
    """layout_facts compares each probe with the first: a fact two probes differ in differs from the first's in one of
    them. Compared pair by pair, as layout_facts once did, the probes find the same facts."""
    listed = (set(layout_fields(Layout(world_size=1))) | {f"derived.{k}" for k in EXTERNAL}
              | {HYBRID_SPLIT, "derived.hybrid_stages", "derived.gemm_refusal", "derived.gemm_fix_seq",
                 "derived.gemm_fix"})
    pairs = set()
    for model, gpu, knobs in product(legal._PROBE_MODELS, legal._PROBE_GPUS, legal._PROBE_KNOBS):
        probes = [legal._facts(load_model(model), load_gpu(gpu), knobs, lay, wl) for lay, wl in legal._LAYOUT_PROBES]
        pairs |= {n for a, b in combinations(probes, 2) for n in a.keys() | b.keys() if a.get(n) != b.get(n)}
    assert legal.layout_facts() == listed | pairs


def test_ep_overlap_is_refused_for_three_mtp_layers():
    """MiniMax-M2 trained with its checkpoint's 3 MTP layers; overlap_moe_expert_parallel_comm supports at most one."""
    spec, gpu = load_model("minimax-m2").with_mtp(3), load_gpu("h100")
    assert "ep_overlap.mtp_layers" in knob_errors(spec, gpu, Knobs(ep_overlap=True), 4096)
    assert knob_errors(spec, gpu, Knobs(), 4096) == []
    moe = Knobs(recompute="selective", recompute_modules=frozenset({"moe"}),
                cuda_graph_scope=("attn", "moe_router", "moe_preprocess"))
    assert knob_errors(load_model("qwen3-30b-a3b"), gpu, moe, 4096) == ["cudagraph.moe_recompute_router"]


def test_the_last_resort_expert_offload_is_refused_beside_the_paged_stash():
    """A full-iteration graph on HybridEP writes Bridge's paged stash (config_map.STATIC_EXPERTS), which Megatron-Core
    refuses beside offload_modules expert_fc1/moe_act (transformer_config.py:1691-1697 @core_v0.18.0): the search's
    last-resort offload (search.LAST_RESORT_OFFLOAD) had passed there."""
    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("gb200")
    graph = Knobs(precision="mxfp8", dispatcher="hybridep", cuda_graph_scope=("full_iteration",),
                  routing="force-balance")
    offload = frozenset({"expert_fc1", "moe_act"})
    assert knob_errors(spec, gpu, graph, 4096) == []
    # the TE op fuser written beside the stash refuses them too (compute.op_fuser_expert_offload)
    assert {"dispatcher.paged_stash_expert_offload", "compute.op_fuser_expert_offload"} == set(
        knob_errors(spec, gpu, replace(graph, offload_modules=offload), 4096))
    assert knob_errors(spec, gpu, replace(graph, cuda_graph_scope=(), offload_modules=offload), 4096) == []


@pytest.mark.parametrize(("model", "gpu", "world", "gbs"), [
    ("minimax-m2", "h100", 64, 1024), ("qwen3-next-80b-a3b", "h100", 64, 1024),
    ("deepseek-v3", "gb200", 128, 1024), ("gpt-oss-120b", "gb200", 64, 1280),
])
def test_every_pick_passes_check(model, gpu, world, gbs):
    result = plan(load_model(model), load_gpu(gpu), world, Workload(seq_length=4096, global_batch_size=gbs), top=3)
    assert result.results
    for pick in result.results:
        assert rule_errors(pick) == []


@pytest.mark.parametrize(("model", "gpu", "world", "gbs"), [
    ("qwen3-30b-a3b", "gb200", 128, 1024), ("deepseek-v3", "b200", 256, 4096), ("glm-4.5-air", "h100", 64, 1024),
])
def test_explain_finds_no_single_move_that_beats_the_pick(model, gpu, world, gbs):
    """The search covers every move `explain` tries (VPP up to 32 included) but those it leaves out on purpose
    (retune_moves.toml `unsearched`: FP8 current scaling on Hopper, where the seeds start at blockwise): a pick it
    can improve with one setting would mean the search missed part of its own space."""
    pick = plan(load_model(model), load_gpu(gpu), world, Workload(seq_length=4096, global_batch_size=gbs),
                top=1).results[0]
    assert [m["rule"] for m in explain(pick)["retune"] if not moves()[m["rule"]].get("unsearched")] == []


def test_pinning_an_illegal_knob_is_one_clear_error():
    from moetune.errors import MoetuneError
    with pytest.raises(MoetuneError, match=r"ep_overlap\.mtp_layers.*mtp_num_layers=3.*--fix"):
        plan(load_model("minimax-m2").with_mtp(3), load_gpu("h100"), 64,
             Workload(seq_length=4096, global_batch_size=512), fixed={"ep_overlap": [True]})


@pytest.mark.parametrize(("gpu", "world", "ep", "allowed"), [("h100", 64, 32, True), ("gb200", 128, 128, False),
                                                             ("gb200", 128, 64, True)])
def test_hybridep_reach_matches_the_rule(gpu, world, ep, allowed):
    """The search's HybridEP limit is the rule's: EP within the NVLink domain on NVL72 racks only (HybridEP crosses
    8-GPU H100 nodes over RDMA; Bridge's H100 DeepSeek-V3 recipe runs it at EP64). Qwen3-235B-A22B, 128 experts."""
    result = plan(load_model("qwen3-235b-a22b"), load_gpu(gpu), world,
                  Workload(seq_length=4096, global_batch_size=1024),
                  fixed={"ep": ep, "dispatcher": ["hybridep"]}, top=1)
    assert bool(result.results) == allowed
    for pick in result.results:
        assert rule_errors(pick) == []


@pytest.mark.parametrize("etp", [1, 2])
def test_full_iteration_hybridep_runs_at_expert_tp_1(etp):
    """A full-iteration graph on HybridEP writes the TE op fuser (config_map.STATIC_EXPERTS), whose fused grouped MLP
    Megatron-Core asserts at expert TP > 1 (experts.py:330-331 @core_v0.18.0; rule compute.op_fuser_expert_tp): the
    search had picked it at ETP 2."""
    result = plan(load_model("qwen3-30b-a3b"), load_gpu("gb200"), 16, Workload(seq_length=4096, global_batch_size=256),
                  fixed={"etp": etp, "dispatcher": ["hybridep"], "precision": ["mxfp8"]}, routing="force-balance",
                  top=3)
    assert result.results
    assert any("full_iteration" in pick.knobs.cuda_graph_scope for pick in result.results) is (etp == 1)
    for pick in result.results:
        assert rule_errors(pick) == []


def test_the_op_fuser_of_a_full_iteration_graph_meets_the_experts_it_fuses():
    """A full-iteration graph on HybridEP writes the TE op fuser (config_map.STATIC_EXPERTS), whose fused grouped MLP
    Megatron-Core refuses for Llama 4's probabilities on the expert input (experts.py:334-335 @core_v0.18.0), and
    fuses Nemotron-H's non-gated squared ReLU only in its weighted form (:346-356), which Bridge's nemotronh recipes
    turn on beside it: Llama 4 keeps no such knob set, Nemotron-3-Nano's config turns the weighted form on."""
    graph = Knobs(precision="mxfp8", dispatcher="hybridep", cuda_graph_scope=("full_iteration",),
                  routing="force-balance")
    gpu = load_gpu("gb200")
    assert knob_errors(load_model("llama4-scout"), gpu, graph, 4096) == ["compute.op_fuser_probs_on_input"]
    result = plan(load_model("nemotron3-nano-30b-a3b"), gpu, 16, Workload(seq_length=4096, global_batch_size=256),
                  fixed={"dispatcher": ["hybridep"], "precision": ["mxfp8"], "cuda_graph_scope": [("full_iteration",)]},
                  routing="force-balance", top=1)
    config = to_config(result.results[0])
    assert config["model.use_transformer_engine_op_fuser"] and config["model.use_fused_weighted_squared_relu"]
    mlm = {**config, "cluster.launcher": "megatron-lm"}  # where Megatron-Core's own default (off) is what runs
    assert "compute.op_fuser_activation" not in {f.rule for f in evaluate(mlm)}
    del mlm["model.use_fused_weighted_squared_relu"]
    assert "compute.op_fuser_activation" in {f.rule for f in evaluate(mlm)}
