"""A user's own measured runs, and the per-GPU constants that fit them (``moetune calibrate --runs FILE``).

The published runs fix moetune's constants for the catalog GPUs under the releases they measured; a cluster of one's
own (another NIC, another container, a tuned kernel) runs faster or slower. A CSV with published_runs.csv's columns,
one row per measured run, refits the two per-GPU multipliers on the shipped constants (compute: GEMM, FP8 GEMM and
elementwise rates together; all-to-all: every dispatcher's efficiency together), keeping the constants shared by all
GPUs (host CPU cost, the fused all-to-all's per-token and per-SM costs) as shipped: a handful of runs cannot pin them.
With fewer than MIN_RUNS_FOR_A2A runs on a GPU only the compute multiplier moves (two multipliers would fit two runs
exactly and say nothing). The result is an --efficiency file for estimate, plan and explain.
"""

import csv
from pathlib import Path

import numpy as np

from moetune.errors import MoetuneError
from moetune.layout.validate import validate
from moetune.planner.calibrate import A2A_KEYS, COMPUTE_KEYS, mean_log_error, refine, with_params
from moetune.planner.runs import CONFIG, Run, columns, run_from_row
from moetune.walls.efficiency import efficiency

MIN_RUNS_FOR_A2A = 3
SCALE_BOUNDS = (0.25, 4.0)  # multipliers on the shipped constants
REQUIRED_COLUMNS = (*CONFIG, "tokens_per_s_per_gpu")


def load_user_runs(path: str) -> list[Run]:
    """The rows of a user's CSV as runs; one error line naming the file, line and column for anything wrong."""
    try:
        text = Path(path).read_text()
    except (FileNotFoundError, IsADirectoryError):
        raise MoetuneError(f"--runs {path}: no such file") from None
    reader = csv.DictReader(text.splitlines())
    known = columns()
    given = reader.fieldnames or []
    if unknown := sorted(set(given) - set(known)):
        raise MoetuneError(f"--runs {path}: unknown column(s) {', '.join(unknown)}; use published_runs.csv's names")
    if missing := [c for c in REQUIRED_COLUMNS if c not in given]:
        raise MoetuneError(f"--runs {path}: missing column(s) {', '.join(missing)}")
    runs = [_user_run(path, line, row, known) for line, row in enumerate(reader, start=2)]
    if not runs:
        raise MoetuneError(f"--runs {path}: no rows; add one line per measured run under the header")
    return runs


def _user_run(path: str, line: int, row: dict, known: tuple) -> Run:
    if empty := [c for c in REQUIRED_COLUMNS if not (row.get(c) or "").strip()]:
        raise MoetuneError(f"--runs {path} line {line}: empty {', '.join(empty)}")
    full = {c: (row.get(c) or "").strip() for c in known}
    full["run_id"] = full["run_id"] or f"line {line}"
    try:
        run = run_from_row(full)
        validate(run.model, run.layout, run.workload)
        float(full["tokens_per_s_per_gpu"])
    except (MoetuneError, ValueError) as err:
        raise MoetuneError(f"--runs {path} line {line}: {err}") from None
    return run


def _fit_one(runs: list[Run], base: dict) -> dict[str, float]:
    """compute_scale (and a2a_scale with enough runs) on `base`: a log grid, then shrinking multiplicative steps."""
    keys = ("compute_scale", "a2a_scale") if len(runs) >= MIN_RUNS_FOR_A2A else ("compute_scale",)
    grid = np.geomspace(*SCALE_BOUNDS, 13)
    params = min(({"compute_scale": float(c), "a2a_scale": float(a)} for c in grid
                  for a in (grid if "a2a_scale" in keys else [1.0])),
                 key=lambda p: mean_log_error(runs, with_params(base, p)))
    return refine(params, dict.fromkeys(keys, SCALE_BOUNDS), lambda p: mean_log_error(runs, with_params(base, p)),
                  steps=(1.2, 1.1, 1.05, 1.025, 1.01))


def fit_user_runs(runs: list[Run]) -> dict[str, dict[str, float]]:
    """Per GPU of the runs: the multipliers found and the constants they give (on the shipped ones)."""
    out = {}
    for gpu in sorted({r.gpu.key for r in runs}):
        mine, base = [r for r in runs if r.gpu.key == gpu], efficiency(gpu)
        params = _fit_one(mine, base)
        out[gpu] = {**params, "runs": len(mine), "constants": with_params(base, params)}
    return out


def user_toml(fitted: dict) -> str:
    """The fitted constants as an --efficiency file: one section per GPU."""
    lines = ["# Written by `moetune calibrate --runs`: the shipped constants refitted to your measured runs.",
             "# Pass it to estimate, plan and explain with --efficiency."]
    for gpu, f in fitted.items():
        lines.append(f"\n[{gpu}]  # {f['runs']} run(s); compute x {f['compute_scale']:.3f}, "
                     f"all-to-all x {f['a2a_scale']:.3f} on the shipped constants")
        lines += [f"{k} = {f['constants'][k]:.4g}" for k in (*COMPUTE_KEYS, *A2A_KEYS)]
    return "\n".join(lines) + "\n"
