"""The TE op fuser's own refusals (TEGroupedMLP._is_fused_impl_supported, experts.py, core_v0.18.0 on): each rule
fires where Megatron-Core builds TE grouped experts it cannot fuse, and stays silent where the switch is not read."""

import pytest
from fired_rules import findings
from rule_cases import FULL_ITERATION_HYBRIDEP, MOE, S

from moetune.configio import load_config
from moetune.rules import evaluate

FUSER = S(MOE, "model.use_transformer_engine_op_fuser=true", "model.expert_model_parallel_size=4")
OFFLOAD = ("model.fine_grained_activation_offloading=true", "env.NVTE_CPU_OFFLOAD_V1=1")


def fired(*sets) -> set[str]:
    return set(findings(*sets)) & {
        "compute.op_fuser_expert_tp", "compute.op_fuser_expert_offload", "compute.op_fuser_activation",
        "compute.op_fuser_probs_on_input"}


@pytest.mark.parametrize(("extra", "expected"), [
    ((), set()),
    (("model.expert_tensor_parallel_size=2",), {"compute.op_fuser_expert_tp"}),
    # SequentialMLP (no grouped GEMM, or the local spec) never reads the switch
    (("model.expert_tensor_parallel_size=2", "model.moe_grouped_gemm=false"), set()),
    (("model.expert_tensor_parallel_size=2", "model.transformer_impl=local"), set()),
    (("model.expert_tensor_parallel_size=2", "model.use_transformer_engine_op_fuser=false"), set()),
    ((*OFFLOAD, "model.offload_modules=[moe_act]"), {"compute.op_fuser_expert_offload"}),
    # the experts' hooks are gated by the switch; offloads outside the experts stay legal
    (("model.offload_modules=[moe_act]",), set()),
    ((*OFFLOAD, "model.offload_modules=[core_attn]"), set()),
    # a non-gated expert: the weighted squared ReLU fuses; a Bridge file naming only the GLU switch leaves the
    # weighted one to its recipe; Megatron-LM's default (off) is what runs
    (("model.gated_linear_unit=false", "model.use_fused_weighted_squared_relu=false"),
     {"compute.op_fuser_activation"}),
    (("model.gated_linear_unit=false", "model.use_fused_weighted_squared_relu=true"), set()),
    (("model.gated_linear_unit=false",), set()),
    (("model.gated_linear_unit=false", "cluster.launcher=megatron-lm"), {"compute.op_fuser_activation"}),
    (("model.gated_linear_unit=true", "model.use_fused_weighted_squared_relu=false"), set()),
    (("model.moe_router_topk=1", "model.moe_apply_probs_on_input=true"), {"compute.op_fuser_probs_on_input"}),
    (("model.moe_router_topk=1", "model.moe_apply_probs_on_input=true", "model.moe_grouped_gemm=false"), set()),
])
def test_op_fuser_refusals(extra, expected):
    assert fired(FUSER, *extra) == expected


def test_expert_tp_fix_moves_the_ranks_to_ep():
    fix = findings(FULL_ITERATION_HYBRIDEP, "model.expert_model_parallel_size=4",
                   "model.expert_tensor_parallel_size=2")["compute.op_fuser_expert_tp"].fix
    assert fix == {"model.expert_tensor_parallel_size": 1, "model.expert_model_parallel_size": 8}
    # 60 experts over EP 8: no ETP 1 layout of the same ranks, and the HybridEP budget keeps the op fuser: no fix
    odd = findings(FULL_ITERATION_HYBRIDEP, "model.num_moe_experts=60", "model.expert_model_parallel_size=4",
                   "model.expert_tensor_parallel_size=2")
    assert not odd["compute.op_fuser_expert_tp"].fix


@pytest.mark.parametrize(("extra", "fires"), [
    ((), True),
    (("env.NVTE_CUTEDSL_FUSED_GROUPED_MLP=1",), False),
    (("env.NVTE_CUTEDSL_FUSED_GROUPED_MLP=0",), True),
    (("model.gated_linear_unit=false", "model.use_fused_weighted_squared_relu=true"), False),  # no GLU to fuse
    (("model.moe_grouped_gemm=false",), False),
    (("model.use_transformer_engine_op_fuser=false",), False),
    # Megatron-LM arguments carry the environment only where the user gives it (emit writes it to env.sh)
    (("cluster.launcher=megatron-lm",), False),
    (("cluster.launcher=megatron-lm", "env.NVTE_CUTEDSL_FUSED_GROUPED_MLP=0"), True),
])
def test_glu_fusion_needs_the_cutedsl_switch(extra, fires):
    config = load_config(sets=S(FUSER, "model.gated_linear_unit=true", *extra))
    assert ("env.op_fuser_cutedsl" in {f.rule for f in evaluate(config)}) is fires
    # check alone reads the launch environment
    assert "env.op_fuser_cutedsl" not in {f.rule for f in evaluate(config, context="explain")}
