"""A test per rule: a config that breaks it is flagged with that rule id, applying the rule's fix clears it,
and the real Megatron Bridge recipes (tests/fixtures/bridge) are not flagged with it."""

from functools import lru_cache

import pytest
from rule_cases import CASES, FIX_NEEDS_NEW_FACTS, FIXTURES, RECIPES

from moetune.configio import load_config
from moetune.configio.normalize import Assignment, resolve
from moetune.rules import evaluate, load_table

CDNA3 = """
[gpu]
name = "MI300X (test)"
arch = "cdna3"
bf16_tflops = 1307.4
fp8_tflops = 2614.9
fp4_tflops = 0
memory_gib = 192
hbm_tbps = 5.3
nvlink_gbps = 448
nvlink_domain = 8
gpus_per_node = 8
nic_gbps = 400
host_link_gbps = 64
gemm_tile = 128
tdp_w = 750
"""


@pytest.fixture(scope="module")
def cdna3_cluster(tmp_path_factory):
    path = tmp_path_factory.mktemp("cluster") / "mi300x.toml"
    path.write_text(CDNA3)
    return str(path)


def build(case, cdna3_cluster):
    gpu = cdna3_cluster if case.gpu == "@cdna3" else case.gpu
    return load_config(sets=case.sets, gpu=gpu, gpus=case.gpus)


def fired(config, case):
    return {f.rule: f for f in evaluate(config, case.derived, context=case.context)}


@lru_cache(maxsize=None)
def recipe_rules(name: str) -> frozenset[str]:
    gpu, gpus = RECIPES[name]
    config = load_config([FIXTURES / name], gpu=gpu, gpus=gpus)
    return frozenset(f.rule for ctx in ("check", "explain", "diagnose") for f in evaluate(config, context=ctx))


def test_every_rule_has_a_case():
    assert set(CASES) == {r.id for r in load_table().rules}


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_breaking_config_is_flagged(rule_id, cdna3_cluster):
    case = CASES[rule_id]
    findings = fired(build(case, cdna3_cluster), case)
    assert rule_id in findings, f"{rule_id} did not fire; fired: {sorted(findings)}"
    finding = findings[rule_id]
    rule = load_table().rule(rule_id)
    assert finding.severity == rule.severity and finding.source == rule.source
    assert "{" not in finding.message and "?" not in finding.message.replace("?)", "")


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_fix_clears_the_rule(rule_id, cdna3_cluster):
    case = CASES[rule_id]
    config = build(case, cdna3_cluster)
    fix = fired(config, case)[rule_id].fix
    if not fix:
        assert not load_table().rule(rule_id).steps, f"{rule_id} has a fix in the table but produced none"
        return
    # The fix is itself a valid config: known names, right types.
    fixed_part = resolve(Assignment(key=k, value=v, origin="fix") for k, v in fix.items())
    if rule_id in FIX_NEEDS_NEW_FACTS:
        return
    after = fired({**config, **fixed_part}, case)
    assert rule_id not in after
    # nor does it trade the finding for a new error (the recipe audit: the platform-dispatcher fix on a
    # full-iteration graph asked for DeepEP, which cudagraph.full_iteration_static_experts refuses)
    before = fired(config, case)
    assert not {r for r, f in after.items() if f.severity == "error" and r not in before}


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_a_real_recipe_is_not_flagged(rule_id):
    clean = [name for name in RECIPES if rule_id not in recipe_rules(name)]
    assert clean, f"{rule_id} fires on every recipe fixture"


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_real_recipes_have_no_errors(name):
    gpu, gpus = RECIPES[name]
    config = load_config([FIXTURES / name], gpu=gpu, gpus=gpus)
    errors = [f.rule for f in evaluate(config) if f.severity == "error"]
    assert errors == []


def test_qwen3_16gpu_recipe_warnings_are_the_ones_its_source_explains():
    """Read from recipes/qwen/h100/qwen3_moe.py: the 16-GPU recipe enables CommOverlapConfig(tp_comm_overlap=True)
    at TP=1 (Bridge turns it off), leaves moe_router_dtype unset (the Qwen3 bridge does not set it), and uses
    HybridEP without NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN in env_vars (the launcher adds it)."""
    config = load_config([FIXTURES / "qwen3_30b_a3b_pretrain_16gpu_h100_bf16.yaml"], gpu="h100", gpus=16)
    warnings = {f.rule for f in evaluate(config) if f.severity == "warning"}
    assert warnings == {"overlap.tp_comm_needs_sp", "precision.router_fp32", "dispatcher.hybridep_ranks_env_missing"}


def test_absent_estimator_facts_skip_instead_of_failing():
    config = load_config(sets=CASES["fit.does_not_fit"].sets, gpu="h100", gpus=8)
    assert "fit.does_not_fit" not in {f.rule for f in evaluate(config)}
    fits = {f.rule for f in evaluate(config, {"fits": True})}
    assert "fit.does_not_fit" not in fits


