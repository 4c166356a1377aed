"""A candidate the seeds' order ranked below the pick though it predicts more (planner/near_tie.py): found where it
is, with the preference that decided it, and not named where the pick is the fastest."""

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.near_tie import NEAR_TIE_NOTE_GAIN
from moetune.planner.ranking import PREFERENCES, preference, within
from moetune.planner.search import plan
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model

H100_GIB = 78  # data/hardware.toml [h100] memory_gib
TIGHT = 0.03  # planner/moves.py TIGHT_SHARE: the memory estimate's own error


def _plan(model: str, gpus: int, seq: int, gbs: int, top: int = 5):
    return plan(load_model(model), load_gpu("h100"), gpus, Workload(seq_length=seq, global_batch_size=gbs), top=top)


def _same(a, b) -> bool:
    return (a.layout, a.workload.micro_batch_size, a.knobs) == (b.layout, b.workload.micro_batch_size, b.knobs)


def test_a_faster_deepep_candidate_in_the_tight_margin_ranks_below_a_roomy_hybridep_pick():
    """Qwen3-30B-A3B on 64 H100 at 8k: DeepEP is the H100 default (seeds/000 First Answer Checklist), yet HybridEP is
    picked; the DeepEP row predicts more but leaves under 3% of the 78 GiB free, which the seeds' order ranks first
    (seeds/001: a configuration that fits reliably)."""
    r = _plan("qwen3-30b-a3b", 64, 8192, 512)
    tie, pick = r.near_tie, r.results[0]
    assert tie is not None and tie.preference == "memory_margin" and tie.row == 2
    alt = tie.alternative
    assert alt is r.results[1]  # the row shown itself (at its own split: resplit_shown), not estimated a second time
    assert (pick.knobs.dispatcher, alt.knobs.dispatcher) == ("hybridep", "deepep")
    speed = alt.time["tokens_per_s_per_gpu"] / pick.time["tokens_per_s_per_gpu"]
    assert 1.005 <= speed < 1.01 and abs(tie.gain - (speed - 1)) < 1e-12  # in the pick's 1% band, yet faster
    assert pick.peak_bytes <= (1 - TIGHT) * H100_GIB * 2**30 < alt.peak_bytes <= H100_GIB * 2**30


def test_the_first_preference_that_differs_is_the_one_named():
    """Moonlight on 16 H100 at 4k: a PP2 layout predicts more than the PP1 pick, both roomy, same recompute-free
    knobs: less model parallelism (seeds/000 Phase 1) decided it, and the ranking's tuple places it ahead of memory
    margin alone."""
    r = _plan("moonlight-16b-a3b", 16, 4096, 128)
    tie, pick = r.near_tie, r.results[0]
    assert tie is not None and tie.preference == "model_parallelism"
    alt = tie.alternative
    assert _same(alt, r.results[tie.row - 1])
    assert alt.layout.pp * alt.layout.tp * alt.layout.cp > pick.layout.pp * pick.layout.tp * pick.layout.cp
    assert max(alt.peak_bytes, pick.peak_bytes) <= (1 - TIGHT) * H100_GIB * 2**30  # the margin did not decide it
    assert alt.time["tokens_per_s_per_gpu"] >= pick.time["tokens_per_s_per_gpu"] * (1 + NEAR_TIE_NOTE_GAIN)


def test_a_candidate_off_the_list_is_named_without_a_row():
    """--top 1 shows the pick alone: the faster DeepEP candidate is still named, with no row to point at."""
    r = _plan("qwen3-30b-a3b", 64, 8192, 512, top=1)
    assert r.near_tie is not None and r.near_tie.row is None and r.near_tie.alternative.knobs.dispatcher == "deepep"


def test_no_candidate_is_named_where_the_pick_is_the_fastest_shown():
    """Moonlight on 32 H100 at 4k: the pick predicts the most of every row (19,641 tokens/s/GPU against 19,421 at
    best), so there is no near-tie to explain."""
    r = _plan("moonlight-16b-a3b", 32, 4096, 256)
    best = r.results[0].time["tokens_per_s_per_gpu"]
    assert all(x.time["tokens_per_s_per_gpu"] <= best for x in r.results)
    assert r.near_tie is None


def test_every_place_of_the_preference_tuple_has_a_name():
    key = preference(Layout(world_size=8, ep=8), Knobs(), "deepep", 4096)
    assert len(key) == len(PREFERENCES) == len(set(PREFERENCES))


def test_rows_no_preference_tells_apart_come_faster_first():
    """Qwen3-Next-80B-A3B on 128 H100, force-balanced: PP4 at VPP 3, 4, 6 and 8 share every preference (VPP is none
    of them), so the list orders them by their own prediction, where it had kept the order the search found them in
    (VPP8 at 14,836 tokens/s/GPU above VPP4 at 14,843)."""
    r = plan(load_model("qwen3-next-80b-a3b"), load_gpu("h100"), 128, Workload(seq_length=4096, global_batch_size=1024),
             top=5, routing="force-balance")
    fastest = min(e.time["step_seconds"] for e in r.results)
    rows = [(within(e.time["step_seconds"], fastest), preference(e.layout, e.knobs, e.knobs.dispatcher, 4096),
             e.time["step_seconds"]) for e in r.results]
    alike = [(a, b) for a, b in zip(rows, rows[1:]) if a[:2] == b[:2]]
    assert alike and all(a[2] <= b[2] for a, b in alike)
