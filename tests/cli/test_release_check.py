"""check --megatron-core: one finding for one fault. A rule that says a release's lack itself (rules.yaml covers) stands
for check.not_in_release's finding of that name or value; what no rule covers is still check.not_in_release's. And a
one-item list CUDA-graph scope on Megatron-Core 0.15, which only Bridge's list form breaks.

Facts: megatron_releases.csv lists optimizer.optimizer=muon / =dist_muon and the cuda_graph_scope values moe_router,
moe_preprocess, mlp, moe and mamba from 0.16 on, model.moe_flex_dispatcher_backend from 0.16 on. Megatron-Core
0.15 types cuda_graph_scope as one str (transformer_config.py core_v0.15.0:646) and TECudaGraphHelper asserts it is
'full' or 'attn' (cuda_graphs.py core_v0.15.0:1357); Bridge hands a YAML or Hydra list to it as a list (OmegaConf
merge, training/utils/omegaconf_utils.py _apply_overrides @v0.2.0rc6); Megatron-LM's --cuda-graph-scope takes one
value (arguments.py core_v0.15.0:1411), which a MODEL_ARGS YAML's one-item list becomes."""

import json
from pathlib import Path

import pytest
from cli_run import run, saved

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bridge"
AS_LIST = "cudagraph.scope_as_list_needs_mcore_016"
SCOPES = "cudagraph.scope_list_needs_mcore_016"
MUON = "optimizer.muon_needs_mcore_016"

# Qwen3-30B-A3B's MoE as Bridge's recipe builds it (recipes/qwen/h100/qwen3_moe.py), on the alltoall dispatcher and
# with fields Megatron-Core 0.15 has, under Transformer Engine's per-layer graphs
QWEN3 = """\
model:
  num_layers: 48
  hidden_size: 2048
  num_attention_heads: 32
  num_query_groups: 4
  num_moe_experts: 128
  moe_ffn_hidden_size: 768
  moe_router_topk: 8
  moe_grouped_gemm: true
  moe_token_dispatcher_type: alltoall
  moe_router_dtype: fp32
  expert_model_parallel_size: 8
  cuda_graph_impl: {impl}
  cuda_graph_scope: {scope}
train:
  global_batch_size: 32
  micro_batch_size: 2
  manual_gc: true
  manual_gc_interval: 100
optimizer:
  optimizer: {optimizer}
  use_distributed_optimizer: true
mixed_precision: bf16_mixed
"""
# Megatron-LM's arguments for the same MoE (examples/mixtral-style flags 0.15 has)
MLM = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --num-experts 8 --expert-model-parallel-size 8 "
       "--moe-grouped-gemm --moe-router-dtype fp32 --bf16 --seq-length 4096 --max-position-embeddings 4096 "
       "--micro-batch-size 1 --global-batch-size 8 --manual-gc --manual-gc-interval 100 ")


def _yaml(tmp_path, scope="attn", impl="transformer_engine", optimizer="adam") -> str:
    path = tmp_path / "qwen3.yaml"
    path.write_text(QWEN3.format(scope=scope, impl=impl, optimizer=optimizer))
    return str(path)


def _errors(args, capsys) -> tuple[int, list[dict]]:
    code, out, err = run(["check", *args, "--gpu", "h100", "--gpus", "8", "--json"], capsys)
    assert "Traceback" not in err
    return code, [f for f in json.loads(out)["findings"] if f["severity"] == "error"]


def _rules(errors: list[dict]) -> list[str]:
    return sorted(f["rule"] for f in errors)


def test_the_base_config_is_clean_on_0_15(tmp_path, capsys):
    """The configs below differ from it in the one field under test."""
    assert _errors([_yaml(tmp_path), "--megatron-core", "0.15"], capsys) == (0, [])


