"""Round trip: a plan's winners -> emit -> check reads them back: same layout and knobs, no rule errors."""

from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import pytest

from moetune.configio.load import load_config
from moetune.emit import emit_all
from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.config_map import to_config
from moetune.planner.estimate import estimate
from moetune.planner.from_config import from_config
from moetune.planner.search import plan
from moetune.rules import derive, evaluate
from moetune.rules.mcore import mcore_findings
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model

# (model, gpu, GPUs, GBS, routing): force-balanced routing lets full-iteration graphs in (with EP overlap and the
# LM head under MXFP8, as Bridge's GB200 DeepSeek-V3 recipe runs them)
PLANS = [("qwen3-30b-a3b", "h100", 16, 1024, "dropless"), ("deepseek-v3", "gb200", 256, 2048, "dropless"),
         ("gpt-oss-120b", "b200", 64, 1280, "dropless"), ("mixtral-8x7b", "h100", 32, 512, "dropless"),
         ("deepseek-v3", "gb200", 256, 4096, "force-balance"),
         # a Mamba hybrid on PP 2: its split travels as '|' in hybrid_layer_pattern, read back as the same split
         ("nemotron3-nano-30b-a3b", "gb200", 128, 512, "dropless"),
         # top-1 routing: Megatron-Core refuses a top-1 softmax router without pre-softmax; Llama 4's is a sigmoid
         ("llama4-scout", "h100", 128, 1024, "dropless")]


@pytest.mark.parametrize(("model", "gpu", "gpus", "gbs", "routing"), PLANS)
@pytest.mark.parametrize("emitted", ["overrides.txt", "megatron_lm_args.txt"])
def test_emitted_plan_reads_back_identically_and_clean(model, gpu, gpus, gbs, routing, emitted, tmp_path):
    result = plan(load_model(model), load_gpu(gpu), gpus, Workload(seq_length=4096, global_batch_size=gbs), top=2,
                  routing=routing)
    for est in result.results:
        files = emit_all(to_config(est))
        path = tmp_path / emitted
        path.write_text(files[emitted])
        config = load_config([path], gpu=gpu, gpus=gpus)
        layout, workload, knobs = from_config(config)
        assert layout.as_dict() == est.layout.as_dict()
        assert (layout.first_stage_layers, layout.last_stage_layers, layout.account_for_embedding,
                layout.pipeline_layout) == (est.layout.first_stage_layers, est.layout.last_stage_layers,
                                            est.layout.account_for_embedding, est.layout.pipeline_layout)
        assert (workload.micro_batch_size, workload.global_batch_size, workload.seq_length) == \
            (est.workload.micro_batch_size, est.workload.gbs(est.layout), est.workload.seq_length)
        expected = est.knobs
        assert (knobs.precision, knobs.dispatcher, knobs.num_sms, knobs.recompute, knobs.effective_modules,
                knobs.cuda_graph_scope, knobs.ep_overlap, knobs.optimizer_offload_fraction, knobs.fp8_output_proj,
                knobs.routing) == \
            (expected.precision, expected.dispatcher, expected.num_sms, expected.recompute, expected.effective_modules,
             expected.cuda_graph_scope, expected.ep_overlap, expected.optimizer_offload_fraction,
             expected.fp8_output_proj, expected.routing)
        found = evaluate(config, derive(config))
        errors = [f.rule for f in found + mcore_findings(config) if f.severity == "error"]
        assert errors == []
        # the launch collects Python's garbage by hand as Bridge's recipes do (Megatron-LM leaves it off), so check
        # has no host-overhead advice left for the file plan wrote
        assert config["train.manual_gc"] is True and "host.manual_gc" not in {f.rule for f in found}


@pytest.mark.parametrize("emitted", ["overrides.txt", "megatron_lm_args.txt"])
def test_a_plan_under_megatron_fsdp_emits_a_config_that_reads_back_and_checks_clean(emitted, tmp_path):
    """--fix megatron_fsdp=optim_grads_params: the emitted config turns Megatron FSDP on with its strategy and the
    fsdp_dtensor checkpoint format Megatron asserts (rule fsdp.megatron_fsdp_ckpt_format), and reads back the same."""
    result = plan(load_model("qwen3-30b-a3b"), load_gpu("h100"), 16, Workload(seq_length=4096, global_batch_size=256),
                  top=2, fixed={"megatron_fsdp": "optim_grads_params"})
    for est in result.results:
        path = tmp_path / emitted
        path.write_text(emit_all(to_config(est))[emitted])
        config = load_config([path], gpu="h100", gpus=16)
        knobs = from_config(config)[2]
        assert knobs.megatron_fsdp == "optim_grads_params" and knobs.distributed_optimizer
        errors = [f.rule for f in evaluate(config, derive(config)) + mcore_findings(config) if f.severity == "error"]
        assert errors == []


