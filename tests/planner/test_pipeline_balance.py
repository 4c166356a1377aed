"""The planner's re-split of pipeline ranks (planner/pipeline_balance.py)."""

import json
import random
from dataclasses import replace

import numpy as np
import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout, write_pipeline_layout
from moetune.layout.validate import Workload
from moetune.planner.candidates import candidate_pairs
from moetune.planner.enumerate import enumerate_layouts
from moetune.planner.estimate import estimate
from moetune.planner.explain import explain
from moetune.planner.knob_grid import knob_grid
from moetune.planner.pipeline_balance import chunk_counts, move_note, rank_layers, rebalance, with_rank_layers
from moetune.planner.search import plan
from moetune.specs.hardware import load_gpu
from moetune.specs.platform import platform_defaults
from moetune.specs.registry import load_model
from moetune.walls.batch import batch_step_seconds, whole_layer_balanced
from moetune.walls.batch_layouts import build_batch
from moetune.walls.efficiency import efficiency


def test_chunks_follow_megatrons_stage_order():
    """Stage s is chunk s // PP of rank s % PP; a rank's spare layer goes to its first chunk."""
    assert chunk_counts([5, 4], 2) == [3, 2, 2, 2]
    assert chunk_counts([7, 6, 5], 1) == [7, 6, 5]


def test_a_resplit_never_leaves_a_chunk_empty_but_the_last():
    lay = Layout(world_size=8, pp=2, vpp=2)
    assert with_rank_layers(lay, [3, 1], mtp=1).pipeline_layout == "Ett|(t|)*2mL"  # chunks 2, 1, 1, 0
    assert with_rank_layers(lay, [4, 0], mtp=1) is None  # rank 1's first chunk would hold nothing
    assert with_rank_layers(Layout(world_size=8, pp=2), [5, -1], mtp=1) is None  # no rank gives up a layer it lacks


def test_layers_move_off_the_slowest_rank_until_it_stops_paying():
    """40 layers over PP4; the last rank also carries 6 layers' worth (heads); rank 0 fits 11 layers at most.
    By hand: 46 units over 4 ranks cannot beat 12 a rank, and rank 0 cannot take a 12th layer."""
    lay = Layout(world_size=4, pp=4)
    calls = []

    def evaluate(cand):
        counts = rank_layers(cand, 40, 0)
        calls.append(counts)
        loads = [c + (6 if r == 3 else 0) for r, c in enumerate(counts)]
        return float(max(loads)), [float(x) for x in loads]

    def fits(cand):
        return rank_layers(cand, 40, 0)[0] <= 11

    step, best = rebalance(lay, 40, 0, evaluate, fits, (16.0, [10.0, 10.0, 10.0, 16.0]))
    counts = rank_layers(best, 40, 0)
    assert step == 12.0 and sum(counts) == 40 and counts[0] <= 11
    assert max(c + (6 if r == 3 else 0) for r, c in enumerate(counts)) == 12
    assert all(c[0] <= 12 for c in calls)  # a move onto a full rank is refused, then the next quickest is tried


def test_two_equally_slow_ranks_are_relieved_one_after_the_other():
    """48 layers split 8/16/16/8 (first/last-stage flags): moving a layer off either middle rank leaves the step where
    it was, since the other still paces it; the split must take that move, then the next one that lowers the step,
    and end even. Llama 4 Maverick on 256 GB200 was left at PP4 VPP8 with its first and last ranks idle half the time
    until this was seen."""
    lay = Layout(world_size=4, pp=4, vpp=2, first_stage_layers=8, last_stage_layers=8)
    assert rank_layers(lay, 48, 0) == [8, 16, 16, 8]

    def evaluate(cand):
        loads = [float(c) for c in rank_layers(cand, 48, 0)]
        return max(loads), loads

    step, best = rebalance(lay, 48, 0, evaluate, lambda cand: True, (16.0, [8.0, 16.0, 16.0, 8.0]))
    assert step == 12.0 and rank_layers(best, 48, 0) == [12, 12, 12, 12]


def test_a_layout_without_a_pipeline_is_left_alone():
    lay = Layout(world_size=8, tp=8)
    assert rebalance(lay, 40, 0, lambda cand: None, lambda cand: False, (1.0, [1.0])) == (1.0, lay)


