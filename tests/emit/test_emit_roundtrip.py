"""Round trip: for several plans, what emit writes, read back by check, gives the same layout and knobs and no
errors -- through the dotted overrides, the Megatron-LM arguments and the Python snippet."""

import ast
import re
import sys
import types
from pathlib import Path

import pytest
from bridge_sections import section as section_stub
from emit_plans import MLM_BASE, MLM_LAUNCHES, MLM_UNSET, PLANS

from modelzoo_launch import H100_ENV, MODELZOO
from moetune.configio import load_config
from moetune.configio.names import NO_DEFAULT, names
from moetune.configio.normalize import Assignment, resolve
from moetune.emit import emit_all
from moetune.emit.values import sections as by_section
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.config_map import to_config
from moetune.planner.estimate import estimate
from moetune.planner.from_config import from_config
from moetune.planner.knob_fields import PRECISION
from moetune.rules import evaluate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model

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
    def CommOverlapConfig(tp_comm_overlap):  # noqa: N802 (Bridge's class name)
        return section_stub("comm_overlap", tp_comm_overlap=tp_comm_overlap)

    def get_mixed_precision_config(value):
        fp8, recipe, fp4 = BRIDGE_PRESETS[value]
        return section_stub("mixed_precision", fp8=fp8, fp8_recipe=recipe or "tensorwise", fp4=fp4, preset=value,
                            fp8_param_gather=False)

    for mod, attrs in {"megatron.bridge": {}, "megatron.bridge.training": {},
                       "megatron.bridge.training.comm_overlap": {"CommOverlapConfig": CommOverlapConfig},
                       "megatron.bridge.training.mixed_precision":
                           {"get_mixed_precision_config": get_mixed_precision_config}}.items():
        monkeypatch.setitem(sys.modules, mod, types.SimpleNamespace(**attrs))


def _snippet_over_stubs(monkeypatch, config, lacking=()):
    """bridge_overrides.py of CONFIG applied to stand-in sections holding every field but LACKING (dotted names)."""
    source = emit_all(config)["bridge_overrides.py"]
    ast.parse(source)
    _stub_bridge(monkeypatch)
    namespace: dict = {}
    exec(compile(source, "bridge_overrides.py", "exec"), namespace)  # our own generated text, stubs only
    sections = {k.split(".", 1)[0] for k in config} - {"cluster", "env", "comm_overlap", "mixed_precision"}
    cfg = types.SimpleNamespace(comm_overlap=None, mixed_precision=None, env_vars={},
                                **{s: section_stub(s) for s in sections})
    for key in lacking:
        delattr(getattr(cfg, key.split(".")[0]), key.split(".", 1)[1])
    return namespace["apply_overrides"](cfg)


# The one SM-count field of Megatron-Core from 0.16 on, which the snippet sets in place of the backend's own there
FLEX_SMS = "model.moe_flex_dispatcher_num_sms"


@pytest.mark.parametrize("lacking", [(), (FLEX_SMS,)], ids=["main", "before-flex-sms"])
@pytest.mark.parametrize("name", sorted(PLANS))
def test_python_snippet_sets_the_same_knobs(monkeypatch, name, lacking):
    config = plan_config(name)
    cfg = _snippet_over_stubs(monkeypatch, config, lacking)
    for key, value in config.items():
        section, field = key.split(".", 1)
        if section == "cluster":
            continue
        got = cfg.env_vars[field] if section == "env" else getattr(getattr(cfg, section), field)
        if re.fullmatch(r"moe_(deepep|hybridep)_num_sms", field) and got is None and not lacking:
            got = getattr(cfg.model, FLEX_SMS.split(".", 1)[1])  # main's one field takes the backend's count
        if names().get(key) is not None and names().get(key).type.startswith("dtype"):  # torch dtypes, as Bridge
            got, value = str(got), f"torch.{value}"  # recipes hold them
        assert got == value, key


def test_python_snippet_stops_at_a_planned_field_the_installed_release_lacks(monkeypatch):
    """A Megatron-Core without moe_flex_dispatcher_backend (before 0.16) under a HybridEP plan: the snippet stops and
    names the field, as Bridge's dotted overrides stop (struct mode). It had assigned it as a new attribute, which
    nothing reads: the job would have run the release's DeepEP-only flex dispatcher and not said so."""
    config = plan_config("dsv3_gb200_hybridep")
    assert config["model.moe_flex_dispatcher_backend"] == "hybridep"
    with pytest.raises(AttributeError, match=r"cfg\.model has no field moe_flex_dispatcher_backend in this"):
        _snippet_over_stubs(monkeypatch, config, lacking=("model.moe_flex_dispatcher_backend",))


