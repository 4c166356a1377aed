"""check --megatron-core: one finding for one fault. A rule that says a release's lack itself (rules.yaml covers) stands
for check.not_in_release's finding of that name or value; what no rule covers is still check.not_in_release's.

Facts: megatron_releases.csv lists optimizer.optimizer=muon / =dist_muon and the cuda_graph_scope values moe_router,
moe_preprocess, mlp, moe and mamba from 0.16 on, model.moe_flex_dispatcher_backend from 0.16 on."""

import json
from pathlib import Path

import pytest
from cli_run import run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bridge"
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
