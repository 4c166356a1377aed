"""Rule cp.dsa_allgather: DeepSeek Sparse Attention over CP > 1 takes cp_comm_type allgather alone (Megatron-LM
transformer_config.py @core_v0.19.0: every entry of a per-layer list, spelled allgather or all_gather)."""

import pytest

from moetune.configio import load_config
from moetune.rules import evaluate

DSA = ["model.num_moe_experts=64", "model.experimental_attention_variant=dsa", "model.multi_latent_attention=true",
       "model.seq_length=131072"]


def _fires(*sets: str) -> bool:
    return any(f.rule == "cp.dsa_allgather" for f in evaluate(load_config(sets=[*DSA, *sets])))


@pytest.mark.parametrize(("cp", "kind", "fires"), [
    (4, None, True),  # unset: Megatron hands TE p2p
    (4, "p2p", True), (4, "a2a", True), (4, "[allgather,p2p]", True),
    (4, "allgather", False), (4, "[allgather,all_gather]", False),
    (1, None, False),  # no CP: nothing to exchange
])
def test_dsa_cp_needs_allgather(cp, kind, fires):
    sets = [f"model.context_parallel_size={cp}"] + ([f"model.cp_comm_type={kind}"] if kind else [])
    assert _fires(*sets) is fires


def test_attention_other_than_dsa_is_not_asked():
    assert not any(f.rule == "cp.dsa_allgather" for f in evaluate(load_config(sets=[
        "model.num_moe_experts=64", "model.seq_length=131072", "model.context_parallel_size=4"])))


def _graph_rule(*sets: str) -> bool:
    return any(f.rule == "cudagraph.dsa_attention" for f in evaluate(load_config(sets=[*DSA, *sets])))


@pytest.mark.parametrize(("sets", "fires"), [
    (["model.cuda_graph_impl=transformer_engine", "model.cuda_graph_scope=[attn,moe_router,moe_preprocess]"], True),
    (["model.cuda_graph_impl=transformer_engine"], True),  # no scope: the whole layer, attention included
    (["model.cuda_graph_impl=full_iteration", "rerun_state_machine.check_for_nan_in_loss=false"], True),
    (["model.cuda_graph_impl=local", "model.cuda_graph_scope=[attn]"], True),
    (["model.cuda_graph_impl=transformer_engine", "model.cuda_graph_scope=[moe_router,moe_preprocess]"], False),
    (["model.cuda_graph_impl=none"], False),
])
def test_dsa_attention_is_not_graph_captured(sets, fires):
    """cudagraph.dsa_attention: the cuDNN sparse attention's backward syncs on torch.nonzero (Megatron-LM
    dsa_cudnn_kernels.py _run_sparse_attention_backward @ core_v0.19.0), which stream capture refuses; graphs over the
    MoE router and preprocessing leave the attention eager."""
    assert _graph_rule(*sets) is fires
    assert not any(f.rule == "cudagraph.dsa_attention" for f in evaluate(load_config(sets=[
        "model.num_moe_experts=64", "model.multi_latent_attention=true", *sets])))


@pytest.mark.parametrize(("backend", "fires"), [(None, True), ("none", True), ("cudnn", False), ("tilelang", False)])
def test_dsa_without_fused_kernels_is_flagged(backend, fires):
    """compute.dsa_unfused: Megatron-Core's default backend 'none' runs dense O(s^2) scores (dsa.py unfused_dsa_fn @
    core_v0.19.0); Bridge's GLM-5 recipes set cudnn."""
    sets = [f"model.dsa_kernel_backend={backend}"] if backend else []
    assert any(f.rule == "compute.dsa_unfused" for f in evaluate(load_config(sets=[*DSA, *sets]))) is fires