def test_a_config_without_an_sm_count_gets_what_runs_unset_not_the_tuned_one():
    """Megatron-Core gave HybridEP 16 SMs unless told through 0.17 (TransformerConfig.moe_hybridep_num_sms); from 0.18
    it leaves the count to HybridEP, 24 where the EP group is one NVLink domain and 8 where it spans several (DeepEP
    hybrid-ep csrc/hybrid_ep/config.cuh:315); Bridge's perf scripts ask for 32. A config read back keeps what it says,
    and what runs unset where it is silent."""
    from moetune.configio.release_context import reading

    base = {"cluster.num_gpus": 16, "cluster.gpu": "h100", "model.expert_model_parallel_size": 8,
            "model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": "hybridep"}
    assert from_config(base)[2].num_sms == 24  # EP 8 in one 8-GPU node
    assert from_config({**base, "model.expert_model_parallel_size": 16})[2].num_sms == 8  # over two nodes
    with reading("0.17"):
        assert from_config(base)[2].num_sms == 16
    assert from_config({**base, "model.moe_hybridep_num_sms": 32})[2].num_sms == 32
    assert from_config({**base, "model.moe_flex_dispatcher_num_sms": 20})[2].num_sms == 20


def test_a_zero_sm_count_in_a_config_is_an_error_not_the_default():
    config = {"cluster.num_gpus": 8, "model.expert_model_parallel_size": 8, "model.moe_token_dispatcher_type": "flex",
              "model.moe_flex_dispatcher_backend": "hybridep", "model.moe_hybridep_num_sms": 0}
    with pytest.raises(MoetuneError, match=r"flex_num_sms \(0\)"):
        from_config(config)


@pytest.mark.parametrize(("model", "gpus", "seq", "exchanges"), [
    ("deepseek-v3", 256, 131072, {"a2a", "a2a+p2p"}),  # MLA's wide K,V: an all-to-all beats the ring
    ("gpt-oss-120b", 64, 32768, {"a2a"}),  # attention sinks: TE runs CP only over a2a
])
def test_long_context_plans_name_their_cp_exchange_and_pass_check(model, gpus, seq, exchanges, tmp_path):
    """A plan at long context writes model.cp_comm_type (and a2a+p2p's hierarchical_context_parallel_sizes, whose
    product is CP), reads it back as planned, and passes the rules and Megatron-Core's own checks."""
    result = plan(load_model(model), load_gpu("h100"), gpus, Workload(seq_length=seq, global_batch_size=64), top=2)
    for est in result.results:
        assert est.layout.cp > 1 and est.knobs.cp_comm_type in exchanges
        path = tmp_path / "overrides.txt"
        path.write_text(emit_all(to_config(est))["overrides.txt"])
        config = load_config([path], gpu="h100", gpus=gpus)
        assert config["model.cp_comm_type"] == est.knobs.cp_comm_type
        sizes = config.get("model.hierarchical_context_parallel_sizes")
        assert (sizes is not None) == (est.knobs.cp_comm_type == "a2a+p2p")
        assert sizes is None or sizes[0] * sizes[1] == est.layout.cp
        _, _, knobs = from_config(config)
        assert (knobs.cp_comm_type, knobs.hcp_a2a_size) == (est.knobs.cp_comm_type, est.knobs.hcp_a2a_size)
        errors = [f.rule for f in evaluate(config, derive(config)) + mcore_findings(config) if f.severity == "error"]
        assert errors == []