def test_fit_steps_follow_the_seed_order():
    """seeds/000 Phase 1: model parallelism, then selective recompute, then full recompute, then offload."""
    base = load_config(sets=(*CASES["fit.does_not_fit"].sets, "model.moe_grouped_gemm=true"), gpu="h100", gpus=8)

    def fix(extra_sets=(), derived=None):
        cfg = {**base, **load_config(sets=extra_sets)} if extra_sets else base
        return {f.rule: f for f in evaluate(cfg, {"fits": False, **(derived or {})})}["fit.does_not_fit"].fix

    layout = {"model.expert_model_parallel_size": 8}
    assert fix(derived={"fitting_layout": layout}) == layout
    assert fix()["model.recompute_granularity"] == "selective"
    assert fix(("model.recompute_granularity=selective",))["model.recompute_granularity"] == "full"
    # with the precision-aware optimizer the offload's hybrid device optimizer runs on (Megatron-LM asserts it)
    offload = {"optimizer.optimizer_cpu_offload": True, "optimizer.optimizer_offload_fraction": 1.0,
               "optimizer.use_precision_aware_optimizer": True}
    assert fix(("model.recompute_granularity=full",)) == offload
    # a recipe's FP8 weights give way to BF16 ones beside the offload but under the delayed recipe
    # (precision.fp8_params_with_optimizer_offload, which the fixed config then passes)
    fp8 = ("model.recompute_granularity=full", "mixed_precision=bf16_with_fp8_current_scaling_mixed")
    assert fix(fp8) == {**offload, "mixed_precision.fp8_param_gather": False}
    fixed = {**base, **load_config(sets=fp8), **fix(fp8)}
    assert "precision.fp8_params_with_optimizer_offload" not in {f.rule for f in evaluate(fixed, {"fits": False})}
    # NVFP4 weights beside no offload at all (precision.fp4_params_with_optimizer_offload)
    fp4 = ("model.recompute_granularity=full", "mixed_precision=bf16_with_nvfp4_mixed")
    assert fix(fp4) == {**offload, "mixed_precision.fp4_param_gather": False}
    fixed = {**base, **load_config(sets=fp4), **fix(fp4)}
    assert "precision.fp4_params_with_optimizer_offload" not in {f.rule for f in evaluate(fixed, {"fits": False})}


def test_context_filters_rules():
    case = CASES["wall.host"]
    config = load_config(sets=case.sets)
    assert "wall.host" in {f.rule for f in evaluate(config, case.derived, context="diagnose")}
    assert "wall.host" not in {f.rule for f in evaluate(config, case.derived, context="check")}


@pytest.mark.parametrize("gpus", [4, 8, 16])
def test_whole_nodes_or_less_than_one_are_not_partial(gpus):
    config = load_config(sets=["model.num_moe_experts=8", "model.expert_model_parallel_size=4"], gpu="h100", gpus=gpus)
    assert "scale.partial_node" not in {f.rule for f in evaluate(config)}


@pytest.mark.parametrize(("rule", "gpu"), [("precision.fp4_needs_blackwell", "h100"),
                                         ("precision.fp8_unsupported", "a100")])
def test_fixes_that_leave_nvfp4_turn_its_fp4_weights_off(rule, gpu):
    """Bridge's NVFP4 preset keeps the weights in NVFP4 (fp4_param_gather), which Megatron-Core refuses without FP4:
    a fix that takes the config off NVFP4 turns them off too, as the FP8 fixes do fp8_param_gather."""
    config = load_config(sets=(*CASES["fit.does_not_fit"].sets, "mixed_precision=bf16_with_nvfp4_mixed"), gpu=gpu,
                         gpus=8)
    assert config["mixed_precision.fp4_param_gather"] is True
    fix = {f.rule: f for f in evaluate(config)}[rule].fix
    assert fix["mixed_precision.fp4"] is None and fix["mixed_precision.fp4_param_gather"] is False


@pytest.mark.parametrize("fsdp", ["", " --use-torch-fsdp2", " --use-megatron-fsdp"])
def test_fp8_weights_without_the_distributed_optimizer_pass_under_either_fsdp(fsdp):
    """Megatron-LM asserts --fp8-param-gather "only supported with distributed optimizer, torch fsdp2, megatron fsdp,
    or inference mode" (arguments.py validate_args): --use-torch-fsdp2 had been read and ignored, so the rule refused
    a launch Megatron-LM runs."""
    args = "--num-experts 64 --bf16 --fp8-format hybrid --fp8-recipe tensorwise --fp8-param-gather" + fsdp
    fired = {f.rule for f in evaluate(load_config(mlm_args=args))}
    assert ("precision.fp8_params_need_distributed_optimizer" in fired) is (not fsdp)


