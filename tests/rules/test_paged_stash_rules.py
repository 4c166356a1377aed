"""Megatron-Core's refusals beside the paged stash (transformer_config.py TransformerConfig.__post_init__, core_v0.18.0
on): the layer-wise CPU offload, and offload_modules naming the routed experts' activations the stash holds. Each rule
fires where Megatron-Core refuses and stays silent where it runs."""

import pytest
from fired_rules import findings
from rule_cases import FULL_ITERATION_HYBRIDEP

STASH_RULES = {"dispatcher.paged_stash_cpu_offloading", "dispatcher.paged_stash_expert_offload"}


def fired(*sets) -> set[str]:
    return set(findings(*sets)) & STASH_RULES


@pytest.mark.parametrize(("extra", "expected"), [
    ((), set()),  # Bridge's full-iteration recipe as it ships
    (("model.cpu_offloading=true",), {"dispatcher.paged_stash_cpu_offloading"}),
    (("model.cpu_offloading=true", "model.moe_paged_stash=false"), set()),
    # Megatron-Core reads offload_modules with the switch off too (set(self.offload_modules))
    (("model.offload_modules=[expert_fc1]",), {"dispatcher.paged_stash_expert_offload"}),
    (("model.fine_grained_activation_offloading=true", "model.offload_modules=[fused_group_mlp]"),
     {"dispatcher.paged_stash_expert_offload"}),
    # offloads outside the routed experts stay legal beside the stash
    (("model.fine_grained_activation_offloading=true", "model.offload_modules=[core_attn,attn_proj]"), set()),
    (("model.offload_modules=[moe_act]", "model.moe_paged_stash=false"), set()),
])
def test_stash_refusals(extra, expected):
    assert fired(FULL_ITERATION_HYBRIDEP, *extra) == expected


def test_expert_offload_fix_keeps_the_other_modules():
    fix = findings(FULL_ITERATION_HYBRIDEP, "model.fine_grained_activation_offloading=true",
                   "model.offload_modules=[core_attn,expert_fc1,moe_act]")["dispatcher.paged_stash_expert_offload"].fix
    assert fix == {"model.offload_modules": ["core_attn"], "model.fine_grained_activation_offloading": True}