def test_overrides_on_a_recipe_turn_off_what_the_plan_leaves_off(tmp_path):
    """Bridge's DeepSeek-V3 GB200 recipe sets VPP 4, a layout list and selective recompute. A plan with none of
    them (PP 8 without VPP, a re-split string, no recompute), applied over it, must clear them: a dropped None
    would leave the recipe's recompute running and its VPP beside a string Megatron-Core derives VPP 1 from."""


    text = "Et*8|(t*8|)*5t*9|t*4mL"
    lay = Layout(world_size=256, pp=8, ep=32, pipeline_layout=text)
    knobs = replace(Knobs(precision="mxfp8", dispatcher="hybridep"), recompute="none")
    est = estimate(load_model("deepseek-v3"), load_gpu("gb200"), lay,
                   Workload(seq_length=4096, micro_batch_size=1, global_batch_size=2048), knobs)
    (tmp_path / "overrides.txt").write_text(emit_all(to_config(est))["overrides.txt"])
    recipe = Path(__file__).resolve().parents[1] / "fixtures" / "bridge" / "deepseek_v3_pretrain_256gpu_gb200_bf16.yaml"
    config = load_config([recipe, tmp_path / "overrides.txt"], gpu="gb200", gpus=256)
    assert config["model.virtual_pipeline_model_parallel_size"] is None
    assert config["model.recompute_granularity"] is None and config["model.pipeline_model_parallel_layout"] == text
    assert from_config(config)[0].pipeline_layout == text and from_config(config)[2].recompute == "none"


def test_megatron_lm_args_carry_vpp_in_the_layout_string_only(tmp_path):
    """Megatron-LM refuses --num-virtual-stages-per-pipeline-rank beside --pipeline-model-parallel-layout and derives
    VPP from the string (arguments.py validate_args); emit writes the string alone and check reads VPP back."""
    result = plan(load_model("deepseek-v3"), load_gpu("gb200"), 256, Workload(seq_length=4096, global_batch_size=4096),
                  top=1, fixed={"pp": 4, "vpp": 4})
    est = result.results[0]
    args = emit_all(to_config(est))["megatron_lm_args.txt"]
    assert "--pipeline-model-parallel-layout" in args and "--num-virtual-stages-per-pipeline-rank" not in args
    (tmp_path / "args.txt").write_text(args)
    back = load_config([tmp_path / "args.txt"], gpu="gb200", gpus=256)
    assert back["model.virtual_pipeline_model_parallel_size"] == 4
    both = args + "\n--num-virtual-stages-per-pipeline-rank 4\n"
    (tmp_path / "both.txt").write_text(both)
    with pytest.raises(MoetuneError, match="sets the virtual pipeline size itself"):
        load_config([tmp_path / "both.txt"], gpu="gb200", gpus=256)


def test_full_iteration_plans_carry_static_expert_shapes():
    """A full-iteration graph captures MoE layers only with static expert shapes: the plan takes them from HybridEP
    with Bridge's full-iteration settings (rank budget 1.5, paged stash, TE op fuser), never from DeepEP (force-balanced
    counts still vary); any other plan unsets the budget a recipe may carry, which would drop tokens."""
    spec, gpu, wl = load_model("deepseek-v3"), load_gpu("h100"), Workload(seq_length=4096, global_batch_size=8192)
    result = plan(spec, gpu, 1024, wl, top=20, routing="force-balance")
    full = [e for e in result.results if "full_iteration" in e.knobs.cuda_graph_scope]
    assert full and all(e.knobs.dispatcher == "hybridep" for e in full)
    config = to_config(full[0])
    assert (config["model.moe_expert_rank_capacity_factor"], config["model.moe_paged_stash"],
            config["model.use_transformer_engine_op_fuser"]) == (1.5, True, True)
    scoped = next(e for e in result.results if "full_iteration" not in e.knobs.cuda_graph_scope)
    config = to_config(scoped)
    assert config["model.moe_expert_rank_capacity_factor"] is None and config["model.moe_paged_stash"] is False
    deepep = replace(full[0].knobs, dispatcher="deepep", flex_num_sms=None)
    findings = evaluate(to_config(estimate(spec, gpu, full[0].layout, wl, deepep)), context="explain")
    assert "cudagraph.full_iteration_static_experts" in {f.rule for f in findings if f.severity == "error"}


# Megatron-Core's asserts on the per-rank budget (transformer_config.py __post_init__ @core_v0.18.0-core_v0.19.0): a
# full-iteration plan's settings, broken one way each, and the fix its rule gives back
BUDGET_BREAKS = [
    ("dispatcher.rank_capacity_needs_op_fuser", "model.use_transformer_engine_op_fuser=false",
     {"model.use_transformer_engine_op_fuser": True}),
    ("dispatcher.rank_capacity_needs_hybridep", "model.moe_flex_dispatcher_backend=deepep",
     {"model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": "hybridep",
      "model.use_transformer_engine_op_fuser": True}),
    ("dispatcher.paged_stash_needs_rank_capacity", "model.moe_expert_rank_capacity_factor=null",
     {"model.moe_expert_rank_capacity_factor": 1.5, "model.use_transformer_engine_op_fuser": True}),
]


