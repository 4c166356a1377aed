"""Recompute replays a layer's forward communication with its forward compute (walls/layer_comm.py, step.py layer_time;
walls/context_parallel.py _option_cost): full recompute re-runs the TP all-gathers and reduce-scatters of sequence
parallelism, and a recompute that replays core attention re-runs its CP exchange's forward."""

import os

import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model


def _collectives(recompute="none", modules=(), cp_comm_type="p2p", tp=4, cp=2):
    spec = load_model("qwen3-30b-a3b")
    knobs = Knobs(precision="bf16", dispatcher="alltoall", routing="force-balance", recompute=recompute,
                  recompute_modules=frozenset(modules), cp_comm_type=cp_comm_type)
    e = estimate(spec, load_gpu("h100"), Layout(world_size=64, tp=tp, cp=cp, pp=2, ep=8),
                 Workload(seq_length=32768, micro_batch_size=1, global_batch_size=64), knobs)
    return e.time["collectives"]


def test_full_recompute_replays_the_forward_tp_collectives():
    """Forward + backward make 2n ring collectives a layer, the replayed forward n more: 1.5x."""
    assert _collectives("full")["tp"] / _collectives()["tp"] == pytest.approx(1.5, rel=1e-9)


def test_selective_recompute_without_norms_leaves_tp_alone():
    assert _collectives("selective", ("moe_act",))["tp"] == pytest.approx(_collectives()["tp"], rel=1e-12)


@pytest.mark.parametrize("recompute, modules", [("full", ()), ("selective", ("core_attn",))])
def test_replayed_attention_replays_the_a2a_exchange_forward_half(recompute, modules):
    """cp_comm_type a2a trades QKV in and O out forward, their gradients backward, none of it hidden: replaying the
    attention adds the forward half."""
    with_replay = _collectives(recompute, modules, "a2a", tp=2)["cp"]  # 2 KV groups a TP rank split over CP 2
    assert with_replay / _collectives(cp_comm_type="a2a", tp=2)["cp"] == pytest.approx(1.5, rel=1e-9)


def test_a_ring_s_replay_hides_under_the_replayed_attention():
    """p2p passes K,V under the attention it feeds; at 32k the replayed forward ring hides whole as the first did."""
    assert _collectives("selective", ("core_attn",))["cp"] == pytest.approx(_collectives()["cp"], rel=1e-12)


def test_the_estimate_does_not_depend_on_the_hash_seed():
    """Full recompute's replay time was summed over a set, in hash order: MiniMax-M2's step read ...7101 under
    PYTHONHASHSEED=5 and ...71015 under the others (fuzz audit). The JSON is the same whatever the seed."""
    import subprocess
    import sys
    args = [sys.executable, "-m", "moetune.cli.main", "estimate", "minimax-m2", "--gpu", "h100", "--gpus", "6",
            "--seq", "32768", "--gbs", "96", "--pp", "2", "--mbs", "1", "--dispatcher", "hybridep", "--recompute",
            "full", "--json"]
    outs = {subprocess.run(args, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": seed},
                           check=True).stdout for seed in ("4", "5")}
    assert len(outs) == 1
