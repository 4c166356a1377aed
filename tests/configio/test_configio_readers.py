"""Bridge YAML, JSON and dotted-override inputs normalize to one flat config of Bridge dotted names."""

import json
from pathlib import Path

import pytest

from moetune.configio import load_config
from moetune.errors import MoetuneError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bridge"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_bridge_recipe_yaml_normalizes():
    config = load_config([FIXTURES / "qwen3_30b_a3b_pretrain_16gpu_h100_bf16.yaml"], gpu="h100", gpus=16)
    # Layout and knobs as the recipe sets them (recipes/qwen/h100/qwen3_moe.py).
    assert config["model.expert_model_parallel_size"] == 16
    assert config["model.moe_token_dispatcher_type"] == "flex"
    assert config["model.moe_flex_dispatcher_backend"] == "hybridep"
    assert config["model.cuda_graph_scope"] == ["moe_router", "moe_preprocess"]
    assert config["comm_overlap.tp_comm_overlap"] is True
    # Dumped torch dtypes ({_target_: torch.bfloat16}) and env_vars are understood.
    assert config["mixed_precision.params_dtype"] == "bfloat16"
    assert config["model.pipeline_dtype"] == "bfloat16"
    assert config["env.TORCH_NCCL_HIGH_PRIORITY"] == 1
    assert config["cluster.gpu"] == "h100" and config["cluster.num_gpus"] == 16
    assert not any(k.endswith(("_target_", "_call_")) for k in config)


def test_mixed_precision_recipe_name_expands():
    config = load_config(sets=["mixed_precision=bf16_with_mxfp8_mixed"])
    assert config["mixed_precision.fp8"] == "e4m3" and config["mixed_precision.fp8_recipe"] == "mxfp8"
    assert config["mixed_precision.bf16"] is True
    # A field set after the recipe name refines it instead of contradicting it.
    refined = load_config(sets=["mixed_precision=bf16_with_mxfp8_mixed", "mixed_precision.fp8_recipe=blockwise"])
    assert refined["mixed_precision.fp8_recipe"] == "blockwise"


@pytest.mark.parametrize(("given", "canonical", "value"), [
    ("model.overlap_moe_expert_parallel_comm=true", "comm_overlap.overlap_moe_expert_parallel_comm", True),
    ("model.delay_wgrad_compute=true", "comm_overlap.delay_wgrad_compute", True),
    ("model.fp8=e4m3", "mixed_precision.fp8", "e4m3"),
    ("model.cuda_graph_modules=[attn,moe_router]", "model.cuda_graph_scope", ["attn", "moe_router"]),
    ("++env_vars.NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=8", "env.NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN", 8),
])
def test_aliases_fold_to_one_name(given, canonical, value):
    config = load_config(sets=[given])
    assert config == {canonical: value}


def test_cuda_graph_scope_forms_agree():
    forms = ["model.cuda_graph_scope=attn,moe_router", "model.cuda_graph_scope=[attn,moe_router]",
             "model.cuda_graph_scope=[CudaGraphScope.attn,CudaGraphScope.moe_router]"]
    assert {tuple(load_config(sets=[f])["model.cuda_graph_scope"]) for f in forms} == {("attn", "moe_router")}
    assert load_config(sets=["model.cuda_graph_scope=full"])["model.cuda_graph_scope"] == []


# Megatron Bridge @067f987 perf_recipes/gpt_oss/common.py _apply_gpt_oss_20b_local_graph_configs (used by
# gpt_oss_20b_pretrain_8gpu_b300_fp8mx_config and its GB200/GB300/VR200 siblings) sets cuda_graph_impl="local",
# cuda_graph_modules="full_iteration" and cuda_graph_scope=None; Bridge's set_cuda_graph_modules writes the same pair,
# and a YAML dump of a Megatron-Core-normalized config carries both fields. A None scope is the deprecated alias left
# unset (transformer_config.py @ core_v0.18.2), not an empty scope that contradicts the modules.
@pytest.mark.parametrize("modules", ["full_iteration", "[attn,moe_router]"])
def test_unset_deprecated_scope_beside_cuda_graph_modules(tmp_path, modules):
    sets = ["model.cuda_graph_impl=local", f"model.cuda_graph_modules={modules}", "model.cuda_graph_scope=null"]
    expected = load_config(sets=sets[:2])["model.cuda_graph_scope"]
    assert load_config(sets=sets)["model.cuda_graph_scope"] == expected
    yaml_file = write(tmp_path, "c.yaml", f"model:\n  cuda_graph_modules: {modules}\n  cuda_graph_scope: null\n")
    assert load_config([yaml_file])["model.cuda_graph_scope"] == expected
    # alone, a None scope is still Megatron-Core's default (the whole layer), and a set one still contradicts
    assert load_config(sets=["model.cuda_graph_scope=null"])["model.cuda_graph_scope"] == []
    with pytest.raises(MoetuneError, match="contradictory"):
        load_config(sets=["model.cuda_graph_modules=[attn]", "model.cuda_graph_scope=[moe_router]"])