@lru_cache(maxsize=1)
def _full_iteration_plan():
    wl = Workload(seq_length=4096, global_batch_size=4096)
    result = plan(load_model("deepseek-v3"), load_gpu("gb200"), 256, wl, top=2, routing="force-balance")
    full = [e for e in result.results if "full_iteration" in e.knobs.cuda_graph_scope]
    assert full
    return emit_all(to_config(full[0]))


@pytest.mark.parametrize(("rule", "broken", "fix"), BUDGET_BREAKS)
@pytest.mark.parametrize("emitted", ["overrides.txt", "megatron_lm_args.txt"])
def test_full_iteration_plans_pass_the_rank_budget_rules_and_each_break_has_a_clearing_fix(rule, broken, fix, emitted,
                                                                                          tmp_path):
    """The plan's full-iteration settings (HybridEP, rank budget 1.5, paged stash, TE op fuser, as Bridge's recipes)
    pass Megatron-Core's budget asserts; each one broken is an error whose fix gives back a config with no errors."""
    path = tmp_path / emitted
    path.write_text(_full_iteration_plan()[emitted])
    config = load_config([path], gpu="gb200", gpus=256)
    assert config["model.moe_expert_rank_capacity_factor"] == 1.5
    assert not [f.rule for f in evaluate(config, derive(config)) if f.severity == "error"]
    off = load_config([path], sets=[broken], gpu="gb200", gpus=256)
    finding = next(f for f in evaluate(off, derive(off)) if f.rule == rule)
    assert finding.severity == "error" and finding.fix == fix
    fixed = {**off, **fix}
    assert not [f.rule for f in evaluate(fixed, derive(fixed)) if f.severity == "error"]


def test_a_budget_on_a_scoped_plan_is_refused_off_hybridep_and_its_fix_unsets_it(tmp_path):
    """Without a full-iteration graph the budget's fix is no budget and no paged stash (Megatron-Core refuses the
    stash without it), which gives the plan back clean; a plan without HybridEP cannot carry the budget."""
    result = plan(load_model("qwen3-30b-a3b"), load_gpu("h100"), 16, Workload(seq_length=4096, global_batch_size=1024),
                  top=1)
    est = result.results[0]
    assert "full_iteration" not in est.knobs.cuda_graph_scope and est.knobs.dispatcher != "hybridep"
    path = tmp_path / "overrides.txt"
    path.write_text(emit_all(to_config(est))["overrides.txt"])
    budget = load_config([path], sets=["model.moe_expert_rank_capacity_factor=1.5", "model.moe_paged_stash=true"],
                         gpu="h100", gpus=16)
    finding = next(f for f in evaluate(budget, derive(budget)) if f.rule == "dispatcher.rank_capacity_needs_hybridep")
    assert finding.severity == "error"
    assert finding.fix == {"model.moe_expert_rank_capacity_factor": None, "model.moe_paged_stash": False}
    fixed = {**budget, **finding.fix}
    assert not [f.rule for f in evaluate(fixed, derive(fixed)) if f.severity == "error"]


def test_a_paged_stash_on_a_scoped_plan_without_a_budget_is_refused_and_its_fix_turns_it_off(tmp_path):
    """Megatron-Core refuses moe_paged_stash without a per-rank budget (transformer_config.py __post_init__
    @core_v0.18.0-core_v0.19.0); off a full-iteration HybridEP graph the fix is the stash off, the plan as it was."""
    result = plan(load_model("qwen3-30b-a3b"), load_gpu("h100"), 16, Workload(seq_length=4096, global_batch_size=1024),
                  top=1)
    path = tmp_path / "overrides.txt"
    path.write_text(emit_all(to_config(result.results[0]))["overrides.txt"])
    stash = load_config([path], sets=["model.moe_paged_stash=true"], gpu="h100", gpus=16)
    finding = next(f for f in evaluate(stash, derive(stash)) if f.rule == "dispatcher.paged_stash_needs_rank_capacity")
    assert finding.severity == "error" and finding.fix == {"model.moe_paged_stash": False}
    fixed = {**stash, **finding.fix}
    assert not [f.rule for f in evaluate(fixed, derive(fixed)) if f.severity == "error"]