def test_python_snippet_passes_over_a_missing_field_it_holds_at_megatrons_default(monkeypatch):
    """A field the plan holds at Megatron's default (shared-expert overlap off) that the installed release lacks: that
    release runs the default anyway, so the snippet leaves it unset and goes on (emit --megatron-core drops it so)."""
    config = plan_config("dsv3_gb200_hybridep")
    assert config["model.moe_shared_expert_overlap"] is False
    cfg = _snippet_over_stubs(monkeypatch, config, lacking=("model.moe_shared_expert_overlap",))
    assert not hasattr(cfg.model, "moe_shared_expert_overlap") and cfg.model.expert_model_parallel_size == \
        config["model.expert_model_parallel_size"]


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
                                **{s: section_stub(s) for s in sections})
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


# A recipe that recomputes (mla_up_proj), trains an MTP layer, splits its pipeline by a layout string into VPP 4 and
# graphs attention and the router under HybridEP: none of it may survive under a Megatron-LM launch that leaves it off
RECIPE = FIXTURES / "deepseek_v3_pretrain_256gpu_gb200_bf16.yaml"


def _over_recipe(tmp_path, config):
    """The config the recipe runs once emit's dotted overrides of `config` are applied to it."""
    return load_config([RECIPE, emitted(tmp_path, config) / "overrides.txt"])


@pytest.mark.parametrize("name", sorted(MLM_LAUNCHES))
def test_megatron_lm_launch_over_a_recipe_runs_as_megatron_lm(tmp_path, name):
    """Megatron-LM arguments -> Bridge overrides -> over a recipe: the settings Megatron-LM runs, the ones the
    arguments leave out included (emit had left those to the recipe: its recompute, MTP layer and layout string)."""
    extra, expected = MLM_LAUNCHES[name]
    mlm = load_config(mlm_args=f"{MLM_BASE} {extra}", gpu="gb200", gpus=64)
    ran = _over_recipe(tmp_path, mlm)
    want = {**MLM_UNSET, **expected}
    assert {k: ran.get(k) for k in want} == want
    (layout, workload, knobs), (mlm_layout, mlm_workload, mlm_knobs) = from_config(ran), from_config(mlm)
    assert (layout, knobs) == (mlm_layout, mlm_knobs)  # the layout and knobs moetune reads of each
    assert workload.seq_length == mlm_workload.seq_length
    assert errors(ran) == []


@pytest.mark.parametrize("name", sorted(MLM_LAUNCHES))
def test_python_snippet_of_a_megatron_lm_launch_over_a_recipe(monkeypatch, name):
    extra, expected = MLM_LAUNCHES[name]
    source = emit_all(load_config(mlm_args=f"{MLM_BASE} {extra}", gpu="gb200", gpus=64))["bridge_overrides.py"]
    _stub_bridge(monkeypatch)
    namespace: dict = {}
    exec(compile(source, "bridge_overrides.py", "exec"), namespace)  # our own generated text, stubs only
    recipe = by_section(load_config([RECIPE]))  # its ConfigContainer, with a section for each the snippet sets
    named = (set(recipe) | set(re.findall(r"_assign\('(\w+)'", source))) - {"mixed_precision", "env_vars"}
    cfg = types.SimpleNamespace(mixed_precision=None, env_vars={},
                                **{s: section_stub(s, **recipe.get(s, {})) for s in named})
    cfg = namespace["apply_overrides"](cfg)
    want = {**MLM_UNSET, **expected}
    assert {k: getattr(getattr(cfg, k.split(".")[0]), k.split(".", 1)[1], "(unset)") for k in want} == want


def test_modelzoo_model_args_over_a_recipe_run_without_recompute_or_mtp(tmp_path, monkeypatch):
    """The ModelZoo's DeepSeek-V3 YAML leaves recompute and MTP commented out: over DeepSeek-V3's recipe, neither
    runs."""
    for k, v in H100_ENV.items():
        monkeypatch.setenv(k, v)
    ran = _over_recipe(tmp_path, load_config([MODELZOO], gpu="h100", gpus=1024))
    assert {k: ran.get(k) for k in ("model.recompute_granularity", "model.mtp_num_layers",
                                    "model.pipeline_model_parallel_layout", "model.cuda_graph_impl")} == \
        {"model.recompute_granularity": None, "model.mtp_num_layers": None,
         "model.pipeline_model_parallel_layout": None, "model.cuda_graph_impl": "none"}


def test_a_bridge_config_leaves_to_its_recipe_what_it_leaves_out():
    """A Bridge YAML's omitted field is the recipe's value: emit writes what the YAML sets and nothing else (guard:
    the resets above are a Megatron-LM launch's)."""
    config = load_config([FIXTURES / "qwen3_30b_a3b_pretrain_16gpu_h100_bf16.yaml"], gpu="h100", gpus=16)
    written = {line.split("=", 1)[0] for line in emit_all(config)["overrides.txt"].splitlines()
               if line and not line.startswith(("#", "++"))}
    assert written - set(config) <= {f"comm_overlap.{f}" for f in ("overlap_grad_reduce", "overlap_param_gather")}
    assert "model.mtp_num_layers" not in written


