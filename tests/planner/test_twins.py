"""Dispatcher twins (planner/twins.py): candidates that differ only in DeepEP vs HybridEP and predict the same step
take one row of plan's list, the other named on it, so --top still shows that many distinct candidates."""

from dataclasses import replace

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.planner.search import plan
from moetune.planner.twins import entries_for, fold_twins
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model

LAY = Layout(world_size=16, ep=16)
DEEPEP = Knobs(dispatcher="deepep")


def _entry(step: float, knobs: Knobs, lay: Layout = LAY, mbs: int = 1) -> tuple:
    return step, (), lay, mbs, knobs, None  # Search.best's (step, preference, layout, mbs, knobs, reach)


def test_only_flex_backends_with_the_same_step_fold():
    hybrid, a2a = replace(DEEPEP, dispatcher="hybridep"), replace(DEEPEP, dispatcher="alltoall")
    best = [_entry(1.0, DEEPEP), _entry(1.0 + 1e-12, hybrid), _entry(1.0, a2a),  # a twin; alltoall is no flex backend
            _entry(2.0, replace(DEEPEP, recompute="full")), _entry(2.0 * (1 + 1e-6), replace(hybrid, recompute="full")),
            _entry(3.0, DEEPEP, mbs=2), _entry(3.0, replace(hybrid, precision="fp8-blockwise"), mbs=2)]
    kept, twins = fold_twins(best)
    assert kept == [best[0], *best[2:]]  # 1e-6 apart is a prediction, not rounding; other knobs are no twin
    assert twins == {(LAY, 1, DEEPEP): [hybrid]}
    kept = fold_twins(best)[0]
    assert entries_for(best, kept, 2) == 3 and entries_for(best, kept, 10) == len(best)


def test_twins_on_h100_take_one_row_and_the_next_candidate_takes_the_freed_one():
    """Qwen3-30B-A3B on 64 H100 at 8k (the new user's plan): DeepEP and HybridEP rows had shown 12,957 tokens/s/GPU
    each as #2 and #3. Each row shown is now distinct, names its twin, and the twin estimated on its own predicts the
    row's step: on H100 both backends carry the fitted a2a_eff 1.187 (data/efficiency.toml [h100]) and HybridEP's
    32 SMs x 14.6 GB/s do not bind under NVLink's 450 x 0.75 x 1.187."""
    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    r = plan(spec, gpu, 64, Workload(seq_length=8192, global_batch_size=512), top=5)
    assert len(r.results) == len(r.same_prediction) == 5

    def apart(e) -> tuple:
        return e.layout, e.workload.micro_batch_size, replace(e.knobs, dispatcher="deepep")
    assert len({apart(e) for e in r.results}) == 5  # no row is another's twin
    assert [e.knobs.dispatcher for e in r.results[:2]] == ["hybridep", "deepep"]  # the ranking's first of each pair
    for row, twins in zip(r.results, r.same_prediction):
        other = {"deepep": "hybridep", "hybridep": "deepep"}[row.knobs.dispatcher]
        assert [t.knobs.dispatcher for t in twins] == [other]
        alone = estimate(spec, gpu, row.layout, row.workload, replace(row.knobs, dispatcher=twins[0].knobs.dispatcher))
        assert abs(alone.time["step_seconds"] / row.time["step_seconds"] - 1) < 1e-9
        assert alone.peak_bytes == twins[0].peak_bytes != row.peak_bytes  # DeepEP's buffers 2 GiB, HybridEP's 1


def test_backends_priced_apart_stay_two_rows():
    """B200 with EP 8 inside a node: HybridEP's 32 SMs x 14.6 GB/s bound its NVLink copies below the link's
    900 x 0.75 x 1.187 GB/s that DeepEP reaches (walls/comms.py fused_nvlink_rate), so the two predict apart and both
    stay rows, neither naming the other."""
    r = plan(load_model("qwen3-30b-a3b"), load_gpu("b200"), 16, Workload(seq_length=4096, global_batch_size=256),
             top=20, fixed={"ep": 8, "tp": 1, "pp": 1, "mbs": 1, "precision": ["bf16"], "recompute": "none"})
    by = {(e.layout, e.knobs.dispatcher, replace(e.knobs, dispatcher="deepep")): (e, twins)
          for e, twins in zip(r.results, r.same_prediction)}
    pairs = [(by[k], by[(k[0], "hybridep", k[2])]) for k in by if k[1] == "deepep" and (k[0], "hybridep", k[2]) in by]
    assert pairs
    for (deep, deep_twins), (hybrid, hybrid_twins) in pairs:
        assert deep.time["step_seconds"] < hybrid.time["step_seconds"] and not deep_twins and not hybrid_twins
