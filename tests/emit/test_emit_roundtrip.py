"""Round trip: for several plans, what emit writes, read back by check, gives the same layout and knobs and no
errors -- through the dotted overrides, the Megatron-LM arguments and the Python snippet."""

import ast
import sys
import types
from pathlib import Path

import pytest
from emit_plans import PLANS

from moetune.configio import load_config
from moetune.configio.names import NO_DEFAULT, names
from moetune.configio.normalize import Assignment, resolve
from moetune.emit import emit_all
from moetune.planner.config_map import PRECISION
from moetune.rules import evaluate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bridge"


def plan_config(name):
    return resolve(Assignment(key=k, value=v, origin=name) for k, v in PLANS[name].items())


def effective(config, key):
    if key in config:
        return config[key]
    default = names().default(key)
    return None if default is NO_DEFAULT else default


def errors(config):
    return [f.rule for f in evaluate(config, context="explain") if f.severity == "error"]


def emitted(tmp_path, config):
    for fname, text in emit_all(config).items():
        (tmp_path / fname).write_text(text)
    return tmp_path


CONFIGS = {**{n: (lambda n=n: plan_config(n)) for n in PLANS},
           "recipe_qwen3_16gpu": lambda: load_config([FIXTURES / "qwen3_30b_a3b_pretrain_16gpu_h100_bf16.yaml"],
                                                    gpu="h100", gpus=16)}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_bridge_overrides_round_trip(tmp_path, name):
    config = CONFIGS[name]()
    back = load_config([emitted(tmp_path, config) / "overrides.txt"])
    assert {k: back.get(k) for k in config} == config
    assert errors(back) == [] == errors(config)


@pytest.mark.parametrize("name", sorted(PLANS))
def test_megatron_lm_args_round_trip(tmp_path, name):
    config = plan_config(name)
    back = load_config([emitted(tmp_path, config) / "megatron_lm_args.txt"])
    with_flags = [k for k in config if k.startswith("cluster.") or names().get(k).mlm_flag]
    assert {k: effective(back, k) for k in with_flags} == {k: config[k] for k in with_flags}
    # The knobs a plan sets all have Megatron-LM flags, except env vars (exported by env.sh).
    assert [k for k in config if k not in with_flags and not k.startswith("env.")] == []
    assert errors(back) == []
    # ... and env.sh reads back with them: the launch as torchrun.sh runs it
    launch = load_config([tmp_path / "env.sh", tmp_path / "megatron_lm_args.txt"])
    assert {k: str(launch.get(k)) for k in config if k.startswith("env.")} == \
        {k: str(v) for k, v in config.items() if k.startswith("env.")}


# Megatron Bridge's presets as training/mixed_precision.py defines them: (fp8, fp8_recipe, fp4)
BRIDGE_PRESETS = {"bf16_mixed": (None, None, None),
                  "bf16_with_fp8_subchannel_scaling_mixed": ("hybrid", "blockwise", None),
                  "bf16_with_mxfp8_mixed": ("e4m3", "mxfp8", None),
                  "bf16_with_fp8_current_scaling_mixed": ("hybrid", "tensorwise", None),
                  "bf16_with_fp8_delayed_scaling_mixed": ("hybrid", "delayed", None),
                  "bf16_with_nvfp4_mixed": (None, None, "e2m1")}


def _stub_bridge(monkeypatch):
    """Stand-ins for the two Bridge imports the snippet makes (Bridge is not installed in this suite)."""
    class CommOverlapConfig(types.SimpleNamespace):
        def __init__(self, tp_comm_overlap):
            super().__init__(tp_comm_overlap=tp_comm_overlap)

    def get_mixed_precision_config(value):
        fp8, recipe, fp4 = BRIDGE_PRESETS[value]
        return types.SimpleNamespace(fp8=fp8, fp8_recipe=recipe or "tensorwise", fp4=fp4, preset=value)

    for mod, attrs in {"megatron.bridge": {}, "megatron.bridge.training": {},
                       "megatron.bridge.training.comm_overlap": {"CommOverlapConfig": CommOverlapConfig},
                       "megatron.bridge.training.mixed_precision":
                           {"get_mixed_precision_config": get_mixed_precision_config}}.items():
        monkeypatch.setitem(sys.modules, mod, types.SimpleNamespace(**attrs))


