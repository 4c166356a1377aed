"""cli/options.py config_words: an error worded for flags reads in the config's names for check --model and
estimate --config."""

import json

import pytest
from cli_run import run


def test_config_words_name_the_field_with_its_article():
    """A layout error worded for flags reads in the config's names for check and estimate --config: 'choose an --ep'
    had read 'choose an model.expert_model_parallel_size'; a flag the table does not know stays as written."""
    from moetune.cli.options import config_words

    assert config_words("choose an --ep that divides it; change --pp/--vpp, or an --unknown") == (
        "choose a model.expert_model_parallel_size that divides it; change model.pipeline_model_parallel_size/"
        "model.virtual_pipeline_model_parallel_size, or an --unknown")
    # a flag offered beside the key it sets names the key once; another key beside it stays
    assert config_words("(--hcp-a2a-size, or model.hierarchical_context_parallel_sizes [a2a, p2p])") == (
        "(model.hierarchical_context_parallel_sizes [a2a, p2p])")
    assert config_words("set --seq or model.seq_length_extra") == "set model.seq_length or model.seq_length_extra"


def test_a_precision_flag_reads_as_the_config_fields_that_set_it(capsys):
    """The GEMM-shape refusal ends 'or --precision bf16'; check --model (and estimate --config) word it for a config,
    and had left the flag as it was, which a config has no place for."""
    from moetune.cli.options import config_words

    assert config_words("use --seq 4112, or --precision bf16") == (
        "use model.seq_length 4112, or BF16 (mixed_precision.fp8=null mixed_precision.fp4=null)")
    assert config_words("needs --precision mxfp8") == "needs mixed_precision.fp8=e4m3 mixed_precision.fp8_recipe=mxfp8"
    assert config_words("--precision fp9") == "--precision fp9"  # not a recipe: left as written
    sets = ["model.num_layers=48", "model.num_moe_experts=128", "model.expert_model_parallel_size=8",
            "model.seq_length=4100", "train.micro_batch_size=1", "mixed_precision.fp8=e4m3",
            "mixed_precision.fp8_recipe=blockwise"]
    code, out, _ = run(["check", *[a for s in sets for a in ("--set", s)], "--gpu", "h100", "--gpus", "16",
                        "--model", "qwen3-30b-a3b", "--json"], capsys)
    [message] = [f["message"] for f in json.loads(out)["findings"] if f["rule"] == "layout.illegal"]
    assert "multiple of 8, got 4100" in message and "--" not in message and "mixed_precision.fp8=null" in message


