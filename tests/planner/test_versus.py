"""The planner's pick for published tuned recipes is predicted at least as fast, and the difference is
explained (settings changed, seconds saved per wall)."""

import pytest

from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.planner.runs import load_runs
from moetune.planner.search import plan
from moetune.planner.versus import versus

RECIPES = ["R051", "R002", "R011", "R012", "R006", "R017", "R018", "R033"]
RUNS = {r.run_id: r for r in load_runs()}


@pytest.mark.parametrize("run_id", RECIPES)
def test_pick_is_at_least_as_fast_as_the_published_recipe(run_id):
    run = RUNS[run_id]
    recipe = estimate(run.model, run.gpu, run.layout, run.workload, run.knobs)
    result = plan(run.model, run.gpu, run.layout.world_size,
                  Workload(seq_length=run.workload.seq_length, global_batch_size=run.workload.gbs(run.layout)),
                  routing=run.knobs.routing, top=1, fixed={"main_grads_fp32": run.knobs.main_grads_fp32})
    pick = result.results[0]
    assert pick.fits
    assert pick.time["tokens_per_s_per_gpu"] >= recipe.time["tokens_per_s_per_gpu"] * 0.999
    v = versus(pick, recipe)
    assert v["speedup"] == pytest.approx(pick.time["tokens_per_s_per_gpu"] / recipe.time["tokens_per_s_per_gpu"])
    saved = sum(w["saved"] for w in v["walls"].values())
    assert saved == pytest.approx(recipe.time["step_seconds"] - pick.time["step_seconds"], rel=1e-9, abs=1e-12)
    if v["speedup"] > 1.001:
        assert v["changes"], "a faster pick must differ in some setting"
