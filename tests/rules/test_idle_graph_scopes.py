"""A CUDA-graph scope naming a module no layer of the model has captures nothing (Megatron-Core
transformer/cuda_graphs.py _layer_is_graphable @core_v0.19.0): rule cudagraph.scope_captures_nothing says so, and only
where the config says which layers it builds."""

import pytest

from moetune.cli.main import main
from moetune.configio import load_config
from moetune.rules import evaluate

RULE = "cudagraph.scope_captures_nothing"
TE = "model.cuda_graph_impl=transformer_engine"


def _findings(*sets: str, impl: str = TE) -> dict[str, object]:
    return {f.rule: f for f in evaluate(load_config(sets=["model.num_moe_experts=8", impl, *sets]))}


@pytest.mark.parametrize(("sets", "idle"), [
    # every layer MoE and softmax attention: mamba and mlp capture nothing, attn and the MoE scopes do
    (("model.num_layers=4", "model.cuda_graph_scope=[attn,mamba,mlp,moe_router]"), "['mamba', 'mlp']"),
    # DeepSeek-V3's first dense layers (moe_layer_freq 0s) are what the mlp scope captures
    (("model.num_layers=4", "model.moe_layer_freq=[0,1,1,1]", "model.cuda_graph_scope=[mlp,mamba]"), "['mamba']"),
    # a Mamba hybrid without '-' layers: its Mamba mixers take the mamba scope, no layer the mlp one
    (("model.is_hybrid_model=true", "model.hybrid_layer_pattern=MEM*E", "model.cuda_graph_scope=[mamba,mlp]"),
     "['mlp']"),
])
def test_a_scope_without_its_module_is_named(sets, idle):
    found = _findings(*sets)
    assert RULE in found and f"names {idle}, which no layer" in found[RULE].message


@pytest.mark.parametrize("sets", [
    ("model.num_layers=4", "model.cuda_graph_scope=[attn,moe_router,moe_preprocess]"),
    ("model.is_hybrid_model=true", "model.hybrid_layer_pattern=M-E*", "model.cuda_graph_scope=[mamba,mlp]"),
    # the layers unknown (no num_layers; a hybrid without its pattern): nothing said
    ("model.cuda_graph_scope=[mamba]",),
    ("model.is_hybrid_model=true", "model.num_layers=4", "model.cuda_graph_scope=[mamba]"),
])
def test_a_scope_that_captures_a_layer_is_not_named(sets):
    assert RULE not in _findings(*sets)


def test_a_full_iteration_graph_captures_the_step_whatever_the_scope():
    assert RULE not in _findings("model.num_layers=4", "model.cuda_graph_scope=[mamba]",
                                 impl="model.cuda_graph_impl=full_iteration")
    # local per-layer graphs read the scope as TE's do (transformer_layer.py create_mcore_cudagraph_manager)
    assert RULE in _findings("model.num_layers=4", "model.cuda_graph_scope=[mamba]", impl="model.cuda_graph_impl=local")


def test_the_fix_keeps_the_scopes_that_capture_or_drops_the_graphs():
    """Where some scope captures a layer the fix keeps those; where none does, no graphs, which is what ran."""
    some = _findings("model.num_layers=4", "model.cuda_graph_scope=[attn,mamba]")[RULE]
    assert some.fix == {"model.cuda_graph_scope": ["attn"]}
    none = _findings("model.num_layers=4", "model.cuda_graph_scope=[mamba]")[RULE]
    assert none.fix == {"model.cuda_graph_impl": "none"}


def test_check_of_a_real_model_names_a_scope_it_cannot_capture(tmp_path, capsys):
    """Qwen3-30B-A3B (48 MoE layers, GQA) with a mamba scope: a warning; Nemotron-3-Nano (a Mamba hybrid) with the same
    scope: nothing."""
    config = tmp_path / "graphs.yaml"
    config.write_text("model:\n  cuda_graph_impl: transformer_engine\n  cuda_graph_scope: [mamba]\n")
    main(["check", str(config), "--model", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16"])
    assert RULE in capsys.readouterr().out
    main(["check", str(config), "--model", "nemotron3-nano-30b-a3b", "--gpu", "h100", "--gpus", "16"])
    assert RULE not in capsys.readouterr().out
