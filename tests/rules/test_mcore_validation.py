"""Megatron-Core's own TransformerConfig validation, run by `moetune check` when megatron-core is installed."""

import pytest
from rule_cases import FIXTURES

from moetune.configio import load_config
from moetune.rules.mcore import mcore_findings

pytest.importorskip("megatron.core.transformer.transformer_config")

QWEN = FIXTURES / "qwen3_30b_a3b_pretrain_16gpu_h100_bf16.yaml"


@pytest.fixture(scope="module")
def qwen():
    return load_config([QWEN], gpu="h100", gpus=16)


def test_real_recipes_pass_megatron_core(qwen):
    deepseek = load_config([FIXTURES / "deepseek_v3_pretrain_256gpu_gb200_bf16.yaml"], gpu="gb200", gpus=256)
    for config in (qwen, deepseek):
        assert [f for f in mcore_findings(config) if f.severity == "error"] == []


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"comm_overlap.overlap_moe_expert_parallel_comm": True, "model.moe_shared_expert_overlap": True},
     "moe_shared_expert_overlap"),
    ({"model.tensor_model_parallel_size": 3}, "tensor_model_parallel_size"),
])
def test_megatron_core_errors_become_findings(qwen, overrides, needle):
    findings = mcore_findings({**qwen, **overrides})
    errors = [f for f in findings if f.rule == "mcore.transformer_config"]
    assert len(errors) == 1 and errors[0].severity == "error"
    assert needle in errors[0].message


# A layout string of 4 stages over PP 2 (VPP 2), and one of 5 stages, which PP 2 does not divide
_PP2 = ("model.pipeline_model_parallel_size=2", "model.expert_model_parallel_size=8")


@pytest.mark.parametrize(("sets", "same_as"), [
    (["model.tensor_model_parallel_size=3"], ("shape.heads_divisible_by_tp",)),  # 32 heads, 4 groups: heads first
    (["model.tensor_model_parallel_size=4", "model.num_query_groups=6"], ("shape.query_groups_vs_tp",)),
    (["mixed_precision.fp8_param_gather=true"], ("precision.fp8_params_without_fp8",)),
    (["model.recompute_granularity=full"], ("fit.full_recompute_needs_method",)),
    (["model.recompute_granularity=full", "model.recompute_method=uniform"], ("fit.full_recompute_needs_method",)),
    (["model.recompute_granularity=selective", "model.recompute_modules=[foo]"], ("fit.unknown_recompute_module",)),
    ([*_PP2, "model.pipeline_model_parallel_layout=Et*12|t*12|t*12|t*12L",
      "model.virtual_pipeline_model_parallel_size=3"], ("pipeline.vpp_matches_layout",)),
    ([*_PP2, "model.pipeline_model_parallel_layout=Et*12|t*9|t*9|t*9|t*9L"], ("pipeline.layout_stages_divisible",)),
    (["model.cuda_graph_impl=transformer_engine", "model.cuda_graph_scope=[full_iteration]"],
     ("cudagraph.full_iteration_scope_te",)),
    # faults no rule's change reaches: Megatron-Core's alone, or before the one a rule says (gated delta-net's
    # linear_attention_freq is checked before the recompute method and the FP8 weights)
    (["comm_overlap.overlap_moe_expert_parallel_comm=true", "model.moe_shared_expert_overlap=true"], ()),
    (["model.cuda_graph_impl=transformer_engine", "model.cuda_graph_scope=[moe,moe_router]"], ()),
    (["model.experimental_attention_variant=gated_delta_net", "model.recompute_granularity=full"], ()),
    (["model.experimental_attention_variant=gated_delta_net", "mixed_precision.fp8_param_gather=true"], ()),
])
def test_a_refusal_names_the_rules_that_say_its_fault(sets, same_as):
    """check leaves Megatron-Core's refusal out by these ids where their rule says the fault (cli/check_cmd.py
    said_once): the rules whose change gets Megatron-Core past the check that refused; a refusal no rule's change
    reaches names none, and is said beside the rule's finding."""
    from moetune.cli.check_cmd import check_findings, said_once
    from moetune.rules import load_table

    config = load_config([QWEN], sets=sets, gpu="h100", gpus=16)
    [error] = [f for f in mcore_findings(config) if f.rule == "mcore.transformer_config"]
    assert error.same_as == same_as and set(same_as) <= {r.id for r in load_table().rules}
    assert "same_as" not in error.as_dict()
    said = {f.rule for f in said_once(check_findings(config), None)}
    assert set(same_as) <= said and ("mcore.transformer_config" in said) == (not same_as)


