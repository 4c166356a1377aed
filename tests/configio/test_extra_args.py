"""Flags an entry point adds on top of Megatron-LM's parser (extra_args_provider: ModelOpt's add_modelopt_args,
Pai-Megatron-Patch's get_patch_args) read as that entry point takes them (configio/extra_args.py)."""

from pathlib import Path

import pytest

from moetune.configio import load_config
from moetune.errors import MoetuneError
from moetune.rules import evaluate

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GPTOSS = FIXTURES / "mlm_gptoss_02_train.sh"  # pretrain_gpt.py with two ModelOpt flags, ModelOpt left off


def test_gptoss_example_reads_its_modelopt_flags_and_ignores_them():
    config = load_config([GPTOSS], gpu="h100", gpus=8)
    # PP_SIZE=${WORLD_SIZE} (8 GPUs x 1 node), TP_SIZE=1, EP_SIZE=1; --sequence-parallel drops at TP 1 (validate_args)
    assert [config[f"model.{k}_model_parallel_size"] for k in ("pipeline", "tensor", "expert")] == [8, 1, 1]
    assert config["model.sequence_parallel"] is False
    assert config["mixed_precision.fp8"] == "hybrid" and config["mixed_precision.fp8_param_gather"] is True
    assert config["model.recompute_granularity"] == "selective"  # --recompute-activations
    assert config["model.num_layers"] == 12 and config["model.num_moe_experts"] == 4
    assert not any("local_attention" in k or "gpt_oss" in k for k in config)  # read and ignored
    # its 12 layers on PP 8 stop Megatron-LM's validate_args (the layer count divides by the PP size)
    assert "pipeline.layers_divisible" in {f.rule for f in evaluate(config)}


def test_a_flag_that_turns_modelopt_on_is_refused():
    with pytest.raises(MoetuneError, match="--modelopt-enabled turns ModelOpt on .* moetune does not price"):
        load_config(mlm_args="--num-layers 2 --modelopt-enabled")


@pytest.mark.parametrize(("line", "says"), [
    # pretrain_vlm.py passes no add_modelopt_args (Megatron-LM@d98e8a6)
    ("python pretrain_vlm.py --num-layers 2 --enable-gpt-oss", "--enable-gpt-oss is a ModelOpt flag"),
    # a flag no parser adds: the line it always gave
    ("python pretrain_gpt.py --num-layers 2 --enable-gpt-os", "unknown Megatron-LM argument --enable-gpt-os; did you"),
])
def test_an_extra_flag_the_entry_point_does_not_take_says_whose_it_is(tmp_path, line, says):
    script = tmp_path / "t.sh"
    script.write_text(line + "\n")
    with pytest.raises(MoetuneError, match=says) as err:
        load_config([script])
    assert ("ModelOpt" in str(err.value)) == ("ModelOpt" in says)


@pytest.mark.parametrize("entry", ["pretrain_gpt.py", "pretrain_mamba.py", None])  # None: bare arguments
def test_the_entry_points_that_add_modelopt_flags_take_them(tmp_path, entry):
    script = tmp_path / "t.sh"
    script.write_text(f"torchrun {entry or ''} --num-layers 2 --export-force-local-attention --enable-gpt-oss\n")
    assert load_config([script])["model.num_layers"] == 2
