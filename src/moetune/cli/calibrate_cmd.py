"""``moetune calibrate``: fit the efficiency constants to the published measured runs (cli/calibrate_published.py),
or refit the per-GPU multipliers to a user's own."""

import click
from rich.markup import escape

from moetune.cli.calibrate_published import published
from moetune.cli.output import console, emit_json, table
from moetune.errors import MoetuneError
from moetune.files import check_writable, write_text
from moetune.planner.calibrate import memory_misfits, predict
from moetune.planner.run_checks import shipped_times, suspect_runs
from moetune.planner.user_runs import by_gpu, fit_user_runs, gpu_label, multipliers, sections, shipped_of, user_toml
from moetune.planner.user_runs_csv import load_user_runs
from moetune.units import GIB
from moetune.words import a_figure

MATCHED_BY_NAME = 6  # runs whose refit errors print by name; more print as a range


@click.command(name="calibrate")
@click.option("--runs", "runs_path", default=None,
              help="Your own measured runs (CSV with published_runs.csv's columns): refit the per-GPU multipliers "
                   "on the shipped constants to them instead.")
@click.option("--write", "write_path", type=click.Path(dir_okay=False), default=None,
              help="Write the fitted constants to this TOML file (an --efficiency file).")
@click.option("--leave-one-model-out", "one_model_out", is_flag=True,
              help="Also refit without each model's runs in turn and predict them: how far the fit carries to a "
                   "model it never saw (about a minute).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(runs_path: str | None, write_path: str | None, as_json: bool, one_model_out: bool) -> None:
    """Fit compute / all-to-all constants per GPU and the shared host CPU cost on half the published runs;
    report both halves. With --runs, fit your own runs instead."""
    if write_path:
        check_writable(write_path, "--write")  # before the fit, not after it
    if runs_path and one_model_out:
        raise MoetuneError("--leave-one-model-out checks the published fit; with --runs, hold some of your runs out "
                           "of the CSV and compare them to `estimate` under the --write file instead")
    if runs_path:
        _calibrate_user(runs_path, write_path, as_json)
        return
    published(write_path, as_json, one_model_out)


def refit(runs: list, write_path: str | None, by: str = "moetune calibrate --runs") -> dict:
    """The per-GPU multipliers refitted to measured runs (a user's CSV, a sweep's candidates), each run predicted with
    the shipped constants and with the refit, written to WRITE_PATH where given: calibrate --runs' JSON object."""
    shipped = shipped_times(runs)
    held = suspect_runs(runs, shipped)  # a figure no model error explains (a unit slip): out of the fit, named
    kept = [r for r in runs if r.run_id not in held]
    if not kept:
        raise MoetuneError("every run lies 3x or more from moetune's prediction, so none is fitted ("
                           + "; ".join(f"{k}: {v}" for k, v in list(held.items())[:2])
                           + "): check the CSV's units (tokens/s per GPU), GPU counts and configurations")
    where = sections(by_gpu(kept)) if write_path else None  # a mix no file can hold fails before the fit
    fitted = fit_user_runs(kept)
    if write_path:
        write_text(write_path, user_toml(fitted, where, by), "--write")
    label = {f["gpu"]: name for name, f in fitted.items()}  # each run's GPU as the user gave it
    rows = [{"run_id": r.run_id, "model": r.model.name, "gpu": label.get(r.gpu.ref, gpu_label(r.gpu)),
             "gpus": r.layout.world_size, "measured": r.tokens_per_s_per_gpu,
             "shipped": shipped[r.run_id]["tokens_per_s_per_gpu"],
             "fitted": predict(r, fitted[label[r.gpu.ref]]["constants"]).predicted if r.gpu.ref in label else None,
             "held_out": held.get(r.run_id)} for r in runs]
    gpu_of = {r["run_id"]: r["gpu"] for r in rows}
    misfits = [{**m, "message": _misfit_line(m, gpu_of[m["run_id"]])} for m in memory_misfits(kept)]
    return {"fitted": fitted, "runs": rows, "memory_warnings": misfits,
            **({"written": {"path": write_path, "sections": where}} if write_path else {})}


def _calibrate_user(runs_path: str, write_path: str | None, as_json: bool) -> None:
    """Refit the per-GPU multipliers to a user's runs; report each run before and after."""
    runs = load_user_runs(runs_path)
    found = refit(runs, write_path)
    if as_json:
        emit_json(found)
        return
    rows = found["runs"]
    console().print(table("Your runs: tokens/s/GPU predicted with the shipped constants and with the refit",
                          ["run", "model", "gpu", "GPUs", "measured", "shipped", "error", "refit", "error"],
                          [[r["run_id"], r["model"], r["gpu"], r["gpus"], f"{r['measured']:,.0f}",
                            f"{r['shipped']:,.0f}", f"{100 * (r['shipped'] / r['measured'] - 1):+.1f}%",
                            *_refit_cells(r)] for r in rows],
                          justify_right_from=3))
    print_refit(found, write_path, runs)


def _refit_cells(r: dict) -> list[str]:
    """The refit's prediction and error of a run, or 'held out' where the run was left out of the fit."""
    if r["held_out"] is not None or r["fitted"] is None:
        return ["held out", "-"]
    return [f"{r['fitted']:,.0f}", f"{100 * (r['fitted'] / r['measured'] - 1):+.1f}%"]


def print_refit(found: dict, write_path: str | None, runs: list) -> None:
    """Each GPU's multipliers, the limits the runs pressed, the memory warnings and where the constants went."""
    out, fitted = console(), found["fitted"]
    for gpu, f in fitted.items():
        # a capped efficiency is named once, with what it got in effect, on the limit line below
        base = "" if f["catalog_unchanged"] else f" (on {shipped_of(f['gpu_key'])})"
        note = f": {f['a2a_note']}" if f["a2a_note"] and not f["tied"] else ""
        out.print(f"{gpu}{base}: {f['runs']} run(s): {multipliers(f)}{note}")
        if f["tied"]:
            out.print(f"  assumed: your cluster evenly off the shipped constants (one factor for both), since "
                      f"{f['a2a_note']}; your runs now {_matched(found['runs'], gpu)}")
        if f["limits"]:
            out.print(f"  limit: {'; '.join(f['limits'])}: your runs ask for more than the model allows, so the refit "
                      "does not meet them; check those rows (units, GPU count, configuration)")
    for r in found["runs"]:
        if r["held_out"]:
            out.print(f"[yellow]warning[/yellow]: run {escape(r['run_id'])} held out of the fit: "
                      f"{escape(r['held_out'])}")
    for m in found["memory_warnings"]:
        out.print(f"[yellow]warning[/yellow]: {escape(m['message'])}")
    out.print(_written_line(fitted, write_path, found.get("written", {}).get("sections"), runs))


def _matched(rows: list[dict], gpu: str) -> str:
    """How the refit meets a GPU's fitted runs: each run's error where a line holds them, else the range."""
    errors = [(r["run_id"], r["fitted"] / r["measured"] - 1) for r in rows
              if r["gpu"] == gpu and r["held_out"] is None and r["fitted"] is not None]
    if len(errors) <= MATCHED_BY_NAME:
        return "matched at " + ", ".join(f"{escape(i)} {e:+.1%}" for i, e in errors)
    return f"matched within {min(e for _, e in errors):+.1%} to {max(e for _, e in errors):+.1%}"


def _misfit_line(m: dict, gpu: str) -> str:
    """A run moetune predicts cannot fit (planner/calibrate.py memory_misfits): kept in the fit, and named."""
    over = []
    if m["peak_bytes"] > m["capacity_bytes"]:
        peak, cap = m["peak_bytes"] / GIB, m["capacity_bytes"] / GIB
        over.append(f"a peak of {peak:.1f} GiB on {a_figure(f'{cap:.1f}')} GiB {gpu}")
    if m["host_capacity_bytes"] is not None and m["host_peak_bytes"] > m["host_capacity_bytes"]:
        host, cap = m["host_peak_bytes"] / GIB, m["host_capacity_bytes"] / GIB
        over.append(f"{host:.0f} GiB of host memory a GPU, past its {cap:.0f} GiB share of the host")
    return (f"run {m['run_id']}: moetune predicts {' and '.join(over)}, yet it ran: moetune's memory estimate or the "
            "row's layout is off (check its tp, pp, ep, recompute and offload against the launch); its time is "
            "still fitted")


def _written_line(fitted: dict, write_path: str | None, where: dict | None, runs: list) -> str:
    """Where the constants went and how to use them; a top-level file says for which GPU file it was fitted."""
    if not write_path:
        try:
            sections(by_gpu(runs))
        except MoetuneError:  # --write would refuse this mix: say what would keep them instead
            return ("to keep them, put each GPU file's runs in a CSV of its own and calibrate each with --write FILE "
                    "(an --efficiency file holds one cluster file's GPU)")
        return "pass --write FILE to keep them, then --efficiency FILE to estimate, plan and explain"
    label, section = next(iter(where.items()))
    if section is None:
        return (f"written to {write_path} as top-level constants ({label} is not a catalog GPU unchanged, and "
                f"--efficiency reads sections by catalog name): pass it with --gpu {fitted[label]['gpu']} "
                f"--efficiency {write_path}")
    return f"written to {write_path}, a section per GPU named as the catalog names it: pass it with --efficiency"
