"""Megatron-LM's YAML form of a launch (MODEL_ARGS / ENV_VARS), with ${VAR} placeholders the launcher fills from the
environment: the Megatron-MoE-ModelZoo's DeepSeek-V3 config, as its H100 best practice runs it."""

import json

import pytest

from modelzoo_launch import H100_ENV, H100_FLAGS, MODELZOO
from moetune.cli.main import main
from moetune.configio import load_config
from moetune.configio.mlm import parse_mlm
from moetune.configio.normalize import resolve
from moetune.errors import MoetuneError


@pytest.fixture
def h100_env(monkeypatch):
    for k, v in H100_ENV.items():
        monkeypatch.setenv(k, v)


def test_modelzoo_yaml_reads_as_its_launcher_runs_it(h100_env):
    config = load_config([MODELZOO], mlm_args=H100_FLAGS, gpu="h100", gpus=1024)
    assert config["model.tensor_model_parallel_size"] == 2 and config["model.expert_model_parallel_size"] == 64
    assert config["model.num_moe_experts"] == 256 and config["model.multi_latent_attention"] is True
    assert config["env.NVTE_FUSED_ATTN"] == 1  # ENV_VARS
    assert config["mixed_precision.bf16"] is True  # the YAML's --bf16 stands beside the command line's FP8 flags
    assert config["mixed_precision.fp8_recipe"] == "blockwise"
    # PP from the YAML, the layout from the command line: 32 stages over PP 8 (was 32 / 1, then a conflict)
    assert config["model.virtual_pipeline_model_parallel_size"] == 4
    assert "comm_overlap.overlap_moe_expert_parallel_comm" in config  # commented out in the YAML, given on the line


def test_modelzoo_best_practice_checks_clean(h100_env, capsys):
    """NVIDIA's tuned DeepSeek-V3 launch passes every rule but one warning: it is a throughput benchmark, run with
    forced balance as the published rows were (tests/modelzoo_launch.py), which check says is never for training."""
    code = main(["check", str(MODELZOO), "--mlm-args", H100_FLAGS, "--gpu", "h100", "--gpus", "1024",
                 "--model", "deepseek-v3", "--json"])
    findings = json.loads(capsys.readouterr().out)["findings"]
    raised = [f["rule"] for f in findings if f["severity"] != "info"]
    assert code == 0 and raised == ["dispatcher.force_balance_not_for_training"], findings


def test_unset_placeholder_is_one_line_naming_the_variable(capsys):
    code = main(["check", str(MODELZOO), "--gpu", "h100", "--gpus", "1024"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "--tensor-model-parallel-size is '${TP}' and TP is not set" in err


@pytest.mark.parametrize(("yaml_text", "key", "value"), [
    ("MODEL_ARGS:\n  --sequence-parallel: true\n  --tensor-model-parallel-size: 2\n", "model.sequence_parallel", True),
    ("MODEL_ARGS:\n  --sequence-parallel: false\n", "model.sequence_parallel", None),  # dropped, as the harness does
    ("MODEL_ARGS:\n  --recompute-modules: [mlp, moe]\n", "model.recompute_modules", ["mlp", "moe"]),
    ("MODEL_ARGS:\n  --recompute-modules: mlp moe\n", "model.recompute_modules", ["mlp", "moe"]),
    ("MODEL_ARGS:\n  --cuda-graph-scope: '[attn, moe_router]'\n", "model.cuda_graph_scope", ["attn", "moe_router"]),
    ("MODEL_ARGS:\n  --moe-grouped-gemm: ${GG}\n", "model.moe_grouped_gemm", True),  # GG=true: the switch
    ("MODEL_ARGS:\n  --expert-model-parallel-size: ${EP:-4}\n", "model.expert_model_parallel_size", 4),
    ("TEST_TYPE: release\nMODEL_ARGS:\n  --num-layers: 4\n", "model.num_layers", 4),  # harness keys not read
])
def test_model_args_values(tmp_path, monkeypatch, yaml_text, key, value):
    monkeypatch.setenv("GG", "true")
    path = tmp_path / "model_config.yaml"
    path.write_text(yaml_text)
    assert load_config([path]).get(key) == value


def test_script_variables_resolve_as_the_shell_would():
    script = 'TP=${TP:-2}\nexport EP=8\ntorchrun pretrain_gpt.py --tensor-model-parallel-size ${TP} ' \
             '--expert-model-parallel-size $EP --pipeline-model-parallel-size "${PP}"'
    config = resolve(parse_mlm(script, "run.sh", env={"PP": "4"}))
    assert (config["model.tensor_model_parallel_size"], config["model.expert_model_parallel_size"],
            config["model.pipeline_model_parallel_size"]) == (2, 8, 4)
    assert resolve(parse_mlm(script, "run.sh", env={"PP": "4", "TP": "8"}))["model.tensor_model_parallel_size"] == 8


def test_escaped_values_read_as_the_harness_hands_them_to_megatron(tmp_path):
    """core_v0.14-0.16 functional-test configs write the pipeline layout with the escapes their harness takes off
    (an xargs pass, then an eval: _run_training.sh :112, :139), doubled backslashes before | ( and ): it runs as
    Et|(tt|)*6mL, where it had been refused as unknown layout symbols."""
    path = tmp_path / "model_config.yaml"
    path.write_text("MODEL_ARGS:\n  --pipeline-model-parallel-size: 2\n"
                    "  --pipeline-model-parallel-layout: Et\\\\|\\\\(tt\\\\|\\\\)*6mL # Et|(tt|)*6mL\n")
    config = load_config([path])
    assert config["model.pipeline_model_parallel_layout"] == "Et|(tt|)*6mL"


def test_a_layout_megatron_lm_arguments_give_is_named_by_their_flag(tmp_path):
    """A layout string that does not parse, given as --pipeline-model-parallel-layout, is named by that flag (it had
    been named by estimate's own --pipeline-layout, which the file never wrote)."""
    path = tmp_path / "model_config.yaml"
    path.write_text("MODEL_ARGS:\n  --pipeline-model-parallel-size: 2\n  --pipeline-model-parallel-layout: Et|tqL\n")
    with pytest.raises(MoetuneError, match=r"^--pipeline-model-parallel-layout 'Et\|tqL': unknown symbols \['q'\]"):
        load_config([path])
