"""`moetune check`: the JSON contract, the table, and exit codes 0 (no errors) / 1 (errors)."""

import json

import pytest
from rule_cases import FIXTURES

from moetune.cli.main import main
from moetune.errors import MoetuneError

QWEN = str(FIXTURES / "qwen3_30b_a3b_pretrain_16gpu_h100_bf16.yaml")


def run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_recipe_passes_with_json_contract(capsys):
    code, out, _ = run(["check", QWEN, "--gpu", "h100", "--gpus", "16", "--no-mcore", "--json"], capsys)
    data = json.loads(out)
    assert code == 0
    assert set(data) == {"findings", "config"}
    for f in data["findings"]:
        assert set(f) == {"rule", "severity", "message", "fix", "source", "fix_withdrawn"}
        assert f["severity"] in ("warning", "info")
    assert data["config"]["model.expert_model_parallel_size"] == 16


def test_errors_exit_1_and_are_listed_first(capsys):
    args = ["check", QWEN, "--gpu", "h100", "--gpus", "16", "--no-mcore", "--json",
            "--set", "comm_overlap.overlap_moe_expert_parallel_comm=true",
            "--set", "model.moe_shared_expert_overlap=true"]
    code, out, err = run(args, capsys)
    data = json.loads(out)
    assert code == 1 and "rule error" in err
    assert data["findings"][0]["severity"] == "error"
    flagged = {f["rule"]: f for f in data["findings"]}
    assert flagged["ep_overlap.shared_expert_overlap"]["fix"] == {"model.moe_shared_expert_overlap": False}
    assert flagged["ep_overlap.shared_expert_overlap"]["source"].startswith("seeds/003")


def test_megatron_lm_args_and_table(capsys):
    code, out, _ = run(["check", "--mlm-args", "--num-experts 8 --expert-model-parallel-size 8 --bf16 "
                        "--moe-token-dispatcher-type alltoall --moe-grouped-gemm --moe-router-dtype fp32 --manual-gc",
                        "--gpu", "h100", "--gpus", "8", "--no-mcore"], capsys)
    assert code == 0
    assert "severity" in out and "0 error(s)" in out


def test_context_option(capsys):
    base = ["check", "--set", "model.num_moe_experts=8", "--set", "mixed_precision.bf16=true", "--no-mcore", "--json"]
    check = {f["rule"] for f in json.loads(run(base, capsys)[1])["findings"]}
    diagnose = {f["rule"] for f in json.loads(run([*base, "--context", "diagnose"], capsys)[1])["findings"]}
    assert "dispatcher.force_balance_benchmark" in diagnose - check


def test_bridge_only_rules_leave_megatron_lm_launches_alone(capsys):
    """Local per-layer CUDA graphs: Megatron Bridge refuses them (utils/cuda_graph.py), Megatron-LM runs them
    (Megatron-LM's own functional tests launch --cuda-graph-impl local without a scope)."""
    common = ["--gpu", "h100", "--gpus", "8", "--no-mcore", "--json"]
    mlm = "--tensor-model-parallel-size 1 --num-layers 4 --hidden-size 512 --num-attention-heads 8 " \
          "--bf16 --cuda-graph-impl local"
    code, out, _ = run(["check", "--mlm-args", mlm, *common], capsys)
    data = json.loads(out)
    assert code == 0 and data["config"]["cluster.launcher"] == "megatron-lm"
    assert "cudagraph.local_scoped" not in {f["rule"] for f in data["findings"]}
    code, out, _ = run(["check", "--set", "model.cuda_graph_impl=local", "--set", "model.num_layers=4", *common],
                       capsys)
    assert code == 1 and "cudagraph.local_scoped" in {f["rule"] for f in json.loads(out)["findings"]}


def test_a_null_flex_backend_reads_as_bridge_writes_it(tmp_path, capsys):
    """Bridge's fallback (flex_dispatcher_backend.py) and its Qwen3-235B H100 perf recipes leave the backend None beside
    the alltoall dispatcher; a saved config holding it had failed to read (check audit). Beside flex it is an error."""
    config = tmp_path / "c.yaml"
    config.write_text("model:\n  num_moe_experts: 64\n  expert_model_parallel_size: 8\n"
                      "  moe_token_dispatcher_type: alltoall\n  moe_flex_dispatcher_backend: null\n")
    code, out, _ = run(["check", str(config), "--gpu", "h100", "--gpus", "8", "--json"], capsys)
    assert code == 0 and not [f for f in json.loads(out)["findings"] if f["severity"] == "error"]
    code, out, _ = run(["check", str(config), "--gpu", "h100", "--gpus", "8", "--set",
                        "model.moe_token_dispatcher_type=flex", "--json"], capsys)
    assert code == 1 and "dispatcher.flex_without_backend" in {f["rule"] for f in json.loads(out)["findings"]}