def test_the_hcp_refusal_names_its_config_key_once(tmp_path, capsys):
    """The a2a group refusal offers '--hcp-a2a-size, or model.hierarchical_context_parallel_sizes [a2a, p2p]'; worded
    for a config (check --model, estimate --config) the flag became that key too, and the line named it twice."""
    config = tmp_path / "hcp.yaml"
    config.write_text("model:\n  tensor_model_parallel_size: 2\n  context_parallel_size: 8\n  cp_comm_type: a2a+p2p\n"
                      "  hierarchical_context_parallel_sizes: [4, 2]\n  seq_length: 8192\n")
    code, _, err = run(["estimate", "qwen3-30b-a3b", "--config", str(config), "--gpu", "h100", "--gpus", "16"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "the a2a group (4) must split" in err
    assert err.count("model.hierarchical_context_parallel_sizes") == 1
    assert err.rstrip().endswith("pick another a2a size (model.hierarchical_context_parallel_sizes [a2a, p2p])")
    code, out, _ = run(["check", str(config), "--model", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--json"],
                       capsys)
    [message] = [f["message"] for f in json.loads(out)["findings"] if f["rule"] == "layout.illegal"]
    assert message.count("model.hierarchical_context_parallel_sizes") == 1 and "--hcp-a2a-size" not in message


OLMOE = "olmoe-1b-7b"
TP2_LAUNCH = "--tensor-model-parallel-size 2 --bf16"


def test_a_megatron_lm_launch_is_told_its_own_arguments():
    """A layout refusal reached from Megatron-LM arguments names the argument to change: OLMoE at TP 2 had been told
    'use model.tensor_model_parallel_size 1', Megatron Bridge's field, which such a launch has no place for."""
    from moetune.cli.options import mlm_words

    assert mlm_words("use --tp 1") == "use --tensor-model-parallel-size 1"
    assert mlm_words("choose an --ep that divides it; change --pp/--vpp, or an --unknown") == (
        "choose an --expert-model-parallel-size that divides it; change --pipeline-model-parallel-size/"
        "--num-virtual-stages-per-pipeline-rank, or an --unknown")
    # Megatron-LM turns sequence parallelism and the distributed optimizer on by adding a switch, never off by one
    assert mlm_words("turn it on (model.sequence_parallel=true, or drop --no-sequence-parallel)") == (
        "turn it on (add --sequence-parallel)")
    assert mlm_words("turn it on (Megatron-LM --use-distributed-optimizer; drop --no-distributed-optimizer)") == (
        "turn it on (add --use-distributed-optimizer)")
    assert mlm_words("(--hcp-a2a-size, or model.hierarchical_context_parallel_sizes [a2a, p2p])") == (
        "(--hierarchical-context-parallel-sizes [a2a, p2p])")
    assert mlm_words("use --seq 4112, or --precision bf16") == (
        "use --seq-length 4112, or BF16 (no --fp8-format or --fp4-format)")
    assert mlm_words("needs --precision mxfp8") == "needs --fp8-format e4m3 --fp8-recipe mxfp8"


def test_a_field_offered_before_its_own_argument_is_named_once():
    """'FIELD, or --flag' with no 'add' between them had raised TypeError (None + str) in mlm_words: a traceback for
    any refusal worded that way. No message says it today; it reads as the argument alone, as 'FIELD=true, or add
    --flag' does."""
    from moetune.cli.options import mlm_words

    assert mlm_words("set model.seq_length, or --seq 4096") == "set --seq-length 4096"
    assert mlm_words("(model.tensor_model_parallel_size or --tp 1)") == "(--tensor-model-parallel-size 1)"


def test_olmoe_tp2_from_megatron_lm_arguments_names_the_flag(capsys):
    """estimate, check --model and diagnose --model of an OLMoE launch at TP 2 given as Megatron-LM arguments: each
    refusal ends with the Megatron-LM flag (diagnose had named estimate's --tp); a Bridge config keeps its field."""
    fix = "use --tensor-model-parallel-size 1"
    code, _, err = run(["estimate", OLMOE, "--gpu", "h100", "--gpus", "8", "--mlm-args", TP2_LAUNCH], capsys)
    assert code == 2 and err.rstrip().endswith(fix) and "model.tensor_model_parallel_size" not in err
    code, out, _ = run(["check", "--mlm-args", TP2_LAUNCH, "--model", OLMOE, "--gpu", "h100", "--gpus", "8", "--json"],
                       capsys)
    [message] = [f["message"] for f in json.loads(out)["findings"] if f["rule"] == "layout.illegal"]
    assert message.endswith(fix)
    code, _, err = run(["diagnose", "--model", OLMOE, "--mlm-args", TP2_LAUNCH, "--gpu", "h100", "--gpus", "8"],
                       capsys)
    assert code == 2 and err.rstrip().endswith(fix)
    code, _, err = run(["diagnose", "--model", OLMOE, "--set", "model.tensor_model_parallel_size=2", "--gpu", "h100",
                        "--gpus", "8"], capsys)
    assert code == 2 and err.rstrip().endswith("use model.tensor_model_parallel_size 1")


def test_the_uneven_split_refusal_names_both_stage_fields():
    """Layout's refusal of --account-for-* beside an uneven split had said '--first/--last-stage-layers', which the
    rewording turned into '--first/model.num_layers_in_last_pipeline_stage' (Bridge) and
    '--first/--decoder-last-pipeline-num-layers' (Megatron-LM): the first stage's field was lost."""
    import pytest

    from moetune.cli.options import config_words, mlm_words
    from moetune.errors import MoetuneError
    from moetune.layout.layout import Layout

    with pytest.raises(MoetuneError) as err:
        Layout(world_size=8, pp=2, first_stage_layers=3, account_for_embedding=True)
    assert "model.num_layers_in_first_pipeline_stage/model.num_layers_in_last_pipeline_stage" in config_words(
        str(err.value))
    assert "--decoder-first-pipeline-num-layers/--decoder-last-pipeline-num-layers" in mlm_words(str(err.value))


def test_the_deepep_refusal_names_the_dispatcher_field(capsys):
    """DeepEP at EP 1 from Megatron-LM arguments (or a config) had been told 'use --dispatcher alltoall', estimate's
    flag: --dispatcher had no entry among the flags a config rewords."""
    launch = "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep --bf16"
    code, _, err = run(["estimate", OLMOE, "--gpu", "h100", "--gpus", "8", "--mlm-args", launch], capsys)
    assert code == 2 and "use --moe-token-dispatcher-type alltoall at EP 1" in err and "--dispatcher" not in err
    code, _, err = run(["estimate", OLMOE, "--gpu", "h100", "--gpus", "8", "--set",
                        "model.moe_token_dispatcher_type=flex", "--set", "model.moe_flex_dispatcher_backend=deepep"],
                       capsys)
    assert code == 2 and "use model.moe_token_dispatcher_type alltoall at EP 1" in err


@pytest.mark.parametrize(("text", "tokens"), [("32k", 32768), ("128K", 131072), ("4096", 4096)])
def test_seq_takes_tokens_in_k(text, tokens, capsys):
    """--seq 32K had been refused as 'not a valid integer range'; K is 1024 tokens, as sequence lengths are written."""
    import json

    from moetune.cli.main import main
    assert main(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "8", "--seq", text,
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["workload"]["seq_length"] == tokens


@pytest.mark.parametrize("text", ["1e5", "0", "32KB", "-5"])
def test_seq_that_is_no_token_count_says_how_to_write_one(text, capsys):
    from moetune.cli.main import main
    assert main(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "64", "--seq", text]) == 2
    assert "write a positive whole number (32768) or one in K" in capsys.readouterr().err