@pytest.mark.parametrize("optimizer", ["muon", "dist_muon"])
def test_muon_on_0_15_is_the_rules_alone(tmp_path, capsys, optimizer):
    """It had been two errors, check.not_in_release's 'optimizer.optimizer value dist_muon is not one Megatron-Core
    0.15 accepts' beside the rule; the rule names the fix (Adam)."""
    for args in ([_yaml(tmp_path, optimizer=optimizer)], ["--set", f"optimizer.optimizer={optimizer}"],
                 ["--mlm-args", MLM + f"--optimizer {optimizer}"]):
        code, errors = _errors([*args, "--megatron-core", "0.15"], capsys)
        assert code == 1 and _rules(errors) == [MUON], args
        assert errors[0]["fix"]["optimizer.optimizer"] == "adam"


def test_a_lack_no_rule_covers_is_still_said_beside_the_rule(tmp_path, capsys):
    """The flex dispatcher's backend field came with 0.16 and no rule says so: check.not_in_release still does, and
    only it (the muon value beside it is the rule's)."""
    code, errors = _errors([_yaml(tmp_path, optimizer="dist_muon"), "--set", "model.moe_flex_dispatcher_backend=deepep",
                            "--megatron-core", "0.15"], capsys)
    assert code == 1 and _rules(errors) == ["check.not_in_release", MUON]
    said = next(f["message"] for f in errors if f["rule"] == "check.not_in_release")
    assert said.startswith("model.moe_flex_dispatcher_backend is not a TransformerConfig field in Megatron-Core 0.15")


def test_on_bridge_0_2_muon_is_the_release_tables(capsys):
    """The rule is silent where the release runs Megatron-Core 0.16 (Bridge 0.2.2 pins 0.16.0rc0), so the table's
    finding stands: Bridge 0.2.x's setup_optimizer runs no Muon (bridge_releases.csv: from v0.3.0)."""
    code, errors = _errors(["--set", "optimizer.optimizer=dist_muon", "--megatron-bridge", "0.2.2"], capsys)
    assert code == 1 and _rules(errors) == ["check.not_in_release"]


def test_two_scopes_on_0_15_are_the_rules_alone(capsys):
    """Bridge's Qwen3-30B-A3B 16-GPU H100 recipe, [moe_router, moe_preprocess]: the list rule says both scopes (it had
    come with two more errors, one per value 0.15 lacks); the fields 0.15 lacks that no rule covers stay said."""
    code, errors = _errors([str(FIXTURES / "qwen3_30b_a3b_pretrain_16gpu_h100_bf16.yaml"), "--gpus", "16",
                            "--megatron-core", "0.15"], capsys)
    lacking = [f["message"].split(" ", 1)[0] for f in errors if f["rule"] == "check.not_in_release"]
    assert code == 1 and _rules(errors).count(SCOPES) == 1
    assert lacking == ["model.moe_flex_dispatcher_backend", "model.moe_hybridep_num_sms",
                       "model.fine_grained_activation_offloading", "model.offload_modules"]


@pytest.mark.parametrize("written", [lambda tmp: [_yaml(tmp, scope="[attn]")],
                                     lambda tmp: [_yaml(tmp), "--set", "model.cuda_graph_scope=[attn]"]],
                         ids=["bridge-yaml", "dotted-override"])
def test_one_scope_as_a_list_on_0_15_is_an_error(tmp_path, capsys, written):
    code, errors = _errors([*written(tmp_path), "--megatron-core", "0.15"], capsys)
    assert code == 1 and _rules(errors) == [AS_LIST]
    assert errors[0]["fix"] == {"model.cuda_graph_scope": "attn"}  # the string 0.15 takes
    assert "written as a list (['attn'])" in errors[0]["message"]
    assert _errors([*written(tmp_path), "--megatron-core", "0.16"], capsys) == (0, [])  # 0.16 takes a list
    assert _errors(written(tmp_path), capsys) == (0, [])  # none named: the newest


def test_one_scope_the_release_lacks_as_a_list_is_said_once(tmp_path, capsys):
    """[moe_router]: a list, and a scope 0.15 lacks; the rule covers the value and its fix is attn (not moe_router as
    a string, which 0.15 refuses too)."""
    code, errors = _errors([_yaml(tmp_path, scope="[moe_router]"), "--megatron-core", "0.15"], capsys)
    assert code == 1 and _rules(errors) == [AS_LIST] and errors[0]["fix"] == {"model.cuda_graph_scope": "attn"}