def test_a_bridge_config_silent_on_expert_tp_runs_etp_1(capsys):
    """Bridge's finalize takes ETP 1 under EP > 1 where the config is silent; check had taken TP and reported 'not
    divisible by ETP*EP*PP = 32' for TP2 x EP16 on 16 GPUs (check audit). Megatron-LM arguments keep Megatron-Core's
    ETP = TP."""
    sets = ["model.tensor_model_parallel_size=2", "model.sequence_parallel=true", "model.expert_model_parallel_size=16",
            "model.num_moe_experts=128"]
    code, out, _ = run(["check", *[a for s in sets for a in ("--set", s)], "--gpu", "h100", "--gpus", "16", "--json"],
                       capsys)
    assert "scale.world_size_experts" not in {f["rule"] for f in json.loads(out)["findings"]}
    mlm = "--tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 16 --num-experts 128"
    code, out, _ = run(["check", "--mlm-args", mlm, "--gpu", "h100", "--gpus", "16", "--json"], capsys)
    assert "scale.world_size_experts" in {f["rule"] for f in json.loads(out)["findings"]}


def test_a_fix_that_would_trip_another_rule_is_withdrawn_and_says_which():
    """EP crossing the NVLink domain without overlap, beside a TE graph of the whole (drop-and-pad) MoE layer: the
    overlap ep_overlap.candidate suggests is refused beside that graph (ep_overlap.graph_scope_moe), so its fix is
    withdrawn and named instead of printed (review of the explain audit's fixes)."""
    from moetune.configio import load_config
    from moetune.rules import evaluate
    from moetune.rules.engine import vet_fixes
    config = load_config(sets=["model.num_moe_experts=64", "model.moe_token_dispatcher_type=alltoall",
                               "mixed_precision.bf16=true", "model.expert_model_parallel_size=16",
                               "model.moe_expert_capacity_factor=1.0", "model.moe_pad_expert_input_to_capacity=true",
                               "model.cuda_graph_impl=transformer_engine", "model.cuda_graph_scope=[attn,moe]"],
                         gpu="h100", gpus=32)
    found = evaluate(config, context="explain")
    raw = {f.rule: f for f in found}["ep_overlap.candidate"]
    assert raw.fix  # what the table offers, unvetted
    vetted = {f.rule: f for f in vet_fixes(config, found, context="explain")}["ep_overlap.candidate"]
    assert vetted.fix == {} and "ep_overlap.graph_scope_moe" in vetted.fix_withdrawn


@pytest.mark.parametrize(("rule", "sets", "trips"), [
    ("ep_overlap.candidate", ["model.pipeline_model_parallel_size=2"], "ep_overlap.pp_needs_vpp"),
    ("ep_overlap.candidate", ["model.recompute_granularity=full", "model.recompute_method=uniform",
                              "model.recompute_num_layers=1"], "ep_overlap.full_recompute"),
    ("ep_overlap.candidate", ["model.recompute_granularity=selective", "model.recompute_modules=[moe]"],
     "ep_overlap.moe_recompute"),
    ("ep_overlap.candidate", ["model.mtp_num_layers=2"], "ep_overlap.mtp_layers"),
    ("cudagraph.dropless_start_scope", ["model.cuda_graph_impl=transformer_engine", "model.cuda_graph_scope=[attn]",
                                        "model.recompute_granularity=selective", "model.recompute_modules=[moe]"],
     "cudagraph.moe_recompute_router"),
])
def test_vet_fixes_is_the_one_check_of_an_advices_fix(rule, sets, trips):
    """ep_overlap.candidate and cudagraph.dropless_start_scope had restated, in their own conditions, the errors their
    fixes trip beside a PP without VPP, a full or 'moe' recompute, two MTP layers (the EP overlap) and a 'moe'
    recompute (a router graph); vet_fixes asks the table itself, so the advice stands and its fix is withdrawn with
    the rule it would trip named (the guards had hidden the advice, and missed the 'moe' graph scope)."""
    from moetune.configio import load_config
    from moetune.rules import evaluate
    from moetune.rules.engine import vet_fixes
    config = load_config(sets=["model.num_moe_experts=64", "model.moe_token_dispatcher_type=alltoall",
                               "mixed_precision.bf16=true", "model.expert_model_parallel_size=16", *sets],
                         gpu="h100", gpus=32)
    found = {f.rule: f for f in vet_fixes(config, evaluate(config, context="explain"), context="explain")}
    assert trips not in {r for r, f in found.items() if f.severity == "error"}  # the config alone runs
    assert found[rule].fix == {} and trips in found[rule].fix_withdrawn


