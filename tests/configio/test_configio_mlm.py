"""Megatron-LM command lines map to Bridge dotted names, the way Megatron-LM itself would run them."""

from pathlib import Path

import pytest

from moetune.configio import load_config
from moetune.configio.mlm import argument_dump_config
from moetune.errors import MoetuneError

MIXTRAL = Path(__file__).resolve().parent / "fixtures" / "mixtral_8x7b_megatron_lm.sh"


@pytest.fixture(scope="module")
def mixtral():
    return load_config([MIXTRAL], gpu="h100", gpus=32)


def test_real_launch_script_maps_to_bridge_names(mixtral):
    # Values as examples/mixtral/train_mixtral_8x7b_distributed.sh passes them.
    expected = {
        "model.tensor_model_parallel_size": 1, "model.pipeline_model_parallel_size": 4,
        "model.expert_model_parallel_size": 8, "model.num_moe_experts": 8, "model.moe_router_topk": 2,
        "model.moe_token_dispatcher_type": "alltoall", "model.moe_grouped_gemm": True,
        "model.moe_aux_loss_coeff": 0.01, "model.num_query_groups": 8, "model.seq_length": 4096,
        "ddp.overlap_grad_reduce": True, "ddp.overlap_param_gather": True, "ddp.use_distributed_optimizer": True,
        "mixed_precision.bf16": True, "train.global_batch_size": 256, "train.micro_batch_size": 1,
        "model.add_bias_linear": False,  # --disable-bias-linear (store_false)
        "model.gated_linear_unit": True,  # --swiglu
        "model.share_embeddings_and_output_weights": False,  # --untie-embeddings-and-output-weights
        "env.CUDA_DEVICE_MAX_CONNECTIONS": 1,  # `export CUDA_DEVICE_MAX_CONNECTIONS=1` before torchrun
    }
    assert {k: mixtral.get(k) for k in expected} == expected
    # Flags with no Bridge field (data, tokenizer, logging) are read and dropped, never guessed.
    assert not any("tokenizer" in k or "data_path" in k for k in mixtral)


def test_megatron_lm_semantics_are_kept(mixtral):
    # validate_args turns sequence parallel off at TP=1; Megatron-LM fuses gradient accumulation by default.
    assert mixtral["model.sequence_parallel"] is False
    assert mixtral["model.gradient_accumulation_fusion"] is True


@pytest.mark.parametrize(("flags", "dispatcher"), [
    ("--num-experts 64", "allgather"),  # Megatron-LM's default (arguments.py), which the launch runs
    ("--num-experts 64 --moe-token-dispatcher-type alltoall", "alltoall"),
    ("--num-experts 64 --moe-enable-deepep", "flex"),
    ("--tensor-model-parallel-size 2", None),  # a dense model dispatches nothing
])
def test_a_moe_launch_without_a_dispatcher_runs_allgather(flags, dispatcher):
    """A Megatron-LM launch without --moe-token-dispatcher-type runs allgather; it had been read as a recipe's
    alltoall, so estimate and check priced a dispatcher other than the one that ran."""
    assert load_config(mlm_args=flags).get("model.moe_token_dispatcher_type") == dispatcher


def test_fp32_run_says_so():
    config = load_config(mlm_args="--tensor-model-parallel-size 2")
    assert config["mixed_precision.bf16"] is False and config["mixed_precision.fp16"] is False


