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