@pytest.mark.parametrize("name", sorted(PLANS))
def test_python_snippet_sets_the_same_knobs(monkeypatch, name):
    config = plan_config(name)
    source = emit_all(config)["bridge_overrides.py"]
    ast.parse(source)
    _stub_bridge(monkeypatch)
    namespace: dict = {}
    exec(compile(source, "bridge_overrides.py", "exec"), namespace)  # our own generated text, stubs only
    sections = {k.split(".", 1)[0] for k in config} - {"cluster", "env"}
    cfg = types.SimpleNamespace(comm_overlap=None, mixed_precision=None, env_vars={},
                                **{s: types.SimpleNamespace() for s in sections - {"comm_overlap", "mixed_precision"}})
    cfg = namespace["apply_overrides"](cfg)
    for key, value in config.items():
        section, field = key.split(".", 1)
        if section == "cluster":
            continue
        got = cfg.env_vars[field] if section == "env" else getattr(getattr(cfg, section), field)
        if names().get(key) is not None and names().get(key).type.startswith("dtype"):  # torch dtypes, as Bridge
            got, value = str(got), f"torch.{value}"  # recipes hold them
        assert got == value, key


@pytest.mark.parametrize(("recipe", "plan", "kept"), [
    ("bf16_with_mxfp8_mixed", "bf16", False),  # a BF16 plan over an MXFP8 recipe: the recipe's FP8 must not survive
    ("bf16_with_mxfp8_mixed", "mxfp8", True),  # the same family: the recipe's own tuning stays
    ("bf16_with_fp8_subchannel_scaling_mixed", "nvfp4", False),  # FP4 beside FP8 is refused by Bridge
])
def test_python_snippet_replaces_a_recipes_precision_of_another_family(monkeypatch, recipe, plan, kept):
    config = {**plan_config("dsv3_gb200_hybridep"), **{k: None for k in ("mixed_precision.fp8",
                                                                          "mixed_precision.fp4")}}
    config.update({k: v for k, v in PRECISION[plan].items()})
    _stub_bridge(monkeypatch)
    namespace: dict = {}
    exec(compile(emit_all(config)["bridge_overrides.py"], "bridge_overrides.py", "exec"), namespace)
    sections = {k.split(".", 1)[0] for k in config} - {"cluster", "env", "comm_overlap", "mixed_precision"}
    held = namespace["get_mixed_precision_config"](recipe)
    held.fp8_param_gather = True  # a recipe's own tuning
    cfg = types.SimpleNamespace(comm_overlap=None, mixed_precision=held, env_vars={},
                                **{s: types.SimpleNamespace() for s in sections})
    mp = namespace["apply_overrides"](cfg).mixed_precision
    assert (mp is held) is kept and getattr(mp, "fp8_param_gather", False) is kept
    assert (mp.fp8, mp.fp4) == (PRECISION[plan].get("mixed_precision.fp8"), PRECISION[plan].get("mixed_precision.fp4"))


@pytest.mark.parametrize("fname", ["overrides.txt", "megatron_lm_args.txt"])
def test_a_cluster_file_gpu_reads_back_from_either_file(tmp_path, fname):
    """A plan on a cluster .toml names the file in `# moetune: cluster.gpu=...`, quoted as an override value; both
    emitted files read it back as the path (the Megatron-LM reader had kept the quotes)."""
    cluster = tmp_path / "cl.toml"
    cluster.write_text('gpu = "h100"\nmemory_gib = 70\n')
    config = {**plan_config(next(iter(PLANS))), "cluster.gpu": str(cluster)}
    (tmp_path / fname).write_text(emit_all(config)[fname])
    assert load_config([tmp_path / fname])["cluster.gpu"] == str(cluster)


def test_megatron_lm_args_without_mtp_check_as_they_run(tmp_path, capsys):
    """GLM-4.5-Air trained without its MTP layer: the emitted Megatron-LM arguments carry no --mtp-num-layers, which is
    no MTP there (estimate --config reads it so); check --model had filled the model's one MTP layer back in and
    refused the launch (its layout string places none)."""
    from moetune.cli.main import main
    assert main(["plan", "glm-4.5-air", "--gpu", "h100", "--gpus", "64", "--gbs", "512", "--mtp-layers", "0",
                 "--top", "1", "--json"]) == 0
    saved = tmp_path / "e.json"
    saved.write_text(capsys.readouterr().out)
    assert main(["emit", str(saved), "--out", str(tmp_path / "out")]) == 0
    assert "--mtp-num-layers" not in (tmp_path / "out" / "megatron_lm_args.txt").read_text()
    code = main(["check", str(tmp_path / "out" / "env.sh"), str(tmp_path / "out" / "megatron_lm_args.txt"), "--gpu",
                 "h100", "--gpus", "64", "--model", "glm-4.5-air"])
    assert code == 0, capsys.readouterr().out
