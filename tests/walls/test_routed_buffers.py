"""The routed-expert activations a full-iteration CUDA graph keeps for backward are the config's own buffers: its paged
stash's CUDA factor, or without the stash the capacity HybridEP pads each expert rank to, not a plan's stash (1.2)
whatever the config says."""

import json

import pytest

from moetune.cli.main import main
from moetune.configio import load_config
from moetune.planner.estimate import estimate
from moetune.planner.from_config import from_config
from moetune.planner.from_json import estimate_from_json
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.memory import PAGED_STASH_CUDA

# The full-iteration graph settings of Megatron Bridge @067f987
# perf_recipes/qwen/gb300/qwen3_moe.py qwen3_235b_a22b_pretrain_128gpu_gb300_fp8mx_paged_stash_dev_config, on a model
# and scale that estimate quickly (its own 235B run: 132.9 -> 125.8 GiB a GPU)
GRAPH = ["mixed_precision=bf16_with_mxfp8_mixed", "model.expert_model_parallel_size=8",
         "model.moe_token_dispatcher_type=flex", "model.moe_flex_dispatcher_backend=hybridep",
         "model.moe_router_force_load_balancing=true", "model.use_transformer_engine_op_fuser=true",
         "model.cuda_graph_impl=local", "model.cuda_graph_scope=full_iteration",
         "rerun_state_machine.check_for_nan_in_loss=false", "train.micro_batch_size=1", "train.global_batch_size=64",
         "model.seq_length=4096"]
PAGED = ["model.moe_paged_stash=true", "model.moe_expert_rank_capacity_factor=1.2",
         "model.moe_paged_stash_buffer_size_factor_cuda=1.0"]
# gpt_oss_20b_pretrain_8gpu_b300_fp8mx_config (perf_recipes/gpt_oss/b300/gpt_oss.py @067f987): no stash, capacity 5
CAPACITY = ["model.moe_expert_rank_capacity_factor=5"]


def _routed(sets):
    config = load_config(sets=GRAPH + sets, gpu="gb300", gpus=8)
    layout, workload, knobs = from_config(config)
    e = estimate(load_model("qwen3-30b-a3b"), load_gpu("gb300"), layout, workload, knobs)
    return e.stages[0].items["act_expert_input"], knobs


@pytest.mark.parametrize(("sets", "factor"), [(PAGED, 1.0), (CAPACITY, 5.0),
                                              (["model.moe_paged_stash=true"], 1.10),  # Megatron-Core's default
                                              (PAGED[:2] + ["model.moe_paged_stash_buffer_size_factor_cuda=-1.3"],
                                               1.3)])  # negative: sized from the actual maximum, same headroom
def test_full_iteration_graphs_keep_the_configs_routed_buffers(sets, factor):
    plan_stash, plain = _routed([])
    assert plain.routed_buffer_factor is None
    routed, knobs = _routed(sets)
    assert knobs.routed_buffer_factor == pytest.approx(factor)
    assert routed / plan_stash == pytest.approx(factor / PAGED_STASH_CUDA, rel=1e-4)


def test_the_factor_outlives_a_saved_result(capsys):
    main(["estimate", "qwen3-30b-a3b", "--gpu", "gb300", "--gpus", "8", "--json",
          *[a for s in GRAPH + PAGED for a in ("--set", s)]])
    saved = json.loads(capsys.readouterr().out)
    assert saved["knobs"]["routed_buffer_factor"] == 1.0
    assert estimate_from_json(saved).knobs.routed_buffer_factor == 1.0
