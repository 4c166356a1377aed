"""from_config.trained_model: the MTP depth a launch config trains, which Megatron builds (and allocates) whatever the
config.json says: model.mtp_num_layers where set, none under Megatron-LM arguments that leave --mtp-num-layers out."""

import pytest

from moetune.configio.load import load_config
from moetune.errors import MoetuneError
from moetune.planner.estimate import estimate
from moetune.planner.from_config import from_config, trained_model
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model

LAYOUT = ["model.tensor_model_parallel_size=2", "model.pipeline_model_parallel_size=8",
          "model.expert_model_parallel_size=32", "model.expert_tensor_parallel_size=1",
          "model.num_layers_in_first_pipeline_stage=7", "model.num_layers_in_last_pipeline_stage=6"]


def _stages(sets=(), mlm_args=None):
    config = load_config(sets=[*LAYOUT, *sets] if mlm_args is None else list(sets), mlm_args=mlm_args, gpu="h100",
                         gpus=512)
    spec = trained_model(load_model("deepseek-v3"), config)
    e = estimate(spec, load_gpu("h100"), *from_config(config))
    return spec.mtp_num_layers, [s.params for s in e.stages]


def test_a_config_without_mtp_drops_the_mtp_layer_from_the_last_stage():
    """DeepSeek-V3's config.json has one MTP layer, which Bridge's provider trains unless the config says 0 (the
    Megatron-Core oracle gives the last rank 3,327,237,120 parameters without it, 4,319,293,440 with it)."""
    (d_mtp, default), (none_mtp, none), (two_mtp, two) = (_stages(s) for s in
                                                          ((), ["model.mtp_num_layers=0"], ["model.mtp_num_layers=2"]))
    assert (d_mtp, none_mtp, two_mtp) == (1, 0, 2)
    assert default[:-1] == none[:-1] == two[:-1]  # only the last stage holds MTP
    assert none[-1] < default[-1] < two[-1]


def test_megatron_lm_arguments_train_mtp_only_when_asked():
    args = ("--tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 --expert-model-parallel-size 32 "
            "--expert-tensor-parallel-size 1 --decoder-first-pipeline-num-layers 7 "
            "--decoder-last-pipeline-num-layers 6 --bf16")
    assert _stages(mlm_args=args)[0] == 0
    assert _stages(mlm_args=args + " --mtp-num-layers 1")[0] == 1


def test_a_bridge_config_trains_no_mtp_from_minimax_s_num_mtp_modules():
    """MiniMax-M2's config.json names its 3 MTP modules as num_mtp_modules, which Megatron Bridge's provider does not
    read (model_bridge.py CONFIG_MAPPING: num_nextn_predict_layers, mtp_num_hidden_layers) nor map: a Bridge config
    silent on mtp_num_layers trains none, one that sets it trains that many, shaped as the checkpoint's MTP layer;
    the flags' default is the same none (the flags had priced 3)."""
    config = load_config(sets=["model.pipeline_model_parallel_size=2", "model.expert_model_parallel_size=8"],
                         gpu="h100", gpus=64)
    spec = load_model("minimax-m2")
    assert spec.mtp_num_layers == 0 and trained_model(spec, config).mtp_num_layers == 0
    deeper = trained_model(spec, {**config, "model.mtp_num_layers": 2})
    assert deeper.mtp_num_layers == 2 and deeper.mtp_layer_kind.mixer == "gqa" and deeper.mtp_layer_kind.window is None


