"""``moetune report PLAN.json --out report.html [--sweep DIR]``: the plan, its pick explained and, with a sweep of it,
what the cluster measured, as one self-contained HTML page to share (report/plan_report.py)."""

from __future__ import annotations

from pathlib import Path

import click

from moetune.cli.explain_cmd import with_release_needs
from moetune.cli.output import console, emit_json
from moetune.cli.sweep_shown import ingest_json
from moetune.errors import MoetuneError
from moetune.files import check_writable, read_json, write_text
from moetune.planner.explain import explain
from moetune.planner.from_json import estimate_from_json, on_plan_budget, pick_result, saved_fields, saved_results
from moetune.report.plan_report import render
from moetune.sweep.compare import rows
from moetune.sweep.manifest import MANIFEST, read_manifest, saved_result_data


@click.command(name="report")
@click.argument("plan_path", metavar="PLAN.json")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True,
              help="The HTML file to write. Required.")
@click.option("--sweep", "sweep_dir", default=None, metavar="DIR",
              help="A sweep of this plan (`moetune sweep write PLAN.json --out DIR`): its measurements beside the "
                   "predictions.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output: {written, sections}.")
def command(plan_path, out_path, sweep_dir, as_json) -> None:
    """Write PLAN.json (`moetune plan --json` or `estimate --json`) as an HTML report: candidates, walls, memory,
    Fit / Scale / Profile / Retune of the pick, and a sweep's measurements."""
    data = saved_result_data(read_json(plan_path, "", "pass the output of `moetune plan --json` (or `estimate "
                                                  "--json`)", saved="plan"), plan_path)
    try:
        pick_result(data)  # a plan with no results is one line
    except MoetuneError as err:
        raise MoetuneError(f"{plan_path}: {err}") from None
    check_writable(out_path, "--out", (plan_path, *([Path(sweep_dir) / MANIFEST] if sweep_dir else [])))
    result, headroom = on_plan_budget(estimate_from_json(data, 1, where=plan_path), data)
    answer = explain(result)
    if headroom:
        answer["fit"]["headroom_gib"] = headroom
    if isinstance(data.get("release"), dict):  # a plan searched for a release: what each move needs of it
        with_release_needs(answer, data["release"]["release"])
    ingest = _ingest(sweep_dir, data) if sweep_dir else None
    with saved_fields(plan_path):  # the page shows every result's saved figures as the file holds them
        text, sections = render(data, answer, plan_path, ingest)
    write_text(out_path, text, "--out")
    if as_json:
        emit_json({"written": str(Path(out_path)), "sections": sections})
    else:
        console().print(f"wrote {out_path} ({', '.join(sections)})")


def _ingest(sweep_dir: str, plan: dict) -> dict:
    """sweep ingest's JSON for the sweep in SWEEP_DIR, which must be of PLAN: each candidate the plan's result of its
    rank (the plan file may have moved since; its results may not have changed)."""
    try:
        sweep = read_manifest(sweep_dir)
    except MoetuneError as err:
        raise MoetuneError(f"--sweep {err}") from None
    results = saved_results(plan)
    for c in sweep.candidates:
        if c.rank > len(results) or results[c.rank - 1] != c.result:
            raise MoetuneError(f"--sweep {sweep_dir}: its candidate {c.folder} is not result {c.rank} of this plan "
                               f"(the sweep was written from {sweep.plan}); pass the plan it was written from")
    return ingest_json(sweep, rows(sweep, Path(sweep_dir)), None)