def test_the_string_last_written_decides(tmp_path, capsys):
    """A --set string over the YAML's list is what runs (Hydra's override replaces it): clean."""
    args = [_yaml(tmp_path, scope="[attn]"), "--set", "model.cuda_graph_scope=attn", "--megatron-core", "0.15"]
    assert _errors(args, capsys) == (0, [])


@pytest.mark.parametrize("args", [
    ["--mlm-args", MLM + "--cuda-graph-impl transformer_engine --cuda-graph-scope attn"],
    ["@model_args"],
], ids=["mlm-args", "model-args-yaml"])
def test_a_megatron_lm_launch_takes_one_scope(tmp_path, capsys, args):
    """Megatron-LM's --cuda-graph-scope is one value on 0.15: a MODEL_ARGS YAML's [attn] becomes
    `--cuda-graph-scope attn`, which runs; not flagged."""
    model_args = tmp_path / "model_config.yaml"
    model_args.write_text("MODEL_ARGS:\n" + "".join(f"  {flag}: {value}\n" for flag, value in (
        ("--num-layers", 4), ("--hidden-size", 1024), ("--num-attention-heads", 8), ("--num-experts", 8),
        ("--moe-grouped-gemm", "true"), ("--moe-router-dtype", "fp32"), ("--bf16", "true"), ("--manual-gc", "true"),
        ("--cuda-graph-impl", "transformer_engine"), ("--cuda-graph-scope", "[attn]"))))
    args = [str(model_args) if a == "@model_args" else a for a in args]
    assert _errors([*args, "--megatron-core", "0.15"], capsys) == (0, [])


@pytest.mark.parametrize("impl", ["none", "local"])
def test_a_list_scope_transformer_engine_never_reads_is_not_flagged(tmp_path, capsys, impl):
    """Graphs off, or Megatron-Core's local per-layer graphs, which read the scope only against 'full_iteration'
    (transformer_layer.py core_v0.15.0:829): the list does not fail there."""
    code, errors = _errors([_yaml(tmp_path, scope="[attn]", impl=impl), "--megatron-core", "0.15"], capsys)
    assert AS_LIST not in _rules(errors)


def test_emit_for_0_15_writes_the_string(tmp_path, capsys):
    """What check's fix says is what emit writes for that release (configio/legacy.py scalar_scope), and check of the
    emitted overrides is clean of the list rule."""
    out = tmp_path / "run"
    code, _, _ = run(["emit", _yaml(tmp_path, scope="[attn]"), "--gpu", "h100", "--gpus", "8", "--megatron-core",
                      "0.15", "--out", str(out)], capsys)
    assert code == 0 and "model.cuda_graph_scope=attn" in (out / "overrides.txt").read_text().splitlines()
    assert AS_LIST not in _rules(_errors([str(out / "overrides.txt"), "--megatron-core", "0.15"], capsys)[1])


def test_a_saved_plan_for_0_15_is_not_a_written_list(tmp_path, capsys):
    """A plan's scope is moetune's, which emit writes as the string 0.15 takes: check of the saved plan (its release
    recorded) has no list to refuse, though its JSON holds the scope as a list."""
    plan = saved(tmp_path / "plan.json", ["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq", "4096",
                                          "--gbs", "256", "--megatron-core", "0.15", "--fix", "cuda_graph_scope=attn",
                                          "--top", "1"])
    assert json.loads(plan.read_text())["results"][0]["knobs"]["cuda_graph_scope"] == ["attn"]
    code, out, _ = run(["check", str(plan), "--json"], capsys)
    assert json.loads(out)["config"]["model.cuda_graph_impl"] == "transformer_engine"
    assert AS_LIST not in {f["rule"] for f in json.loads(out)["findings"]}
