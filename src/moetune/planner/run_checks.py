"""A user's measured run that no error of the step-time model explains: held out of a refit, and named with the
unit slip its figure most resembles. One row 3x off (TFLOP/s in the tokens column) had pulled a refit of five runs
to a compute multiplier of 0.26, 23-62% off the four runs it had met within 18%."""

from moetune.planner.compare import APART
from moetune.planner.runs import Run
from moetune.walls.efficiency import efficiency
from moetune.walls.step import step_time


def shipped_times(runs: list[Run]) -> dict[str, dict]:
    """run_id -> the step time of each run under the shipped constants (calibrate.predict's, with its TFLOP/s):
    computed once for the held-out check and the report's "shipped" column."""
    return {r.run_id: step_time(r.model, r.layout, r.workload, r.knobs, r.gpu, efficiency(r.gpu.key)) for r in runs}


def suspect_runs(runs: list[Run], times: dict[str, dict]) -> dict[str, str]:
    """run_id -> why, for each run whose measured tokens/s/GPU lies APART (3x) or more from the shipped constants'
    prediction (TIMES: shipped_times): further than any published run moetune predicts (the worst, R222, 1.8x:
    data/known_gaps.toml)."""
    out = {}
    for r in runs:
        t = times[r.run_id]
        ratio = r.tokens_per_s_per_gpu / t["tokens_per_s_per_gpu"]
        if not 1 / APART < ratio < APART:
            out[r.run_id] = _why(r, t, ratio)
    return out


def _near(a: float, b: float) -> bool:
    """Within 1.5x of each other, about the model's own error on a published run (held-out 101 of 111 within 15%,
    the worst 1.8x): a unit slip moves a figure by far more (tokens/s are tens of times TFLOP/s)."""
    return 2 / 3 < a / b < 1.5


def _why(r: Run, t: dict, ratio: float) -> str:
    """The unit slip a figure this far off most resembles: the cluster's tokens/s (the prediction x GPUs), or the
    run's TFLOP/s/GPU (the prediction's TFLOP/s); else only how far off it is."""
    measured, predicted, world = r.tokens_per_s_per_gpu, t["tokens_per_s_per_gpu"], r.layout.world_size
    said = f"{measured:,.0f} tokens/s/GPU measured, {predicted:,.0f} predicted ({ratio:.2g}x)"
    if _near(measured, predicted * world):
        return f"{said}: the whole cluster's tokens/s? (a GPU's is {measured / world:,.0f})"
    if _near(measured, t["tflops_per_gpu"]):
        return f"{said}: TFLOP/s/GPU in the tokens column? (it predicts {t['tflops_per_gpu']:,.0f} TFLOP/s/GPU)"
    return f"{said}: check its units, GPU count and configuration against the launch"
