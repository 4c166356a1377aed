"""A measured dropless factor pinned for a whole search (plan --token-imbalance, planner/pins.py): every candidate is
charged it at its EP, as estimate's --token-imbalance charges one configuration, and EP sizes too small to hold it are
left out (the busiest of EP ranks holds at most EP x the mean, layout/validate.py)."""

import random
from dataclasses import replace

import pytest

from moetune.errors import MoetuneError
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.enumerate import enumerate_layouts
from moetune.planner.estimate import estimate
from moetune.planner.knob_grid import knob_grid
from moetune.planner.pins import carries
from moetune.planner.search import plan
from moetune.specs.hardware import load_gpu
from moetune.specs.platform import platform_defaults
from moetune.specs.registry import load_model
from moetune.walls.batch import batch_step_seconds
from moetune.walls.batch_bytes import batch_memory
from moetune.walls.batch_layouts import build_batch
from moetune.walls.efficiency import efficiency
from moetune.walls.overheads import default_overheads

# Qwen3-30B-A3B on 8 GB200, GBS 64: under the default factor the pick is EP 1 (charged nothing, EP 2 1.19x, EP 8
# 1.47x: layout/imbalance.py); a small search (~1 s)
JOB = ("qwen3-30b-a3b", "gb200", 8, Workload(seq_length=4096, global_batch_size=64))


def _plan(token_imbalance=None, **kw):
    model, gpu, world, wl = JOB
    return plan(load_model(model), load_gpu(gpu), world, wl, top=5, token_imbalance=token_imbalance,
                weigh_offload=False, **kw)


def _row(e) -> tuple:
    """A row's candidate apart from the dropless factor it was charged."""
    return e.layout, e.workload.micro_batch_size, replace(e.knobs, token_imbalance=None)


def test_a_measured_factor_is_charged_to_every_row_and_moves_the_pick_off_ep1():
    default, measured = _plan(), _plan(1.0)
    assert default.token_imbalance is None and measured.token_imbalance == 1.0
    assert default.results[0].layout.ep == 1  # the EP 1 pick the default charges nothing
    assert all(r.knobs.token_imbalance == 1.0 for r in measured.results)
    # a balanced router takes the EP > 1 candidates' surcharge away: one of them now leads, and no pick is slower
    pick = measured.results[0]
    assert pick.layout.ep > 1
    assert pick.time["tokens_per_s_per_gpu"] > default.results[0].time["tokens_per_s_per_gpu"]
    # the EP 1 rows both searches list predict the same: EP 1 pays no factor either way
    ep1 = {_row(r): r.time["tokens_per_s_per_gpu"] for r in default.results if r.layout.ep == 1}
    both = [(ep1[_row(r)], r.time["tokens_per_s_per_gpu"]) for r in measured.results if _row(r) in ep1]
    assert both and all(a == b for a, b in both)


def test_each_row_is_the_estimate_of_its_configuration_under_the_measured_factor():
    """The search's batch prices a pinned factor as estimate does (walls/batch_keys.py keys on it): each row equals a
    fresh estimate of its layout and knobs."""
    model, gpu, _, wl = JOB
    for r in _plan(1.3).results:
        e = estimate(load_model(model), load_gpu(gpu), r.layout, r.workload, r.knobs)
        assert e.knobs.imbalance_at(e.layout.ep) == (1.3 if e.layout.ep > 1 else 1.0)
        assert e.time["step_seconds"] == r.time["step_seconds"] and e.peak_bytes == r.peak_bytes


def test_batched_evaluation_equals_estimate_under_a_measured_factor():
    model, gpu, world, wl = JOB
    spec, g = load_model(model), load_gpu(gpu)
    rng = random.Random(0)
    layouts = enumerate_layouts(spec, g, world, wl, {})
    cands = [(lay, m) for lay in rng.sample(layouts, min(30, len(layouts))) for m in (1, 2)
             if wl.global_batch_size % (m * lay.dp) == 0
             and (lay.vpp == 1 or wl.global_batch_size // (m * lay.dp) % lay.pp == 0)]
    assert {lay.ep for lay, _ in cands} >= {1, 2}
    batch = build_batch(spec, cands)
    for knobs in rng.sample(knob_grid(spec, g, platform_defaults(g), {}, "dropless", 1.3), 4):
        assert knobs.token_imbalance == 1.3
        peak = batch_memory(spec, batch, wl.seq_length, wl.global_batch_size, knobs, default_overheads(), arch=g.arch)
        step = batch_step_seconds(spec, batch, wl.seq_length, wl.global_batch_size, knobs, g, efficiency(g.key))
        for i, (lay, m) in enumerate(cands):
            if knobs.dispatcher != "alltoall" and lay.ep == 1:
                continue  # a flex backend needs EP > 1 (estimate refuses DeepEP there; the search's _fits drops it)
            e = estimate(spec, g, lay, replace(wl, micro_batch_size=m), knobs)
            assert peak[i] == pytest.approx(e.peak_bytes, rel=1e-6), (lay, m, knobs)
            assert step["step"][i] == pytest.approx(e.time["step_seconds"], rel=1e-9), (lay, m, knobs)


def test_ep_sizes_below_the_factor_are_not_searched():
    lays = [Layout(world_size=8, ep=ep) for ep in (1, 2, 4, 8)]
    assert carries(lays, None) == lays
    assert [lay.ep for lay in carries(lays, 3.0)] == [1, 4, 8]  # the busiest of 2 ranks holds at most 2x the mean
    assert [lay.ep for lay in carries(lays, 2.0)] == [1, 2, 4, 8]  # every token on one of 2 ranks: possible
    with pytest.raises(MoetuneError, match="exceeds the EP of every legal layout"):
        carries(lays[1:], 9.0)
    assert all(r.layout.ep in (1, 4, 8) for r in _plan(3.0).results)
    with pytest.raises(MoetuneError, match="--token-imbalance 3 with --fix ep=2"):
        _plan(3.0, fixed={"ep": 2})