def test_the_refusal_is_matched_by_its_check_not_its_words():
    """A Megatron-Core that words its refusals otherwise (a stand-in TransformerConfig with the heads and query-group
    checks of transformer_config.py __post_init__, in that order) names the same rules: TP 3 under 32 heads is the
    heads fault though the 4 groups fail too, TP 4 under 6 groups the groups' alone."""
    from dataclasses import dataclass

    from moetune.rules.mcore import _SAME_FAULT, _construct, same_fault

    @dataclass
    class Reworded:
        num_attention_heads: int
        tensor_model_parallel_size: int = 1
        num_query_groups: int | None = None

        def __post_init__(self):
            tp, groups = self.tensor_model_parallel_size, self.num_query_groups or self.num_attention_heads
            if self.num_attention_heads % tp:
                raise ValueError("cannot shard attention")
            if groups % tp and tp % groups:
                raise ValueError("cannot shard attention")  # the same words: the check, not its text, tells them

    def named(**kw):
        return same_fault(Reworded, kw, _construct(Reworded, kw))
    assert named(num_attention_heads=32, tensor_model_parallel_size=3, num_query_groups=4) == \
        ("shape.heads_divisible_by_tp",)
    assert named(num_attention_heads=32, tensor_model_parallel_size=4, num_query_groups=6) == \
        ("shape.query_groups_vs_tp",)
    from moetune.rules import load_table
    assert set(_SAME_FAULT) <= {r.id for r in load_table().rules}


def test_fp8_weights_without_fp8_are_refused_and_the_bf16_fixes_turn_them_off(qwen):
    """Bridge sets TransformerConfig.fp8_param from fp8_param_gather (Megatron-LM from --fp8-param-gather), which
    refuses it without fp8: check had not handed it over and passed a BF16 config with FP8 weights. Rule
    precision.fp8_params_without_fp8 says it (as precision.fp4_params_without_fp4 does NVFP4's), also where
    megatron-core is absent, and Megatron-Core's refusal names it in same_as, so check says the fault once. The rules
    that send an FP8 config to BF16 turn them off with it, so an FP8 preset (fp8_param_gather on) fixed is one that
    runs."""
    from moetune.cli.check_cmd import check_findings, said_once

    def errors(config):
        return {f.rule for f in said_once(check_findings(config), None) if f.severity == "error"}
    for weights in ({"mixed_precision.fp8_param_gather": True}, {"mixed_precision.fp8_param": True}):
        [refusal] = [f for f in mcore_findings({**qwen, **weights}) if f.rule == "mcore.transformer_config"]
        assert refusal.same_as == ("precision.fp8_params_without_fp8",)
        assert errors({**qwen, **weights}) == {"precision.fp8_params_without_fp8"}
    # an A100 has no FP8: precision.fp8_unsupported's fix, applied to a tensorwise preset, leaves no error
    fp8 = {**qwen, "cluster.gpu": "a100", "mixed_precision.fp8": "hybrid", "mixed_precision.fp8_recipe": "tensorwise",
           "mixed_precision.fp8_param_gather": True, "model.moe_router_dtype": "fp32"}
    [fix] = [f.fix for f in check_findings(fp8) if f.rule == "precision.fp8_unsupported"]
    assert fix["mixed_precision.fp8_param_gather"] is False and not errors({**fp8, **fix})


@pytest.mark.parametrize(("param", "gather"), [(True, False), (False, True)])
def test_fp8_param_and_its_gather_disagreeing_mean_what_the_estimate_reads(qwen, param, gather):
    """Bridge's MixedPrecisionConfig copies each of fp8_param / fp8_param_gather onto the other and assigns the
    gather last, so the gather wins (configio/finalize.py quantized_params): check had handed Megatron-Core fp8_param
    first while estimate --config read the gather, one config meaning FP8 weights to one and not the other."""
    from moetune.planner.from_config import from_config

    both = {"mixed_precision.fp8_param": param, "mixed_precision.fp8_param_gather": gather}
    refused = [f for f in mcore_findings({**qwen, **both}) if f.rule == "mcore.transformer_config"]
    assert bool(refused) is gather  # BF16: Megatron-Core refuses FP8 weights, here exactly where the gather is on
    fp8 = {**qwen, **both, "mixed_precision.fp8": "hybrid", "mixed_precision.fp8_recipe": "tensorwise"}
    assert from_config(fp8)[2].fp8_params is gather


def test_skipped_without_architecture():
    findings = mcore_findings(load_config(sets=["model.tensor_model_parallel_size=2"]))
    assert [f.rule for f in findings] == ["mcore.skipped"]


def _overlapped(qwen, **graphs):
    return {**qwen, "comm_overlap.overlap_moe_expert_parallel_comm": True, "comm_overlap.delay_wgrad_compute": True,
            "model.moe_token_dispatcher_type": "alltoall", "model.expert_model_parallel_size": 16, **graphs}


