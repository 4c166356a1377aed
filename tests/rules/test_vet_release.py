"""vet_fixes under the release a check targets: a fix setting a name or value that release lacks is withdrawn and
check.not_in_release named, as a fix tripping a rule of the table is. Facts (megatron_releases.csv, tools/
megatron_values.py): Megatron-Core 0.15's cuda_graph_scope is one string of full, attn or full_iteration
(transformer_config.py core_v0.15.0:646); moe_router and moe_preprocess came with the list in core_v0.16.0."""

import json
from pathlib import Path

import pytest

from moetune.cli.main import main
from moetune.configio import load_config
from moetune.rules import evaluate
from moetune.rules.engine import vet_fixes

# Bridge's Qwen3-30B-A3B H100 recipe: dropless MoE under Transformer Engine's scoped graphs
RECIPE = Path(__file__).resolve().parents[1] / "fixtures" / "bridge" / "qwen3_30b_a3b_pretrain_16gpu_h100_bf16.yaml"
SEEDS_START = ["attn", "moe_router", "moe_preprocess"]  # seeds/000's dropless graph scopes (the rule's fix)


def _dropless_start(tmp_path, scope: str, release: str, capsys) -> dict:
    text = RECIPE.read_text()
    assert "cuda_graph_scope: [moe_router, moe_preprocess]" in text
    path = tmp_path / "c.yaml"
    path.write_text(text.replace("cuda_graph_scope: [moe_router, moe_preprocess]", f"cuda_graph_scope: {scope}"))
    main(["check", str(path), "--megatron-core", release, "--json"])
    return {f["rule"]: f for f in json.loads(capsys.readouterr().out)["findings"]}["cudagraph.dropless_start_scope"]


@pytest.mark.parametrize(("scope", "trips"), [
    # the list rule already fires on the config: only the release's refusal of moe_preprocess is new
    ("[attn, moe_router]", ["check.not_in_release"]),
    # the list rule the fix trips covers the refusal of moe_router and moe_preprocess (rules.yaml covers), so it is
    # named alone, as check would say that config: one name for one fault (the one-item list is an error of its own
    # on 0.15, cudagraph.scope_as_list_needs_mcore_016, and the string is clean)
    ("[attn]", ["cudagraph.scope_list_needs_mcore_016"]),
    ("attn", ["cudagraph.scope_list_needs_mcore_016"]),
])
def test_a_fix_the_release_refuses_is_withdrawn(tmp_path, capsys, scope, trips):
    """The fix [attn, moe_router, moe_preprocess] is an error on 0.15 (it had been offered beside [attn, moe_router],
    where the scope-list rule fired before the fix as after it, so no error looked added)."""
    found = _dropless_start(tmp_path, scope, "0.15", capsys)
    assert found["fix"] == {} and found["fix_withdrawn"] == trips


def test_the_same_fix_stands_where_the_release_has_it(tmp_path, capsys):
    found = _dropless_start(tmp_path, "[attn, moe_router]", "0.16", capsys)
    assert found["fix"] == {"model.cuda_graph_scope": SEEDS_START} and found["fix_withdrawn"] == []


def test_vet_fixes_reads_the_release_from_the_derived_facts():
    """As check passes it (target_release) and plan's explain does (planner/rule_findings.py); none named: newest."""
    config = load_config(sets=["model.num_moe_experts=64", "model.moe_token_dispatcher_type=alltoall",
                               "mixed_precision.bf16=true", "model.cuda_graph_impl=transformer_engine",
                               "model.cuda_graph_scope=[attn,moe_router]"], gpu="h100", gpus=8)
    offered = {"model.cuda_graph_scope": SEEDS_START}
    for derived, fix in (({"target_release": "0.15"}, {}), ({"target_release": "0.16"}, offered), (None, offered)):
        found = {f.rule: f for f in vet_fixes(config, evaluate(config, derived), derived)}
        assert found["cudagraph.dropless_start_scope"].fix == fix
