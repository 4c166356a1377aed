"""What `moetune sweep ingest` shows: each candidate's measured figures beside its prediction, as the JSON object
(also what `moetune report` reads back) and as the table."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from moetune.cli.output import console, table
from moetune.planner.result_text import knobs_label, layout_label
from moetune.sweep.compare import Row, fastest, pairs
from moetune.sweep.conclusions import conclusions
from moetune.sweep.manifest import Sweep
from moetune.units import GIB


def _row_json(r: Row) -> dict:
    m, res = r.measured, r.candidate.result
    return {"rank": r.candidate.rank, "folder": r.candidate.folder, "status": m.status, "detail": m.detail,
            "log": m.log, "predicted_tokens_per_s_per_gpu": r.predicted,
            "measured_tokens_per_s_per_gpu": m.tokens_per_s_per_gpu, "error": r.error,
            "predicted_step_seconds": res["time"]["step_seconds"], "measured_step_seconds": m.step_seconds,
            "measured_tflops_per_gpu": m.tflops_per_gpu, "iteration_spread": m.spread, "timed_iterations": m.timed,
            "predicted_peak_bytes": res["memory"]["peak_bytes"], "measured_max_reserved_bytes": m.peak_reserved_bytes,
            "capacity_bytes": res["memory"]["capacity_bytes"], "false_fit": r.false_fit, "notes": m.notes}


def ingest_json(sweep: Sweep, found: list[Row], fit: dict | None) -> dict:
    best = fastest(found)
    return {"plan": sweep.plan, "candidates": [_row_json(r) for r in found],
            "pairs": [{"faster": p.faster.candidate.folder, "slower": p.slower.candidate.folder,
                       "measured_gap": p.measured_gap, "predicted_gap": p.predicted_gap, "agrees": p.agrees}
                      for p in pairs(found)],
            "fastest": None if best is None else best.candidate.folder, "conclusions": conclusions(sweep, found),
            "refit": fit}


def print_ingest(sweep: Sweep, found: list[Row], directory: Path) -> None:
    shown = console()
    shown.print(table(f"moetune sweep {directory}: tokens/s/GPU predicted and measured",
                      ["#", "folder", "layout", "knobs", "status", "predicted", "measured", "error", "peak GiB",
                       "max reserved GiB"],
                      [[r.candidate.rank, r.candidate.folder, layout_label(r.candidate.result),
                        knobs_label(r.candidate.result),
                        escape(f"{r.measured.status}: {r.measured.detail}" if r.measured.detail else r.measured.status),
                        f"{r.predicted:,.0f}", _number(r.measured.tokens_per_s_per_gpu),
                        "-" if r.error is None else f"{r.error:+.1%}",
                        f"{r.candidate.result['memory']['peak_bytes'] / GIB:.1f}",
                        _number(r.measured.peak_reserved_bytes, GIB, ".1f")] for r in found], justify_right_from=5))
    for line in conclusions(sweep, found):
        shown.print(escape(line))


def _number(value: float | None, unit: float = 1.0, fmt: str = ",.0f") -> str:
    return "-" if value is None else format(value / unit, fmt)