@pytest.mark.parametrize(("args", "key", "value"), [
    ("--num-virtual-stages-per-pipeline-rank 4 --pipeline-model-parallel-size 2",
     "model.virtual_pipeline_model_parallel_size", 4),
    ("--num-layers 32 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 2",
     "model.virtual_pipeline_model_parallel_size", 4),
    ("--cuda-graph-scope attn moe_router", "model.cuda_graph_scope", ["attn", "moe_router"]),
    ("--cuda-graph-modules attn", "model.cuda_graph_scope", ["attn"]),
    ("--moe-enable-deepep", "model.moe_flex_dispatcher_backend", "deepep"),
    # the field too, which a release before 0.16 asserts under flex (token_dispatcher.py @ core_v0.15.0)
    ("--moe-enable-deepep", "model.moe_enable_deepep", True),
    ("--recompute-activations", "model.recompute_granularity", "selective"),
    ("--fp8-format e4m3", "mixed_precision.fp8_recipe", "delayed"),  # Megatron-LM's --fp8-recipe default
    ("--tensor-model-parallel-size=2", "model.tensor_model_parallel_size", 2),
    ("--main-grads-dtype bf16", "optimizer.main_grads_dtype", "bfloat16"),
    # Megatron-LM keeps every optimizer state on every DP rank unless asked (its default is off)
    ("--tensor-model-parallel-size 2", "optimizer.use_distributed_optimizer", False),
    ("--use-distributed-optimizer", "optimizer.use_distributed_optimizer", True),
    ("--te-rng-tracker", "rng.te_rng_tracker", True),
    # moe_freq_type's expression form, read without eval
    ("--moe-layer-freq ([0]*3+[1]*5)", "model.moe_layer_freq", [0, 0, 0, 1, 1, 1, 1, 1]),
    ("--moe-layer-freq [1,0]*2", "model.moe_layer_freq", [1, 0, 1, 0]),
    ("--moe-layer-freq 2", "model.moe_layer_freq", 2),
    # quoted once more for a shell, as Megatron-MoE-ModelZoo's Kimi-K2.yaml writes it
    ("--moe-layer-freq \"'([0]*1+[1]*3)'\"", "model.moe_layer_freq", [0, 1, 1, 1]),
    # repeated whole, moe_freq_type's docstring example (arguments.py core_v0.19.0:333-339)
    ("--moe-layer-freq ([1]*3+[0]*2)*2", "model.moe_layer_freq", [1, 1, 1, 0, 0, 1, 1, 1, 0, 0]),
    # VPP from layers per virtual stage counts the embedding and loss the split accounts for (arguments.py):
    # (94 + 2) / (8 x 3) = 4, as the ModelZoo Qwen3-235B-A22B H100 best practice runs it
    ("--num-layers 94 --pipeline-model-parallel-size 8 --num-layers-per-virtual-pipeline-stage 3 "
     "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split",
     "model.virtual_pipeline_model_parallel_size", 4),
])
def test_flag_forms(args, key, value):
    assert load_config(mlm_args=args)[key] == value


def test_gated_fields_and_their_gates_are_megatron_lm_arguments():
    """configio/gates.py: each gated field and its gate is a Megatron-LM argument of megatron_names.csv, and the
    value flags the reader writes are gated value flags (a switch is written anyway)."""
    from moetune.configio.gates import ONLY_UNDER, VALUE_DEFAULTS
    from moetune.configio.names import names

    for key, (gate, _) in ONLY_UNDER.items():
        assert names().get(key).mlm_flags and names().get(gate).mlm_flags, (key, gate)
    assert set(VALUE_DEFAULTS) <= ONLY_UNDER.keys()
    assert all(names().get(k).mlm_action == "value" for k in VALUE_DEFAULTS)


@pytest.mark.parametrize(("args", "key"), [
    ("--bf16", "mixed_precision.fp8_recipe"),  # no --fp8-format: no recipe
    ("--bf16", "optimizer.optimizer_offload_fraction"),  # no --optimizer-cpu-offload
    ("--bf16", "model.moe_token_dispatcher_type"),  # no --num-experts
    ("--num-experts 8 --moe-token-dispatcher-type flex", "model.moe_flex_dispatcher_backend"),  # not written
])
def test_a_gated_default_is_not_written_where_its_gate_is_off(args, key):
    assert key not in load_config(mlm_args=args)


def test_dsa_kernel_backend_is_written_over_a_recipe_only_for_the_dsa_variant():
    """A Megatron-LM launch's PLAN_FIELDS it leaves out are written over a Bridge recipe at Megatron-LM's defaults
    (configio/finalize.py megatron_lm_unstated); dsa_kernel_backend means something only under the dsa variant."""
    from moetune.configio.finalize import megatron_lm_unstated

    fields = frozenset({"model.dsa_kernel_backend"})
    assert not megatron_lm_unstated(load_config(mlm_args="--num-experts 8"), fields)
    dsa = load_config(mlm_args="--num-experts 8 --multi-latent-attention --experimental-attention-variant dsa")
    assert megatron_lm_unstated(dsa, fields) == {"model.dsa_kernel_backend": "none"}


def test_a_gated_default_is_written_where_its_gate_is_on():
    config = load_config(mlm_args="--num-experts 8 --optimizer-cpu-offload")
    assert config["model.moe_token_dispatcher_type"] == "allgather"  # Bridge's default too: written all the same
    assert config["optimizer.optimizer_offload_fraction"] == 1.0


@pytest.mark.parametrize(("args", "needle"), [
    ("--tensor-model-paralel-size 2", "did you mean --tensor-model-parallel-size"),
    ("--tensor-model-parallel-size two", "expects an integer"),
    ("--sequence-parallel yes", "takes no value"),
    ("--moe-token-dispatcher-type a2a", "must be one of"),
    ("--recompute-modules", "at least one value"),
    ("--tensor-model-parallel-size 'unbalanced", "cannot split"),
    ("tensor-model-parallel-size 2", "no Megatron-LM --flags"),
    ("--moe-layer-freq abc", "expected an integer, a list of 0/1"),
    ("--tensor-model-parallel-size 0", "must be at least 1"),
])
def test_bad_arguments_are_one_line_errors(args, needle):
    with pytest.raises(MoetuneError, match=needle) as err:
        load_config(mlm_args=args)
    assert "\n" not in str(err.value)