def test_sources_override_in_order_and_tilde_deletes(tmp_path):
    yaml_file = write(tmp_path, "c.yaml", "model:\n  tensor_model_parallel_size: 2\n  sequence_parallel: true\n")
    mlm = "--tensor-model-parallel-size 4"
    config = load_config([yaml_file], mlm_args=mlm, sets=["~model.sequence_parallel"])
    assert config["model.tensor_model_parallel_size"] == 4
    assert "model.sequence_parallel" not in config


def test_overrides_file_with_pragma_and_json(tmp_path):
    text = ("# moetune: cluster.gpu=gb200\n# moetune: cluster.num_gpus=64\n# a comment\n"
            "model.expert_model_parallel_size=64\n++env_vars.USE_MNNVL=1\nmodel.moe_token_dispatcher_type=\"flex\"\n")
    config = load_config([write(tmp_path, "overrides.txt", text)])
    assert config == {"cluster.gpu": "gb200", "cluster.num_gpus": 64, "env.USE_MNNVL": 1,
                      "model.expert_model_parallel_size": 64, "model.moe_token_dispatcher_type": "flex"}
    as_json = write(tmp_path, "plan.json", json.dumps({"config": config}))
    assert load_config([as_json]) == config


def test_hydra_values_parse_like_hydra():
    config = load_config(sets=["optimizer.lr=1e-4", "model.recompute_modules=[layernorm,moe_act]",
                               "model.recompute_granularity=null", "train.manual_gc=True"])
    assert config["optimizer.lr"] == pytest.approx(1e-4)
    assert config["model.recompute_modules"] == ["layernorm", "moe_act"]
    assert config["model.recompute_granularity"] is None and config["train.manual_gc"] is True


def test_passthrough_sections_are_kept_unchecked():
    config = load_config(sets=["dataset.enable_in_batch_packing=true", "logger.log_interval=5"])
    assert config == {"dataset.enable_in_batch_packing": True, "logger.log_interval": 5}


def test_a_result_json_needs_the_planner_reader_handed_in(tmp_path):
    """configio sits below the planner: it reads estimate/plan results only through the reader its caller passes."""
    from moetune.layout.knobs import Knobs
    from moetune.layout.layout import Layout
    from moetune.layout.validate import Workload
    from moetune.planner import to_config as result_config
    from moetune.planner.estimate import estimate
    from moetune.specs.hardware import load_gpu
    from moetune.specs.registry import load_model
    est = estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), Layout(world_size=16, ep=8),
                   Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256), Knobs())
    path = write(tmp_path, "estimate.json", json.dumps(est.to_json()))
    with pytest.raises(MoetuneError, match="no \"config\" object"):
        load_config([path])
    config = load_config([path], from_result=result_config)
    assert config["model.expert_model_parallel_size"] == 8


def test_bridge_list_layout_becomes_megatron_layout_string():
    """Bridge recipes write the pipeline layout as stages of layer names (DeepSeek-V3's GB200 recipe); Megatron-Core
    reads both forms (pipeline_parallel_layer_layout.py), moetune normalizes to the string its layout parser reads."""
    config = load_config([FIXTURES / "deepseek_v3_pretrain_256gpu_gb200_bf16.yaml"], gpu="gb200", gpus=256)
    assert config["model.pipeline_model_parallel_layout"] == "Etttt|" + "tttt|" * 14 + "tmL"


def test_check_with_model_reads_a_list_layout(capsys):
    """`check --model` maps the config onto a layout (memory wall): the list form used to raise a TypeError there."""
    from moetune.cli.main import main

    code = main(["check", str(FIXTURES / "deepseek_v3_pretrain_256gpu_gb200_bf16.yaml"), "--gpu", "gb200",
                 "--gpus", "256", "--model", "deepseek-v3", "--json"])
    found = {f["rule"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    assert code == 0 and not [r for r, f in found.items() if f["severity"] == "error"]


def test_a_model_config_json_given_as_a_launch_config_says_it_is_the_model(tmp_path, shared_data):
    """A Hugging Face config.json passed where a launch config goes (check FILE, estimate --config FILE) had been
    asked for '{"config": ...}' or, under check, for a saved result's 'layout': it names what the file is and where
    it goes."""
    path = shared_data / "models" / "phi-3.5-moe.config.json"
    for reader in (None, lambda data: {}):
        with pytest.raises(MoetuneError, match=r"a Hugging Face model config.json \(model_type 'phimoe'\), not a "
                                               r"launch config .*check --model FILE"):
            load_config([path], from_result=reader)


@pytest.mark.parametrize("key", ["recompute_modules", "offload_modules"])
def test_a_yaml_string_for_a_module_list_is_refused(tmp_path, key):
    """Bridge hands a YAML string to Megatron-Core as it is, and its set(recompute_modules) check reads the letters:
    one line asks for the list. A list, and moetune's own --set of one name, read as before."""
    path = write(tmp_path, "c.yaml", f"model:\n  {key}: core_attn,mlp\n")
    with pytest.raises(MoetuneError, match=rf"model.{key}: 'core_attn,mlp' is one string.*\[core_attn, mlp\]"):
        load_config([path])
    assert load_config([write(tmp_path, "l.yaml", f"model:\n  {key}: [core_attn]\n")])[f"model.{key}"] == \
        ["core_attn"]
    assert load_config(sets=[f"model.{key}=core_attn"])[f"model.{key}"] == ["core_attn"]