@pytest.mark.parametrize("precision", ["mxfp8", "bf16"])
def test_a_plan_over_a_recipe_that_overlaps_the_optimizer_step(tmp_path, capsys, precision):
    """DeepSeek-V3's BF16 perf recipe overlaps the first parameter gather with the optimizer step, which
    Megatron-Core refuses beside MXFP8's reused grad buffer (optimizer_config.py): an MXFP8 plan over it turns the
    overlap off on both sections Bridge reads (it had kept the recipe's, and Megatron-Core would refuse the run); a
    BF16 plan that gathers parameters leaves the recipe's."""
    from moetune.cli.main import main

    preset = {"mxfp8": "bf16_with_mxfp8_mixed", "bf16": "bf16_mixed"}[precision]
    assert main(["estimate", "deepseek-v3", "--config", str(RECIPE), "--gpu", "gb200", "--gpus", "256", "--set",
                 f"mixed_precision={preset}", "--json"]) in (0, 1)  # the recipe's own layout, this precision
    (tmp_path / "e.json").write_text(capsys.readouterr().out)
    # the perf recipe routes force-balanced (a benchmark): emit writes it with --benchmark
    assert main(["emit", str(tmp_path / "e.json"), "--benchmark", "--out", str(tmp_path / "out")]) == 0
    ran = load_config([RECIPE, tmp_path / "out" / "overrides.txt"])
    keys = ("optimizer.overlap_param_gather_with_optimizer_step",
            "comm_overlap.overlap_param_gather_with_optimizer_step")
    assert [ran.get(k) for k in keys] == [precision != "mxfp8"] * 2
    assert "optimizer.mxfp8_reuse_step_overlap" not in errors(ran)


@pytest.mark.parametrize("dispatcher", ["", "--moe-token-dispatcher-type alltoall"])
def test_megatron_lm_launch_off_flex_emits_no_flex_backend(tmp_path, dispatcher):
    """A Megatron-LM launch that runs allgather (no --moe-token-dispatcher-type) or alltoall: its overrides leave the
    flex backend out (Megatron-LM's default deepep does nothing off flex), so a check of them warns as one of the
    launch does; emit had written moe_flex_dispatcher_backend=deepep, which dispatcher.flex_activation warned on."""
    mlm = load_config(mlm_args=f"{MLM_BASE} {dispatcher}", gpu="h100", gpus=64)
    written = emitted(tmp_path, mlm) / "overrides.txt"
    assert "model.moe_flex_dispatcher_backend" not in written.read_text()

    def warnings(config):
        return sorted(f.rule for f in evaluate(config) if f.severity == "warning")
    assert warnings(load_config([written])) == warnings(mlm)


def test_megatron_lm_launch_given_experts_by_set_emits_no_flex_backend(tmp_path):
    """The experts set with --set over a dense launch: the launch states no dispatcher, so it runs Megatron-LM's
    allgather, and the filled-in overrides carry no flex backend (the gate had read a dispatcher left out as flex)."""
    dense = "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 --bf16"
    mlm = load_config(mlm_args=dense, sets=["model.num_moe_experts=8", "model.moe_router_topk=2"], gpu="h100",
                      gpus=8)
    written = emitted(tmp_path, mlm) / "overrides.txt"
    assert "model.moe_token_dispatcher_type=allgather" in written.read_text()
    assert "dispatcher.flex_activation" not in {f.rule for f in evaluate(load_config([written]))}


@pytest.mark.parametrize("value", ["fp32", "fp64", None])
def test_a_plan_s_router_dtype_round_trips_through_every_launch(tmp_path, value):
    """The router dtype a plan was priced with (Knobs.moe_router_dtype) is the one its overrides and Megatron-LM
    arguments run: None is written over a recipe (DeepSeek-V3's bridge sets FP32), and the arguments leave the flag
    out, Megatron-LM's None."""
    model = load_model("deepseek-v3")
    e = estimate(model, load_gpu("gb200"), Layout(world_size=256, pp=4, vpp=4, ep=64,
                                                  pipeline_layout="Et*4|(t*4|)*14tmL"),
                 Workload(seq_length=4096, global_batch_size=1024), Knobs(moe_router_dtype=value))
    out = emitted(tmp_path, to_config(e))
    over_recipe = load_config([RECIPE, out / "overrides.txt"])
    launch = load_config([out / "megatron_lm_args.txt"])
    assert [from_config(c, model)[2].moe_router_dtype for c in (over_recipe, launch)] == [value, value]
