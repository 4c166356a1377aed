"""Megatron-LM's MoE recipes (examples/moe_recipes on its dev branch): ENV_VARS and ARGS keyed by argparse destination
(`num_layers: 48`), read as the flags they name; the fixture is NVIDIA's Qwen3-30B-A3B on 32 H100 in BF16."""

import json
from pathlib import Path

import pytest

from moetune.cli.main import main
from moetune.configio import load_config
from moetune.configio.model_args import _recipe_args

RECIPE = Path(__file__).resolve().parents[1] / "fixtures" / "megatron_lm" / "moe_recipe_qwen3_30b_h100_bf16.yaml"


def test_a_recipe_reads_as_megatron_lm_arguments():
    config = load_config([RECIPE], gpu="h100", gpus=32)
    assert config["model.expert_model_parallel_size"] == 8 and config["model.tensor_model_parallel_size"] == 1
    assert config["model.num_moe_experts"] == 128 and config["model.moe_ffn_hidden_size"] == 768
    assert config["model.moe_flex_dispatcher_backend"] == "hybridep"
    assert config["train.global_batch_size"] == 256 and config["model.seq_length"] == 4096
    assert config["env.NVTE_FUSED_ATTN"] == "1"  # ENV_VARS, as written (quoted in the recipe)


@pytest.mark.parametrize(("value", "flag_given"), [(True, False), (False, True)])
def test_a_destination_its_flag_turns_off_is_that_flag_where_set_false(value, flag_given):
    """overlap_p2p_comm is set by --no-overlap-p2p-communication (store_false, default on: Megatron-LM arguments.py);
    the DeepSeek-V3 GB200 recipe writes `overlap_p2p_comm: true`, which is its default and passes no flag."""
    args = _recipe_args({"overlap_p2p_comm": value, "num_layers": 4}, "recipe.yaml")
    assert args["--num-layers"] == 4
    assert args["--no-overlap-p2p-communication"] is flag_given


def test_check_names_what_megatron_lm_refuses_in_it(capsys):
    """The recipe sets --cross-entropy-loss-fusion with --cross-entropy-fusion-impl te, which Megatron-LM's
    validate_args refuses since June 2026 (#5115), at the recipes' own commit too (arguments.py:1822 @9c5258f109)."""
    assert main(["check", str(RECIPE), "--json"]) == 1
    rules = {f["rule"]: f["severity"] for f in json.loads(capsys.readouterr().out)["findings"]}
    assert rules["compute.te_cross_entropy"] == "error"


# exit 1: the cross-entropy refusal (Megatron-Core 0.18.2 on), after the numbers
@pytest.mark.parametrize(("extra", "sms", "exit_code"), [
    ([], 24, 1),  # EP 8 inside one 8-GPU node: HybridEP's own 24 (DeepEP hybrid-ep csrc/hybrid_ep/config.cuh:315)
    (["--megatron-core", "0.17"], 16, 0),  # Megatron-Core 0.17's moe_hybridep_num_sms default
    (["--set", "model.expert_model_parallel_size=16"], 8, 1),  # EP 16 over two nodes: HybridEP's own 8
])
def test_an_unset_hybridep_sm_count_is_what_runs(extra, sms, exit_code, capsys):
    code = main(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "32", "--config", str(RECIPE), *extra,
                 "--json"])
    assert code == exit_code
    assert json.loads(capsys.readouterr().out)["knobs"]["flex_num_sms"] == sms