def test_vpp_two_is_not_offered_where_it_breaks_the_split():
    """scale.pp_without_vpp offers VPP 2 only where the split holds it: not an odd uneven first stage, not a hybrid
    (its stages come from the pattern, and Bridge refuses VPP on one)."""
    from moetune.configio import load_config
    from moetune.rules import derive
    base = ["model.num_layers=61", "model.pipeline_model_parallel_size=8"]
    uneven = base + ["model.num_layers_in_first_pipeline_stage=7", "model.num_layers_in_last_pipeline_stage=6"]
    hybrid = ["model.num_layers=48", "model.pipeline_model_parallel_size=2", "model.hybrid_layer_pattern=MEM*E"]
    assert derive(load_config(sets=uneven, gpu="h100", gpus=64))["vpp2_runs"] is False
    assert derive(load_config(sets=["model.num_layers=64", "model.pipeline_model_parallel_size=8"], gpu="h100",
                              gpus=64))["vpp2_runs"] is True
    assert derive(load_config(sets=hybrid, gpu="h100", gpus=64))["vpp2_runs"] is False


def test_recommended_backend_is_the_planners_default(tmp_path):
    """The rules' recommended backend is the platform's default dispatcher (specs/platform.py), so check and explain
    agree: DeepEP on HGX B200, HybridEP on a cluster file that puts B200s in a 72-GPU NVLink domain (the seeds'
    NVL72 row), none past the job's domain on GB200 (HybridEP cannot span it), none on A100 (alltoall)."""
    from moetune.configio import load_config
    from moetune.rules import derive
    moe = ["model.num_moe_experts=128", "model.expert_model_parallel_size=16"]
    rack = tmp_path / "b200_nvl72.toml"
    rack.write_text('gpu = "b200"\nnvlink_domain = 72\ngpus_per_node = 4\n')
    assert derive(load_config(sets=moe, gpu="b200", gpus=64))["recommended_backend"] == "deepep"
    assert derive(load_config(sets=moe, gpu=str(rack), gpus=64))["recommended_backend"] == "hybridep"
    assert derive(load_config(sets=moe, gpu="gb200", gpus=64))["recommended_backend"] == "hybridep"
    wide = ["model.num_moe_experts=128", "model.expert_model_parallel_size=128"]
    assert derive(load_config(sets=wide, gpu="gb200", gpus=256))["recommended_backend"] is None
    assert derive(load_config(sets=moe, gpu="a100", gpus=64))["recommended_backend"] is None


def test_grad_reduce_overlap_reads_the_optimizer_as_bridge_syncs_it():
    """overlap.grad_reduce asks the distributed optimizer as the estimate reads it (configio/finalize.py): a config
    that sets only the optimizer's switch, or neither (Adam's recipe turns it on), is advised; one that turns both off
    is not (it had read ddp's field alone, so only the first config below was advised)."""
    from moetune.configio import load_config
    from moetune.rules import evaluate
    moe = ["model.num_moe_experts=64", "ddp.overlap_grad_reduce=false"]

    def advised(*sets):
        return "overlap.grad_reduce" in {f.rule for f in evaluate(load_config(sets=moe + list(sets), gpu="h100",
                                                                              gpus=8))}
    assert advised("ddp.use_distributed_optimizer=true")
    assert advised("optimizer.use_distributed_optimizer=true")
    assert advised()
    assert not advised("ddp.use_distributed_optimizer=false", "optimizer.use_distributed_optimizer=false")
    assert not advised("optimizer.optimizer=muon")  # Muon's recipe leaves it off: no reduce-scatter to overlap