@pytest.mark.parametrize(("kind", "recipe", "gpu"), [("fp8", ("fp8=hybrid", "fp8_recipe=tensorwise"), "h100"),
                                                     ("fp4", ("fp4=e2m1", "fp4_recipe=nvfp4"), "b200")])
def test_a_lone_param_switch_beside_the_offload_is_refused_as_its_gather(kind, recipe, gpu):
    """Bridge's MixedPrecisionConfig copies {kind}_param onto {kind}_param_gather (configio/finalize.py
    quantized_params), so a config setting only fp8_param (fp4_param) keeps the weights quantized: the offload rule
    and fit.does_not_fit's offload step had read the gather alone and passed it."""
    offload = ("optimizer.optimizer_cpu_offload=true", "optimizer.optimizer_offload_fraction=0.5",
               "optimizer.use_precision_aware_optimizer=true")
    base = (*CASES["fit.does_not_fit"].sets, *(f"mixed_precision.{r}" for r in recipe))
    for switch in (f"{kind}_param_gather", f"{kind}_param"):
        config = load_config(sets=(*base, *offload, f"mixed_precision.{switch}=true"), gpu=gpu, gpus=8)
        assert f"precision.{kind}_params_with_optimizer_offload" in {f.rule for f in evaluate(config)}, switch
        full = load_config(sets=(*base, "model.recompute_granularity=full", f"mixed_precision.{switch}=true"), gpu=gpu,
                           gpus=8)
        fix = {f.rule: f for f in evaluate(full, {"fits": False})}["fit.does_not_fit"].fix
        assert fix[f"mixed_precision.{kind}_param_gather"] is False, switch


@pytest.mark.parametrize(("rule", "precision", "gpu"), [
    ("precision.mxfp8_param_gather_reuse", "{bf16: true, fp8: e4m3, fp8_recipe: mxfp8, fp8_param: true}", "gb200"),
    ("precision.fp4_params_without_fp4", "{bf16: true, fp4_param: true}", "b200")])
def test_a_bridge_yaml_setting_only_the_param_switch_is_read_as_its_gather(rule, precision, gpu, tmp_path):
    """A Bridge YAML's fp8_param (fp4_param) alone keeps the weights quantized as the gather would (Bridge's
    MixedPrecisionConfig.__setattr__ copies it onto the gather, which ConfigContainer.validate and Megatron-Core then
    read): the rules had read the gather's key alone and passed it."""
    path = tmp_path / "override.yaml"
    path.write_text(f"mixed_precision: {precision}\n")
    config = load_config([path], sets=CASES["fit.does_not_fit"].sets, gpu=gpu, gpus=8)
    assert rule in {f.rule for f in evaluate(config)}


@pytest.mark.parametrize(("optimizer", "flagged"), [("adam", True), ("dist_muon", False), ("muon", False)])
def test_a_muon_recipe_turning_the_ddp_distributed_optimizer_off_is_in_sync(optimizer, flagged):
    """Megatron Bridge @067f987 recipes/kimi/h100/kimi_k2.py _apply_kimi_k2_optimizer(cfg, "muon"), under every Kimi K2
    perf recipe (kimi_k2_pretrain_256gpu_gb300_nvfp4_config among them), sets ddp.use_distributed_optimizer=False and
    replaces the optimizer config with distributed_muon_with_cosine_annealing's (recipes/utils/optimizer_utils.py),
    which leaves optimizer.use_distributed_optimizer at Megatron-Core's False: both are off, nothing to sync. The Adam
    helpers set it True, so there a lone ddp False is still out of sync."""
    config = load_config(sets=["model.num_moe_experts=64", "ddp.use_distributed_optimizer=false",
                               f"optimizer.optimizer={optimizer}"])
    assert ("optimizer.dist_opt_out_of_sync" in {f.rule for f in evaluate(config)}) is flagged


def test_the_fsdp_recipes_model_fp8_param_gather_is_read_and_agrees():
    """Megatron Bridge @067f987 perf_recipes/deepseek/gb300/deepseek_v3.py
    deepseek_v3_pretrain_64gpu_gb300_fp8mx_fsdp_config (and the 128-GPU HSDP one) set cfg.model.fp8_param_gather = True
    under the MXFP8 preset, which keeps the weights in FP8 too: the overrides load (they had stopped as an unknown key)
    and nothing is flagged."""
    config = load_config(sets=["model.num_moe_experts=64", "mixed_precision=bf16_with_mxfp8_mixed",
                               "model.fp8_param_gather=true", "model.fp8_param=true"])
    assert config["model.fp8_param_gather"] is True
    assert "precision.model_fp8_param_gather_overwritten" not in {f.rule for f in evaluate(config)}
