"""estimate --megatron-core X.Y of a config whose knobs the release lacks: one line naming what set them, a config's
fields in its files, a launch's arguments, or estimate's own flags. The release facts are megatron_releases.csv's
(tests/configio/test_releases.py cites them): moe_flex_dispatcher_backend and moe_hybridep_num_sms are
TransformerConfig fields from core_v0.16.0, and 0.15's cuda_graph_scope takes no moe_router (transformer_config.py
core_v0.15.0:646, one string)."""

from pathlib import Path

from cli_run import run

# Bridge's Qwen3-30B-A3B H100 recipe (HybridEP, router graphs), its graph scope narrowed to attn and moe_router
RECIPE = Path(__file__).resolve().parents[1] / "fixtures" / "bridge" / "qwen3_30b_a3b_pretrain_16gpu_h100_bf16.yaml"
CLUSTER = ["--gpu", "h100", "--gpus", "16"]


def _config(tmp_path: Path) -> Path:
    text = RECIPE.read_text()
    assert "cuda_graph_scope: [moe_router, moe_preprocess]" in text
    path = tmp_path / "qwen3.yaml"
    path.write_text(text.replace("cuda_graph_scope: [moe_router, moe_preprocess]",
                                 "cuda_graph_scope: [attn, moe_router]"))
    return path


def _refusal(args, capsys) -> str:
    code, _, err = run(["estimate", "qwen3-30b-a3b", *CLUSTER, *args, "--megatron-core", "0.15"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def test_a_config_s_knobs_are_named_as_its_fields_in_its_file(tmp_path, capsys):
    """It had said 'change the flags that set them' with no flag given."""
    config = _config(tmp_path)
    err = _refusal(["--config", str(config)], capsys)
    assert f"the config ({config}) sets what Megatron-Core 0.15 lacks: model.moe_flex_dispatcher_backend (" in err
    assert "model.moe_hybridep_num_sms (" in err and "model.cuda_graph_scope=moe_router (" in err
    assert err.strip().endswith(f"change those fields in {config}, or upgrade") and "flags" not in err
    with_set = _refusal(["--config", str(config), "--set", "model.moe_router_dtype=fp32"], capsys)
    assert f"change those fields in {config} or --set, or upgrade" in with_set


def test_a_launch_s_knobs_are_named_as_its_arguments(capsys):
    """--mlm-args: the arguments the launch wrote, not the flex dispatcher's SM count its knobs default."""
    launch = ("--bf16 --expert-model-parallel-size 8 --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend "
              "hybridep --optimizer muon")
    err = _refusal(["--mlm-args", launch], capsys)
    assert "the launch (--mlm-args) sets what Megatron-Core 0.15 lacks: --moe-flex-dispatcher-backend (" in err
    assert "--optimizer muon (Megatron-Core has it from 0.16 on)" in err
    assert "change those arguments in --mlm-args, or upgrade" in err
    assert "num-sms" not in err and "flags" not in err


def test_estimate_s_own_flags_keep_the_flag_wording(capsys):
    err = _refusal(["--ep", "8", "--dispatcher", "hybridep"], capsys)
    assert "the knobs set what Megatron-Core 0.15 lacks: model.moe_flex_dispatcher_backend (" in err
    assert "change the flags that set them, or upgrade" in err