def test_the_communication_walls_dispatcher_fix_is_one_that_runs():
    """wall.communication names the flex backend that spans the EP group: HybridEP inside a GB200 domain, alltoall at
    EP 1 and past the job's domain, where DeepEP (its old fallback) is one Bridge refuses on Grace-Blackwell."""
    from moetune.configio import load_config
    from moetune.rules import evaluate

    def fix(gpu, ep):
        config = load_config(sets=["model.num_moe_experts=128", f"model.expert_model_parallel_size={ep}"], gpu=gpu,
                             gpus=256)
        found = evaluate(config, context="diagnose", derived={"dominant_wall": "communication"})
        return next(f.fix for f in found if f.rule == "wall.communication")["model.moe_token_dispatcher_type"]
    assert fix("gb200", 16) == "flex" and fix("h100", 8) == "flex"
    assert fix("gb200", 1) == "alltoall" and fix("gb200", 128) == "alltoall"


# One layout per config-only rule that says what the model's layout check says: (GPUs, overrides); Qwen3-30B-A3B's
# 48 layers and 128 experts given, so the config alone trips the rule
SAID_BY_LAYOUT = {
    "scale.world_size_attention": (12, ["model.tensor_model_parallel_size=2", "model.context_parallel_size=4"]),
    "scale.world_size_experts": (16, ["model.expert_model_parallel_size=32"]),
    "pipeline.layers_divisible": (16, ["model.pipeline_model_parallel_size=4",
                                       "model.virtual_pipeline_model_parallel_size=5"]),
    "sp.seq_divisible_by_tp": (16, ["model.seq_length=4097", "model.tensor_model_parallel_size=2"]),
    "sp.seq_divisible_by_tp/cp": (16, ["model.seq_length=4100", "model.tensor_model_parallel_size=4",
                                       "model.context_parallel_size=2"]),  # seq/CP 2050 over TP 4
    # a 4-stage string over PP 2 is VPP 2 (Megatron-Core's own refusal of it is left out beside layout.illegal too)
    "pipeline.vpp_matches_layout": (16, ["model.pipeline_model_parallel_size=2", "model.expert_model_parallel_size=8",
                                         "model.pipeline_model_parallel_layout=Et*12|t*12|t*12|t*12L",
                                         "model.virtual_pipeline_model_parallel_size=3"]),
    # 5 stages over PP 2 (Megatron-Core's own assert, PipelineParallelLayerLayout, is left out beside it too)
    "pipeline.layout_stages_divisible": (16, ["model.pipeline_model_parallel_size=2",
                                              "model.expert_model_parallel_size=8",
                                              "model.pipeline_model_parallel_layout=Et*12|t*9|t*9|t*9|t*9L"]),
    "batch.gbs_divisible": (16, ["model.expert_model_parallel_size=8", "train.global_batch_size=100",
                                 "train.micro_batch_size=1"]),  # DP 16
    "longctx.cp_seq_divisible": (16, ["model.seq_length=4100", "model.context_parallel_size=8",
                                      "model.expert_model_parallel_size=8"]),  # 2 x CP 16
    # 4,100 tokens reach each FP8 GEMM at TP 1 (Transformer Engine asserts a multiple of 8)
    "precision.gemm_shapes": (16, ["model.seq_length=4100", "train.micro_batch_size=1", "mixed_precision.fp8=e4m3",
                                   "mixed_precision.fp8_recipe=blockwise", "model.expert_model_parallel_size=8"]),
    # an a2a group of 3 in CP 4: the sizes do not multiply to CP (Megatron-Core's parallel_state.py asserts it)
    "cp.hcp_sizes": (16, ["model.context_parallel_size=4", "model.cp_comm_type=a2a+p2p", "model.seq_length=8192",
                          "model.hierarchical_context_parallel_sizes=[3,2]", "model.expert_model_parallel_size=8"]),
    # FP8 weights under tensorwise scaling beside the optimizer's CPU offload (Megatron-LM validate_args)
    "precision.fp8_params_with_optimizer_offload": (16, [
        "mixed_precision.fp8=hybrid", "mixed_precision.fp8_recipe=tensorwise", "mixed_precision.fp8_param_gather=true",
        "optimizer.optimizer_cpu_offload=true", "optimizer.optimizer_offload_fraction=0.5",
        "optimizer.use_precision_aware_optimizer=true", "model.expert_model_parallel_size=8"]),
}