def test_full_iteration_graphs_with_ep_overlap_are_not_an_error(qwen):
    """megatron-core 0.16 refuses any non-TE CUDA graph under EP overlap; Megatron-LM main (what Bridge's GB200/GB300
    full-iteration recipes run) accepts local full-iteration graphs. An info says so, and switching the graph off for
    the rest of the check must not surface delay_wgrad's own dependency on EP overlap as a config error."""
    config = _overlapped(qwen, **{"model.cuda_graph_impl": "local", "model.cuda_graph_scope": ["full_iteration"]})
    findings = mcore_findings(config)
    assert [f for f in findings if f.severity == "error"] == []
    assert any("Megatron-LM main accepts" in f.message for f in findings if f.rule == "mcore.environment")


@pytest.mark.parametrize("scope", ["moe", "mlp"])
def test_te_scoped_moe_or_mlp_graphs_stay_an_error(qwen, scope):
    """Only local (full-iteration) graphs are let through: a TE-scoped moe or mlp graph is refused by every version
    (under EP overlap, and first by its own prerequisites: drop-padding MoE, dense layers)."""
    config = _overlapped(qwen, **{"model.cuda_graph_impl": "transformer_engine", "model.cuda_graph_scope": [scope]})
    errors = [f for f in mcore_findings(config) if f.severity == "error"]
    assert len(errors) == 1 and f"{scope} cuda graph" in errors[0].message


def test_one_mtp_layer_under_ep_overlap_on_pp1_is_a_warning_not_an_error(qwen):
    """megatron-core 0.16 asserts PP > 1 for EP overlap with an MTP layer; core_v0.18.0 released it (Megatron-LM PR
    #4796), so the oracle lets it through with an info and rule ep_overlap.mtp_pp1_needs_mcore_018 warns those on
    older containers. Two MTP layers stay an error in every version."""
    from moetune.rules import evaluate

    config = _overlapped(qwen, **{"model.mtp_num_layers": 1})
    findings = mcore_findings(config)
    assert [f for f in findings if f.severity == "error"] == []
    assert any("Megatron-LM main accepts" in f.message for f in findings if f.rule == "mcore.environment")
    assert "ep_overlap.mtp_pp1_needs_mcore_018" in {f.rule for f in evaluate(config)}
    two = [f for f in mcore_findings(_overlapped(qwen, **{"model.mtp_num_layers": 2})) if f.severity == "error"]
    assert len(two) == 1 and "MTP" in two[0].message


@pytest.mark.parametrize("overrides", [
    # the ModelZoo's DeepEP launches of DeepSeek-V2 run the shared-expert overlap on the flex dispatcher
    {"model.moe_shared_expert_intermediate_size": 1536, "model.moe_shared_expert_overlap": True,
     "model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": "deepep"},
    # DeepSeek-V4's bridge: aux-loss-free expert bias on sqrtsoftplus scores
    {"model.moe_router_score_function": "sqrtsoftplus", "model.moe_router_enable_expert_bias": True},
])
def test_checks_megatron_lm_main_dropped_are_not_errors(qwen, overrides):
    """megatron-core 0.16.1 refuses these; Megatron-LM main (transformer_config.py: "alltoall or flex token
    dispatcher"; expert bias for sigmoid and sqrtsoftplus) accepts them, and NVIDIA's launches run them."""
    assert [f.message for f in mcore_findings({**qwen, **overrides}) if f.severity == "error"] == []


def test_a_graph_scope_message_is_not_mistaken_for_a_missing_library(qwen):
    """'cuda_graph_scope' in Megatron-Core's message names the config, not the machine's CUDA: moe and moe_router
    together stay a config error (transformer_config.py), not an environment info."""
    config = {**qwen, "model.cuda_graph_impl": "transformer_engine", "model.cuda_graph_scope": ["moe", "moe_router"]}
    assert any(f.severity == "error" for f in mcore_findings(config))


def test_what_bridge_finalize_fills_in_is_no_error(qwen):
    """Bridge's TransformerConfig.finalize turns sequence parallelism off at TP 1 (DeepSeek-V3's GB200 recipe keeps
    SP on at TP 1) and takes ETP 1 under EP > 1 where the config is silent (the check audit: both had been reported
    as Megatron-Core errors, the second as an expert mesh that does not cover the job)."""
    assert not [f for f in mcore_findings({**qwen, "model.sequence_parallel": True}) if f.severity == "error"]
    config = {**qwen, "model.tensor_model_parallel_size": 2, "model.expert_model_parallel_size": 16}
    config.pop("model.expert_tensor_parallel_size", None)
    assert not [f for f in mcore_findings(config) if f.severity == "error"]
    from moetune.configio.finalize import expert_tensor_parallel_size

    assert expert_tensor_parallel_size(config) == 1
    assert expert_tensor_parallel_size({**config, "cluster.launcher": "megatron-lm"}) == 2  # Megatron-Core: TP