def test_check_fills_in_no_mtp_for_minimax_s_bridge_config(capsys):
    """check --model fills in the architecture a Bridge config leaves to its provider: for MiniMax-M2 no MTP, so the
    fit rules see the last stage as Bridge builds it (the peak of a config that says 0, not 3 MTP layers more: 143.6
    GiB against 154.0 on this layout)."""
    import json

    from moetune.cli.main import main
    base = ["--set", "model.pipeline_model_parallel_size=2", "--set", "model.expert_model_parallel_size=8",
            "--set", "model.tensor_model_parallel_size=4", "--gpu", "h100", "--gpus", "64", "--json"]
    assert main(["estimate", "minimax-m2", *base, "--set", "model.mtp_num_layers=0"]) == 0  # as Bridge builds it
    peak = json.loads(capsys.readouterr().out)["memory"]["peak_bytes"] / 2**30
    assert main(["check", *base, "--model", "minimax-m2"]) == 1  # it does not fit on 64 H100s
    said = [f["message"] for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"] == "fit.does_not_fit"]
    assert said and f"({peak:.1f} GiB needed per rank" in said[0]


def test_mtp_on_a_model_without_an_mtp_layer_trains_the_decoders_last_layer():
    """Megatron-LM builds each MTP layer as the decoder's last (gpt_builders.py), checkpoint or not; a hybrid Mamba
    stack builds none (MambaModel), so that one is refused."""
    config = load_config(sets=["model.mtp_num_layers=1"], gpu="h100", gpus=8)
    model = trained_model(load_model("qwen3-30b-a3b"), config)
    assert model.mtp_num_layers == 1 and model.mtp_layer_kind == model.layers[-1]
    with pytest.raises(MoetuneError, match="builds no MTP block"):
        trained_model(load_model("nemotron3-nano-30b-a3b"), config)


def test_the_last_stage_without_mtp_is_what_megatron_core_builds(shared_data):
    pytest.importorskip("megatron.core")
    import json

    from moetune.oracle import count_params_per_stage, padded_vocab_size
    hf = json.loads((shared_data / "models" / "deepseek-v3.config.json").read_text())
    theirs = count_params_per_stage(hf, tp=2, pp=8, ep=32, etp=1, world_size=512,
                                    padded_vocab_size=padded_vocab_size(hf["vocab_size"], 2, divisible_by=1280),
                                    num_layers_in_first_pipeline_stage=7, num_layers_in_last_pipeline_stage=6,
                                    include_mtp=False)
    assert _stages(["model.mtp_num_layers=0"])[1] == theirs


@pytest.mark.parametrize("divisor, how", [
    (1280, {}),  # a Bridge launch: deepseek_v3_bridge.py sets provider.make_vocab_size_divisible_by = 1280
    (128, {"sets": ["model.make_vocab_size_divisible_by=128"]}),  # a config's own padding
    (128, {"mlm_args": "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 --expert-model-parallel-size "
                       "32 --expert-tensor-parallel-size 1 --decoder-first-pipeline-num-layers 7 "
                       "--decoder-last-pipeline-num-layers 6 --mtp-num-layers 1 --bf16"}),  # Megatron-LM's default
])
def test_the_vocabulary_padding_of_the_launch_is_what_megatron_core_builds(shared_data, divisor, how):
    """Bridge's DeepSeek-V3 bridge pads the vocabulary to 1280 x TP, Megatron-LM to 128 x TP: at TP2 that is 1,280
    rows of embedding and output layer on the first and last stages apart (docs/oracle.md)."""
    pytest.importorskip("megatron.core")
    import json

    from moetune.oracle import count_params_per_stage, padded_vocab_size
    hf = json.loads((shared_data / "models" / "deepseek-v3.config.json").read_text())
    def oracle(d):
        return count_params_per_stage(hf, tp=2, pp=8, ep=32, etp=1, world_size=512,
                                      padded_vocab_size=padded_vocab_size(hf["vocab_size"], 2, divisible_by=d),
                                      num_layers_in_first_pipeline_stage=7, num_layers_in_last_pipeline_stage=6)
    ours = _stages(how.get("sets", ()), how.get("mlm_args"))[1]
    assert ours == oracle(divisor)
    assert ours != oracle(1408 - divisor)  # the other launcher's padding (1280 <-> 128) differs


def test_a_saved_estimate_keeps_the_mtp_depth_and_padding_it_was_made_with():
    from moetune.planner.from_json import estimate_from_json
    config = load_config(sets=[*LAYOUT, "model.mtp_num_layers=0", "model.make_vocab_size_divisible_by=1280"],
                         gpu="h100", gpus=512)
    e = estimate(trained_model(load_model("deepseek-v3"), config), load_gpu("h100"), *from_config(config))
    again = estimate_from_json(e.to_json())
    assert (again.model.mtp_num_layers, again.model.vocab_divisor) == (0, 1280)
    assert [s.params for s in again.stages] == [s.params for s in e.stages]


def test_a_run_without_the_model_s_mtp_layer_says_so_in_its_overrides():
    """Bridge's DeepSeek-V3 provider adds the config.json's MTP layer back unless the overrides unset it: a plan or
    estimate trained without it writes model.mtp_num_layers=None, one with it writes 1."""
    from moetune.emit import emit_all
    from moetune.planner.config_map import to_config
    for sets, want in ((["model.mtp_num_layers=0"], None), ([], 1)):
        config = load_config(sets=[*LAYOUT, *sets], gpu="h100", gpus=512)
        e = estimate(trained_model(load_model("deepseek-v3"), config), load_gpu("h100"), *from_config(config))
        written = to_config(e)
        assert "model.mtp_num_layers" in written and written["model.mtp_num_layers"] == want
        assert f"model.mtp_num_layers={'null' if want is None else want}" in emit_all(written)["overrides.txt"]


def test_a_megatron_lm_launch_reports_tflops_as_megatron_lm_counts(capsys):
    """gpt-oss trains with --quick-geglu, which Megatron-LM's counter does not take for a 3-GEMM unit (training.py:
    ffn factor 3 only under --swiglu) and Bridge's does (any gated_linear_unit): the same step, two TFLOP/s figures,
    each the one its launcher's log prints (walls/model_flops.py conventions)."""
    import json

    from moetune.cli.main import main
    from moetune.walls.model_flops import megatron_model_flops
    args = ("--tensor-model-parallel-size 2 --expert-model-parallel-size 8 --expert-tensor-parallel-size 1 --bf16 "
            "--quick-geglu --seq-length 4096 --global-batch-size 512 --micro-batch-size 1")
    assert main(["estimate", "gpt-oss-120b", "--mlm-args", args, "--gpu", "h100", "--gpus", "64", "--json"]) == 0
    t = json.loads(capsys.readouterr().out)["time"]
    assert t["flops_convention"] == "megatron-lm"
    spec = load_model("gpt-oss-120b")
    flops = {c: megatron_model_flops(spec, 4096, 512, tp=2, convention=c) for c in ("megatron-lm", "bridge")}
    assert flops["bridge"] / flops["megatron-lm"] > 1.15  # the gated MLP counted 3 GEMMs against 2
    assert t["tflops_per_gpu"] == pytest.approx(flops["megatron-lm"] / t["step_seconds"] / 64 / 1e12, rel=1e-9)