def test_a_flag_given_again_takes_its_last_value_as_argparse_does():
    """A launch line appending an override to a base list (`$BASE --seq-length 8192`) runs the last value; it had been
    refused as contradictory. Two flags of one field stay an error where they disagree."""
    config = load_config(mlm_args="--tensor-model-parallel-size 2 --seq-length 4096 --tensor-model-parallel-size 4")
    assert config["model.tensor_model_parallel_size"] == 4 and config["model.seq_length"] == 4096
    with pytest.raises(MoetuneError, match="contradictory"):
        load_config(mlm_args="--hybrid-override-pattern M*- --hybrid-layer-pattern MM-")


def test_a_hybrid_pattern_sets_vpp_from_its_segments_and_refuses_a_vpp_flag():
    """Megatron-LM derives VPP from the '|' segments of --hybrid-layer-pattern and asserts that no VPP flag is given
    beside it (arguments.py validate_args)."""
    config = load_config(mlm_args="--pipeline-model-parallel-size 2 --hybrid-layer-pattern 'M*|ME|M*|ME'")
    assert config["model.virtual_pipeline_model_parallel_size"] == 2
    with pytest.raises(MoetuneError, match="--hybrid-layer-pattern sets the virtual pipeline size itself"):
        load_config(mlm_args="--pipeline-model-parallel-size 2 --hybrid-layer-pattern 'M*|ME|M*|ME' "
                             "--num-virtual-stages-per-pipeline-rank 2")


def test_a_layer_pattern_makes_a_hybrid_without_is_hybrid_model():
    """Megatron-LM sets is_hybrid_model from the pattern (training/argument_utils.py), so a pretrain_hybrid.py launch
    that leaves the switch out is a hybrid all the same, and emit launches it with pretrain_hybrid.py."""
    from moetune.emit.launch import entry_point

    config = load_config(mlm_args="--num-layers 4 --hybrid-layer-pattern 'M*ME'")
    assert config["model.is_hybrid_model"] is True and entry_point(config) == "pretrain_hybrid.py"
    assert "model.is_hybrid_model" not in load_config(mlm_args="--num-layers 4")


def test_a_logs_argument_dump_reads_as_bridge_names():
    """Megatron-LM's print_args lines (argparse destinations, Python-printed values) map through the flags' own
    spellings: booleans, lists and None where the field takes it; names with no flag of their spelling and values the
    field refuses are left out."""
    config = argument_dump_config({
        "pipeline_model_parallel_size": "4", "num_experts": "64", "overlap_grad_reduce": "True",
        "use_distributed_optimizer": "False", "recompute_granularity": "None", "cuda_graph_scope": "['attn']",
        "params_dtype": "torch.bfloat16", "rank": "0", "moe_router_topk": "eight"})
    assert config == {"model.pipeline_model_parallel_size": 4, "model.num_moe_experts": 64,
                      "ddp.overlap_grad_reduce": True, "ddp.use_distributed_optimizer": False,
                      "optimizer.use_distributed_optimizer": False, "model.recompute_granularity": None,
                      "model.cuda_graph_scope": ["attn"]}


def test_a_dumps_world_size_is_the_gpu_count():
    """validate_args sets args.world_size, which print_args dumps: the GPUs that ran, though no flag sets it."""
    assert argument_dump_config({"world_size": "16"}) == {"cluster.num_gpus": 16}
    assert argument_dump_config({"world_size": "None"}) == {}


@pytest.mark.parametrize(("flags", "groups"), [
    ("--num-attention-heads 32 --num-query-groups 8 --group-query-attention", 8),
    ("--num-attention-heads 32 --num-query-groups 8", 32),  # Megatron-LM passes None: a KV group per head
    ("--num-attention-heads 32", None),
])
def test_query_groups_count_only_under_group_query_attention(flags, groups):
    """core_transformer_config_from_args hands num_query_groups to the model only with --group-query-attention; read
    as given, a launch's 8 groups at TP 16 had been warned past its KV groups (scale.tp_past_kv_groups) and 6 groups
    at TP 4 refused (shape.query_groups_vs_tp), where Megatron-LM runs 32."""
    config = load_config(mlm_args=f"{flags} --tensor-model-parallel-size 16", gpu="h100", gpus=16)
    assert config.get("model.num_query_groups") == groups


def test_a_dumps_query_groups_without_group_query_attention_are_the_heads():
    """print_args shows argparse's num_query_groups (1) for a run without --group-query-attention, which has a KV
    group per head."""
    dump = {"num_attention_heads": "32", "num_query_groups": "1"}
    assert argument_dump_config({**dump, "group_query_attention": "False"})["model.num_query_groups"] == 32
    assert argument_dump_config({**dump, "group_query_attention": "True"})["model.num_query_groups"] == 1
