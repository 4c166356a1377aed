"""A sweep's measurements against its predictions: each candidate's error, the measured order against the predicted
one, the fastest candidate as measured, and the runs a refit of the constants takes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from moetune.planner.ab_order import NOISE_FLOOR
from moetune.planner.estimate import Estimate
from moetune.planner.from_json import estimate_from_json, saved_results
from moetune.planner.runs import Run
from moetune.sweep.manifest import Candidate, Sweep
from moetune.sweep.measure import Measured, measure

LEVEL = 0.01  # the plan's own tie: planner/ranking.py ranks results within 1% by the seeds' preference order


@dataclass(kw_only=True, slots=True)
class Row:
    candidate: Candidate
    estimate: Estimate  # rebuilt from the saved result (its layout and knobs exactly)
    measured: Measured

    @property
    def predicted(self) -> float:
        """tokens/s/GPU as the plan predicted it (the saved figure, whatever constants are shipped now)."""
        return float(self.candidate.result["time"]["tokens_per_s_per_gpu"])

    @property
    def error(self) -> float | None:
        m = self.measured.tokens_per_s_per_gpu
        return None if m is None else self.predicted / m - 1

    @property
    def false_fit(self) -> bool:
        """Predicted to fit, and ran out of memory."""
        return self.measured.status == "out of memory" and bool(self.candidate.result["memory"]["fits"])


@dataclass(kw_only=True, slots=True)
class Pair:
    faster: Row  # as measured
    slower: Row
    measured_gap: float  # faster / slower - 1, measured
    predicted_gap: float  # the same ratio as predicted (negative: predicted the other way)

    @property
    def level(self) -> bool:
        """Predicted within LEVEL of each other: plan ranks such candidates by the seeds' order, not by the last
        digits (planner/ranking.py), so their measured order neither meets nor misses the prediction."""
        return abs(self.predicted_gap) < LEVEL

    @property
    def agrees(self) -> bool:
        return self.predicted_gap > 0


def rows(sweep: Sweep, directory: Path) -> list[Row]:
    out = []
    for c in sweep.candidates:
        where = f"{directory / 'sweep.json'} candidate {c.folder}"
        e = estimate_from_json(c.result, where=where)
        out.append(Row(candidate=c, estimate=e, measured=measure(directory / c.folder, e, sweep.skip)))
    return out


def pairs(found: list[Row]) -> list[Pair]:
    """Measured pairs whose gap says which is faster: above NOISE_FLOOR (planner/ab_order.py) and above either run's
    own spread of iteration times, the noise a single benchmark shows."""
    timed = [r for r in found if r.measured.ok]
    out = []
    for a, b in combinations(timed, 2):
        fast, slow = (a, b) if a.measured.tokens_per_s_per_gpu >= b.measured.tokens_per_s_per_gpu else (b, a)
        if apart(fast, slow):
            out.append(Pair(faster=fast, slower=slow,
                            measured_gap=fast.measured.tokens_per_s_per_gpu / slow.measured.tokens_per_s_per_gpu - 1,
                            predicted_gap=fast.predicted / slow.predicted - 1))
    return out


def fastest(found: list[Row]) -> Row | None:
    timed = [r for r in found if r.measured.ok]
    return max(timed, key=lambda r: r.measured.tokens_per_s_per_gpu) if timed else None


def apart(a: Row, b: Row) -> bool:
    """Whether two timed candidates measured apart: by more than NOISE_FLOOR and either one's own iteration spread
    (the test pairs() counts pairs by)."""
    gap = abs(a.measured.tokens_per_s_per_gpu / b.measured.tokens_per_s_per_gpu - 1)
    return gap > max(NOISE_FLOOR, a.measured.spread, b.measured.spread)


def plan_unchanged(sweep: Sweep, rank: int) -> bool:
    """Whether the sweep's plan file still holds the result RANK the sweep ran (it may have been planned again)."""
    try:
        data = json.loads(Path(sweep.plan).read_text())
        return saved_results(data)[rank - 1] == next(c.result for c in sweep.candidates if c.rank == rank)
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return False


def measured_runs(found: list[Row], release: str | None) -> list[Run]:
    """The timed candidates as runs for planner/user_runs.py's refit, each with its exact layout and knobs."""
    return [Run(run_id=r.candidate.folder, model=r.estimate.model, gpu=r.estimate.gpu, layout=r.estimate.layout,
                workload=r.estimate.workload, knobs=r.estimate.knobs,
                tokens_per_s_per_gpu=r.measured.tokens_per_s_per_gpu, tflops_per_gpu=None, ab_group="sweep",
                release=release or "", source=r.measured.log or "")
            for r in found if r.measured.ok]
