"""Fit the efficiency constants (data/efficiency.toml) to published measured runs.

Per GPU, three constants are fitted by coordinate descent on the mean squared log error of predicted
tokens/s/GPU: one multiplier on the compute efficiencies (BF16 and FP8 GEMM, attention, elementwise
bandwidth keep their documented ratios), one on the EP all-to-all efficiencies, and the host launch
gap per layer. The calibration subset is documented and fixed:
the runs of each GPU in run_id order, every other one starting with the first. The rest are held out
and their errors reported (``moetune calibrate``).
"""

import math
from dataclasses import dataclass

from moetune.planner.runs import Run
from moetune.walls.efficiency import efficiency
from moetune.walls.step import step_time

FITTED = ("compute_scale", "a2a_scale", "host_us_per_layer")
BOUNDS = {"compute_scale": (0.3, 1.25), "a2a_scale": (0.2, 1.8), "host_us_per_layer": (0.0, 5000.0)}
COMPUTE_KEYS = ("gemm_eff", "fp8_gemm_eff", "attn_eff", "mem_eff")
A2A_KEYS = ("a2a_eff_alltoall", "a2a_eff_deepep", "a2a_eff_hybridep", "a2a_eff_allgather")


@dataclass(kw_only=True, slots=True)
class Prediction:
    run: Run
    predicted: float  # tokens/s/GPU

    @property
    def error(self) -> float:
        return self.predicted / self.run.tokens_per_s_per_gpu - 1


def split(runs: list[Run]) -> tuple[list[Run], list[Run]]:
    """(calibration, held-out): per GPU, alternate runs in run_id order."""
    fit, held = [], []
    for gpu in sorted({r.gpu.key for r in runs}):
        mine = sorted((r for r in runs if r.gpu.key == gpu), key=lambda r: r.run_id)
        fit += mine[::2]
        held += mine[1::2]
    return fit, held


def with_params(base: dict, params: dict) -> dict:
    """Efficiency constants with the fitted multipliers applied (each stays a fraction <= 0.95)."""
    eff = {**base, "host_us_per_layer": params.get("host_us_per_layer", base["host_us_per_layer"])}
    for key in A2A_KEYS:
        eff[key] = min(base[key] * params.get("a2a_scale", 1.0), 0.95)
    for key in COMPUTE_KEYS:
        eff[key] = min(base[key] * params.get("compute_scale", 1.0), 0.95)
    return eff


def predict(run: Run, eff: dict) -> Prediction:
    t = step_time(run.model, run.layout, run.workload, run.knobs, run.gpu, eff)
    return Prediction(run=run, predicted=t["tokens_per_s_per_gpu"])


def _loss(runs: list[Run], eff: dict) -> float:
    return sum(math.log(predict(r, eff).predicted / r.tokens_per_s_per_gpu) ** 2 for r in runs) / len(runs)


def fit_gpu(runs: list[Run], gpu_key: str, sweeps: int = 4) -> dict[str, float]:
    """Fitted values of FITTED for one GPU (coordinate descent, shrinking multiplicative steps)."""
    base = efficiency(gpu_key, priors_only=True)  # fit from the documented priors: re-running reproduces it
    params = {"compute_scale": 1.0, "a2a_scale": 1.0, "host_us_per_layer": base["host_us_per_layer"]}
    step = 1.5
    for _ in range(sweeps):
        for key in FITTED:
            best = _loss(runs, with_params(base, params))
            for factor in (step, 1 / step):
                lo, hi = BOUNDS[key]
                trial = {**params, key: min(max(params[key] * factor if params[key] else 50.0, lo), hi)}
                loss = _loss(runs, with_params(base, trial))
                if loss < best:
                    best, params = loss, trial
        step = 1 + (step - 1) / 2
    return params


def calibrate(runs: list[Run]) -> tuple[dict[str, dict], list[Prediction], list[Prediction]]:
    """Fit per GPU on the calibration subset; return fitted constants and predictions on both subsets."""
    fit_runs, held = split(runs)
    fitted = {gpu: fit_gpu([r for r in fit_runs if r.gpu.key == gpu], gpu) for gpu in sorted({r.gpu.key
                                                                                            for r in fit_runs})}
    effs = {gpu: with_params(efficiency(gpu, priors_only=True), p) for gpu, p in fitted.items()}
    on_fit = [predict(r, effs[r.gpu.key]) for r in fit_runs]
    on_held = [predict(r, effs[r.gpu.key]) for r in held if r.gpu.key in effs]
    return fitted, on_fit, on_held
