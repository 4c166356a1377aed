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
    # selective over no module recomputes nothing; left out, --recompute-modules would be core_attn
    ({"model.recompute_modules": []}, "drop --recompute-granularity, --recompute-modules"),
    ({"model.recompute_modules": None}, "drop --recompute-modules"),
    ({"model.sequence_parallel": True}, "--sequence-parallel"),
    ({"model.overlap_moe_expert_parallel_comm": True, "model.moe_shared_expert_overlap": False},
     "--overlap-moe-expert-parallel-comm; drop --moe-shared-expert-overlap"),
])
def test_a_fix_is_said_as_the_arguments_a_megatron_lm_launch_changes(fix, words):
    assert mlm_fix_words(fix) == words


def test_a_name_without_a_megatron_lm_flag_stays_as_written():
    assert mlm_fix_words({"model.moe_flex_dispatcher_backend": "deepep", "no.such_name": 3}).endswith("no.such_name=3")



@pytest.mark.parametrize(("fix", "words"), [
    # rule precision.fp8_params_need_distributed_optimizer: one switch sets both (configio/mlm.py SPECIAL)
    ({"ddp.use_distributed_optimizer": True, "optimizer.use_distributed_optimizer": True},
     "--use-distributed-optimizer"),
    ({"ddp.use_distributed_optimizer": False, "optimizer.use_distributed_optimizer": False},
     "drop --use-distributed-optimizer"),
    ({"optimizer.use_distributed_optimizer": True}, "--use-distributed-optimizer"),
    # rule overlap.grad_reduce: Bridge's comm_overlap copies are ddp's arguments on a Megatron-LM launch
    ({"ddp.overlap_grad_reduce": True, "ddp.overlap_param_gather": True, "comm_overlap.overlap_grad_reduce": True,
      "comm_overlap.overlap_param_gather": True}, "--overlap-grad-reduce --overlap-param-gather"),
    ({"optimizer.overlap_param_gather_with_optimizer_step": False,
      "comm_overlap.overlap_param_gather_with_optimizer_step": False},
     "drop --overlap-param-gather-with-optimizer-step"),
    ({"dist.use_torch_fsdp2": False, "ddp.use_megatron_fsdp": False, "dist.use_megatron_fsdp": False},
     "drop --use-torch-fsdp2, --use-megatron-fsdp"),
    ({"model.seq_length": 4096, "dataset.seq_length": 4096}, "--seq-length 4096"),
    ({"model.share_embeddings_and_output_weights": False}, "--untie-embeddings-and-output-weights"),
])
def test_a_field_megatron_lm_sets_through_another_argument_is_said_as_that_argument(fix, words):
    """A flagless field a Megatron-LM launch sets from another field's argument is said as that argument, once: the
    fixes had read '--use-distributed-optimizer optimizer.use_distributed_optimizer=true', a field such a launch has
    no way to set."""
    assert mlm_fix_words(fix) == words


def test_a_named_precision_recipe_is_said_as_its_arguments():
    """diagnose's compute remedies name Bridge recipes ('mixed_precision: bf16_with_mxfp8_mixed'), which a
    Megatron-LM launch has no name for: the recipe's fields that have an argument, instead."""
    assert mlm_fix_words({"mixed_precision": "bf16_with_mxfp8_mixed"}) == (
        "--bf16 --fp8-format e4m3 --fp8-recipe mxfp8 --fp8-param-gather --reuse-grad-buf-for-mxfp8-param-ag; "
        "drop --fp16")


def test_the_optimizer_offload_fix_names_the_argument_megatron_lm_asserts_beside_it():
    """Megatron-LM's validate_args refuses --optimizer-cpu-offload without --use-precision-aware-optimizer
    (arguments.py @core_v0.18.2, @core_v0.19.0), which emit already writes beside it: rule fit.does_not_fit's
    offload step had told a Megatron-LM launch '--optimizer-cpu-offload --optimizer-offload-fraction 1.0', a launch
    that stops at that assert. Named once where the fix sets it too; not for a fix that turns the offload off."""
    assert mlm_fix_words({"optimizer.optimizer_cpu_offload": True, "optimizer.optimizer_offload_fraction": 1.0,
                          "mixed_precision.fp8_param_gather": False}) == (
        "--optimizer-cpu-offload --optimizer-offload-fraction 1.0 --use-precision-aware-optimizer; "
        "drop --fp8-param-gather")
    assert mlm_fix_words({"optimizer.optimizer_cpu_offload": True,
                          "optimizer.use_precision_aware_optimizer": True}) == (
        "--optimizer-cpu-offload --use-precision-aware-optimizer")
    assert mlm_fix_words({"optimizer.optimizer_cpu_offload": False, "optimizer.optimizer_offload_fraction": 0.0}) == (
        "--optimizer-offload-fraction 0.0; drop --optimizer-cpu-offload")