def _pick(name: str, gpu: str, world: int, seq: int, gbs: int, fixed: dict | None = None, mtp: int | None = None):
    spec = load_model(name) if mtp is None else load_model(name).with_mtp(mtp)
    return plan(spec, load_gpu(gpu), world, Workload(seq_length=seq, micro_batch_size=1, global_batch_size=gbs),
                top=1, fixed=fixed).results[0]


def test_minimax_m2s_last_rank_is_lightened():
    """MiniMax-M2 trained with its checkpoint's 3 MTP layers (--mtp-layers 3): they and a 200k vocabulary over hidden
    3072 weigh on the last rank. The pick is a re-split string that `estimate` rates faster, with a narrower spread of
    rank times, than the recipe-style string on the same sizes and knobs (every chunk but the last even, the remainder
    beside the MTP layers)."""
    e = _pick("minimax-m2", "h100", 128, 4096, 1024, mtp=3)
    lay = e.layout
    assert lay.pp > 1 and lay.pipeline_layout and lay.pipeline_layout.endswith("mmmL")
    per = -(-62 // (lay.pp * lay.vpp))
    recipe_counts = [per] * (lay.pp * lay.vpp - 1) + [62 - per * (lay.pp * lay.vpp - 1)]
    recipe = e.variant(layout=replace(lay, pipeline_layout=write_pipeline_layout(recipe_counts, 3)))
    assert recipe.fits and e.fits
    assert e.time["tokens_per_s_per_gpu"] > 1.05 * recipe.time["tokens_per_s_per_gpu"]

    def spread(x):
        return max(x.time["stage_seconds"]) / min(x.time["stage_seconds"])

    assert spread(e) < spread(recipe)


def test_explain_names_each_ranks_layers_and_time():
    spec = load_model("kimi-k2")
    lay = Layout(world_size=256, pp=4, ep=64, first_stage_layers=13, last_stage_layers=16)
    e = estimate(spec, load_gpu("gb200"), lay, Workload(seq_length=4096, micro_batch_size=1, global_batch_size=4096))
    note = next(n for n in explain(e)["scale"]["notes"] if n.startswith("pipeline ranks"))
    ms = "/".join(f"{1e3 * s:.0f}" for s in e.time["stage_seconds"])
    assert "hold 13/16/16/16 decoder layers" in note and ms in note
    assert f"rank {e.time['stage_seconds'].index(max(e.time['stage_seconds']))} sets the pace" in note


def test_explain_says_what_re_split_the_ranks_want():
    """A user's own split (DeepSeek-V3's even 'Et|(tt|)*30mL' under the bench pick's knobs) gets the re-split `plan`
    makes, which estimates faster and fits; a pick whose ranks stay uneven (MiniMax-M2 on 128 H100 at 8k without VPP:
    the pick itself runs PP4 VPP4 and even ranks since the re-split bound counts every rank) gets the split memory
    aside would reach and the rank that lacks the memory for it."""
    pick = _pick("deepseek-v3", "h100", 1024, 4096, 8192)
    even = pick.variant(layout=replace(pick.layout, pipeline_layout="Et|(tt|)*30mL"))
    note = move_note(even)
    assert note.startswith("re-split as `--pipeline-layout") and "fits; `plan` re-splits this way" in note
    suggested = even.variant(layout=replace(pick.layout, pipeline_layout=note.split('"')[1]))
    assert suggested.fits and suggested.time["step_seconds"] < even.time["step_seconds"]
    assert move_note(pick) is None  # the pick is already re-split

    mm = _pick("minimax-m2", "h100", 128, 8192, 512, {"vpp": 1}, mtp=3)
    note = move_note(mm)
    assert "memory, not the split, keeps the ranks uneven" in note
    free = mm.variant(layout=replace(mm.layout, pipeline_layout=note.split("`")[1]))
    assert not free.fits and free.time["step_seconds"] < mm.time["step_seconds"]


def test_a_mamba_hybrid_is_split_by_its_pattern_without_vpp(shared_data):
    """Nemotron-3 Nano is built by Megatron-Core's HybridModel, which takes its stages from '|' in hybrid_layer_pattern
    and reads no layout string; Megatron Bridge's HybridModelProvider refuses VPP. The pick has VPP 1, its split is
    written as separators (one segment per rank, the model's own symbols), and a config read back gives the split."""
    from moetune.errors import MoetuneError
    from moetune.planner.config_map import to_config
    from moetune.planner.from_config import from_config

    e = _pick("nemotron3-nano-30b-a3b", "gb200", 128, 8192, 512)
    assert e.layout.pp > 1 and e.layout.vpp == 1
    config = to_config(e)
    segments = config["model.hybrid_layer_pattern"].split("|")
    assert [len(x) for x in segments] == rank_layers(e.layout, 52, 0)
    assert config["model.pipeline_model_parallel_layout"] is None
    hf = json.loads((shared_data / "models" / "nemotron3-nano-30b-a3b.config.json").read_text())[
        "hybrid_override_pattern"]
    assert "".join(segments) == hf  # the model's own pattern, only cut into stages
    back = from_config(config)[0]
    assert rank_layers(back, 52, 0) == rank_layers(e.layout, 52, 0) and back.vpp == 1
    with pytest.raises(MoetuneError, match="refuses virtual pipeline stages"):
        plan(load_model("nemotron3-nano-30b-a3b"), load_gpu("gb200"), 128,
             Workload(seq_length=8192, global_batch_size=512), top=1, fixed={"pp": 2, "vpp": 2})


def test_the_pick_is_re_split_even_where_looser_layouts_crowd_the_resplit_budget():
    """Kimi-K2 on 1,024 GB200 at 128k: PP16 and PP8 layouts, whose every-stage-at-the-mean bound is loose (61 layers
    and the loss do not spread evenly), had used up RESPLIT_LIMIT first, and the PP2 pick kept the recipe string
    while explain found +3.2% in a re-split; candidates in the band of the fastest are now re-split first."""
    pick = plan(load_model("kimi-k2"), load_gpu("gb200"), 1024, Workload(seq_length=131072, global_batch_size=1024),
                top=1).results[0]
    assert pick.layout.pp > 1 and move_note(pick) is None
    assert pick.layout.pipeline_layout != "Et*4|(t*4|)*14tL"  # the recipe's even string, not re-split


@pytest.mark.parametrize(("model", "gpu", "world", "mtp"), [
    ("glm-4.5", "gb200", 136, 0),  # three dense layers before 89 MoE ones, 92 in all over PP17 or PP34
    ("qwen3-30b-a3b", "h100", 136, None),  # one layer kind; PP4 x VPP12 leaves every virtual stage one layer
    ("minimax-m2", "h100", 96, 3),  # three MTP layers and a 200k vocabulary on the last rank
])
def test_the_resplit_bound_never_passes_what_a_resplit_reaches(model, gpu, world, mtp):
    """The slowest rank's time the search's re-split bounds assume (walls/batch.py "balanced" and its whole-layer
    tightening: the step with that rank at the least a re-split could make it, walls/split_floor.py) is never above
    what rebalance reaches, memory aside: a bound that overstated it would pass over a candidate a re-split makes the
    fastest. (The per-iteration terms of the largest stage's parameters are held as they are; a re-split moves them a
    little too.)"""
    spec, g = load_model(model) if mtp is None else load_model(model).with_mtp(mtp), load_gpu(gpu)
    wl = Workload(seq_length=4096, global_batch_size=8 * world)
    layouts = [lay for lay in enumerate_layouts(spec, g, world, wl, {}) if lay.pp > 1]
    cands = candidate_pairs(random.Random(0).sample(layouts, min(12, len(layouts))), wl, {"mbs": 1})
    batch, rng, checked = build_batch(spec, cands), random.Random(1), 0
    for knobs in rng.sample(knob_grid(spec, g, platform_defaults(g), {}, "dropless"), 3):
        walls = batch_step_seconds(spec, batch, 4096, wl.global_batch_size, knobs, g, efficiency(g.key))
        tight = whole_layer_balanced(batch, wl.global_batch_size, walls, np.arange(len(cands)))
        assert np.all(tight >= walls["balanced"] * (1 - 1e-12))
        for i, (lay, mbs) in enumerate(cands):
            if lay.ep == 1 and (knobs.dispatcher != "alltoall" or knobs.ep_overlap):
                continue  # flex dispatchers and EP overlap need expert ranks (the search's _runs drops these)

            def evaluate(cand, run=replace(wl, micro_batch_size=mbs), knobs=knobs):
                t = estimate(spec, g, cand, run, knobs, with_memory=False).time
                return t["step_seconds"], t["stage_seconds"]

            start = evaluate(lay)
            _, split = rebalance(lay, spec.num_layers, spec.mtp_num_layers, evaluate, lambda _: True, start)
            weight = wl.global_batch_size // (mbs * lay.dp) + (lay.pp - 1) / lay.vpp  # a rank's time in the step
            assumed = max(start[1]) - (walls["step"][i] - tight[i]) / weight
            assert assumed <= max(evaluate(split)[1]) * (1 + 1e-9), (lay.short(), lay.pipeline_layout, knobs)
            checked += 1
    assert checked >= 12


def test_the_resplit_bound_counts_every_rank_and_whole_layers():
    """GLM-4.5 without MTP over PP17 ends-light (1, 6 x 15, 1 layers): 89 MoE layers leave some rank 6 under any split,
    which this split already is, so no re-split gains and the bound is the step itself. It had read the mean of the
    four distinct ranks (one for the fifteen alike), 5.5 s against 8.8."""
    spec, g = load_model("glm-4.5").with_mtp(0), load_gpu("gb200")
    lay = Layout(world_size=136, pp=17, ep=4, first_stage_layers=1, last_stage_layers=1)
    assert rank_layers(lay, 92, 0) == [1] + [6] * 15 + [1]
    knobs = Knobs(precision="mxfp8", dispatcher="hybridep", routing="force-balance", fp8_output_proj=True)
    batch = build_batch(spec, [(lay, 1)])
    walls = batch_step_seconds(spec, batch, 4096, 1088, knobs, g, efficiency(g.key))
    assert walls["balanced"][0] == pytest.approx(walls["step"][0], rel=1e-9)
    tight = whole_layer_balanced(batch, 1088, walls, np.arange(1))
    assert tight[0] == pytest.approx(walls["step"][0], rel=1e-9)


def test_the_whole_layer_bound_sees_what_the_last_rank_cannot_take():
    """GLM-4.5-Air (46 layers, one MTP layer) over PP8 VPP3 on 256 H100: the last rank's MTP layer and loss weigh about
    four MoE layers, so the ranks' mean (85 ms a micro-batch) cannot be reached in whole layers: some rank keeps 7 MoE
    layers (95 ms), which is where rebalance stops (memory aside) and what the whole-layer bound reads."""
    spec, g = load_model("glm-4.5-air"), load_gpu("h100")
    lay = Layout(world_size=256, tp=2, pp=8, vpp=3, ep=16, account_for_embedding=True, account_for_loss=True)
    knobs = Knobs(precision="fp8-blockwise", dispatcher="deepep")
    wl = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=2048)
    batch = build_batch(spec, [(lay, 1)])
    walls = batch_step_seconds(spec, batch, 4096, 2048, knobs, g, efficiency(g.key))
    tight = whole_layer_balanced(batch, 2048, walls, np.arange(1))[0]

    def evaluate(cand):
        t = estimate(spec, g, cand, wl, knobs, with_memory=False).time
        return t["step_seconds"], t["stage_seconds"]

    start = evaluate(lay)
    _, split = rebalance(lay, spec.num_layers, spec.mtp_num_layers, evaluate, lambda _: True, start)
    weight = 2048 // lay.dp + (lay.pp - 1) / lay.vpp  # the slowest rank's times in a step

    def assumed(balanced):  # the slowest rank's time a bound assumes
        return max(start[1]) - (walls["step"][0] - balanced) / weight

    assert max(rank_layers(split, 46, 1)) == 7
    assert assumed(walls["balanced"][0]) < 0.97 * assumed(tight)
    assert assumed(tight) == pytest.approx(max(evaluate(split)[1]), rel=1e-9)


def test_the_ranks_note_names_where_the_mtp_layer_and_the_loss_sit():
    """Et*3|(tt|)*29m|L at PP8 VPP4: virtual stage 30 (the 'm') is rank 6's, stage 31 (the 'L') rank 7's; the note
    had put both on the last rank, against its own rank times."""
    from moetune.layout.layout import Layout
    from moetune.planner.pipeline_balance import _heads_note
    from moetune.specs.registry import load_model
    spec = load_model("deepseek-v3")
    split = Layout(world_size=256, pp=8, vpp=4, ep=32, pipeline_layout="Et*3|(tt|)*29m|L")
    assert _heads_note(split, spec) == "1 MTP layer(s) on rank 6, the loss on the last"
    together = Layout(world_size=256, pp=8, vpp=4, ep=32, pipeline_layout="Et*3|(tt|)*28t|t|mL")
    assert _heads_note(together, spec) == "the last also 1 MTP layer(s) and the loss"