def _check_errors(capsys, gpus: int, sets: list, *more) -> tuple[dict, set]:
    sets = sets + ["model.num_layers=48", "model.num_moe_experts=128", "model.sequence_parallel=true"]
    code, out, _ = run(["check", *[a for s in sets for a in ("--set", s)], "--gpu", "h100", "--gpus", str(gpus),
                        "--json", *more], capsys)
    found = {f["rule"]: f for f in json.loads(out)["findings"]}
    return found, {r for r, f in found.items() if f["severity"] == "error"}


@pytest.mark.parametrize("case", SAID_BY_LAYOUT)
def test_layout_error_is_one_finding_with_the_rule_saying_the_same(case, capsys):
    """Config-only the rule fires; with --model the layout error says it with the model's numbers and the rule is
    left out (fuzz audit: one finding for one fault)."""
    rule, (gpus, sets) = case.split("/")[0], SAID_BY_LAYOUT[case]
    assert rule in _check_errors(capsys, gpus, sets)[1]
    assert _check_errors(capsys, gpus, sets, "--model", "qwen3-30b-a3b")[1] == {"layout.illegal"}


def test_layout_errors_name_the_rules_they_repeat_by_id():
    """The dedupe reads the error's rule ids, which are the table's, not its wording."""
    from moetune.layout.layout import Layout
    from moetune.layout.pipeline import pipeline_chunks
    from moetune.layout.validate import Workload, validate_workload
    from moetune.rules import load_table

    said = []
    for build in (lambda: Layout(world_size=12, tp=2, cp=4), lambda: Layout(world_size=16, ep=32),
                  lambda: pipeline_chunks(Layout(world_size=16, pp=4, vpp=5), 48, 0),
                  lambda: validate_workload(Layout(world_size=16, tp=2), Workload(seq_length=4097))):
        with pytest.raises(MoetuneError) as err:
            build()
        said += err.value.same_as
    assert said == ["scale.world_size_attention", "scale.world_size_experts", "pipeline.layers_divisible",
                    "sp.seq_divisible_by_tp"]
    assert set(said) <= {r.id for r in load_table().rules}


def test_a_reworded_layout_error_still_leaves_its_rule_out(capsys, monkeypatch):
    """Whatever the layout error's words, the rule ids it carries decide what check leaves out."""
    def refuse(*_args):
        raise MoetuneError("the expert ranks do not tile the job", same_as=("scale.world_size_experts",))

    monkeypatch.setattr("moetune.planner.memory_facts.config_memory_facts", refuse)
    found, errors = _check_errors(capsys, *SAID_BY_LAYOUT["scale.world_size_experts"], "--model", "qwen3-30b-a3b")
    assert errors == {"layout.illegal"} and found["layout.illegal"]["message"] == "the expert ranks do not tile the job"


def test_nvfp4_weights_without_nvfp4_are_said_once(capsys):
    """fp4_param_gather on a BF16 config: Megatron-LM and Megatron-Core refuse it; check says it once, with or without
    --model (the estimate reads a config's NVFP4 weights under NVFP4 alone, so no layout error repeats it)."""
    sets = ["mixed_precision.fp4_param_gather=true", "model.expert_model_parallel_size=8"]
    for more in ((), ("--model", "qwen3-30b-a3b")):
        errors = _check_errors(capsys, 16, sets, *more)[1]
        assert "precision.fp4_params_without_fp4" in errors and "layout.illegal" not in errors


def test_full_recompute_without_its_method_is_said_once(capsys):
    """Without --model the rule says it (a warning: a Bridge recipe may set the method); with --model Megatron-Core's
    own refusal of it ("recompute_method must be") names the rule and is left out; a Megatron-LM launch, whose
    absent flags are Megatron-LM's defaults, makes it an error."""
    found, _ = _check_errors(capsys, 16, ["model.recompute_granularity=full"])
    assert found["fit.full_recompute_needs_method"]["severity"] == "warning"
    found, _ = _check_errors(capsys, 16, ["model.recompute_granularity=full"], "--model", "qwen3-30b-a3b")
    assert "fit.full_recompute_needs_method" in found and "mcore.transformer_config" not in found
    code, out, _ = run(["check", "--mlm-args", "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 "
                        "--recompute-granularity full", "--gpu", "h100", "--gpus", "8", "--json"], capsys)
    rules = {f["rule"]: f["severity"] for f in json.loads(out)["findings"]}
    assert code == 1 and rules["fit.full_recompute_needs_method"] == "error"
