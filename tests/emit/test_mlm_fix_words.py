"""A rule's fix said as Megatron-LM arguments, for a launch given as Megatron-LM arguments (check, estimate and
explain of --mlm-args had printed Bridge's config names, which such a launch cannot set)."""

import pytest

from moetune.emit.mlm import mlm_fix_words


@pytest.mark.parametrize(("fix", "words"), [
    ({"model.moe_router_dtype": "fp32"}, "--moe-router-dtype fp32"),
    ({"model.expert_model_parallel_size": 16, "model.expert_tensor_parallel_size": 1},
     "--expert-model-parallel-size 16 --expert-tensor-parallel-size 1"),
    ({"model.gradient_accumulation_fusion": False}, "--no-gradient-accumulation-fusion"),  # a store_false switch
    ({"dist.use_torch_fsdp2": False}, "drop --use-torch-fsdp2"),  # a store_true switch turned off
    ({"model.recompute_modules": []}, "drop --recompute-modules"),
    ({"model.sequence_parallel": True}, "--sequence-parallel"),
    ({"model.overlap_moe_expert_parallel_comm": True, "model.moe_shared_expert_overlap": False},
     "--overlap-moe-expert-parallel-comm; drop --moe-shared-expert-overlap"),
])
def test_a_fix_is_said_as_the_arguments_a_megatron_lm_launch_changes(fix, words):
    assert mlm_fix_words(fix) == words


def test_a_name_without_a_megatron_lm_flag_stays_as_written():
    assert mlm_fix_words({"model.moe_flex_dispatcher_backend": "deepep", "no.such_name": 3}).endswith("no.such_name=3")

