"""``moetune calibrate``: fit the efficiency constants to the published measured runs."""

import statistics

import click
from rich.markup import escape

from moetune.cli.output import GIB, console, emit_json, table
from moetune.errors import MoetuneError
from moetune.files import check_writable, write_text
from moetune.layout.validate import validate
from moetune.planner.ab_order import ordered_pairs
from moetune.planner.calibrate import (
    COMPUTE_KEYS,
    SHARED,
    calibrate,
    capped_a2a,
    fitted_effs,
    memory_misfits,
    predict,
    unfitted_predictions,
    with_params,
)
from moetune.planner.repeats import unmeetable
from moetune.planner.runs import load_runs
from moetune.planner.user_runs import by_gpu, fit_user_runs, sections, shipped_of, user_toml
from moetune.planner.user_runs_csv import load_user_runs
from moetune.walls.efficiency import EFFICIENCY_CAP, efficiency
from moetune.words import a_figure

TFLOPS_ONLY = "tflops-only"


def _usable_runs():
    runs = []
    for run in load_runs():
        try:
            validate(run.model, run.layout, run.workload)
        except MoetuneError:
            continue
        runs.append(run)
    return runs


def fitted_toml(fitted: dict) -> str:
    lines = ["# Written by `moetune calibrate`; pass it with --efficiency."]
    for gpu, params in fitted.items():
        eff = with_params(efficiency(gpu, priors_only=True), params)
        lines.append(f"\n[{gpu}]")
        for key in (*COMPUTE_KEYS, "a2a_eff_alltoall", "a2a_eff_deepep", "a2a_eff_hybridep", *SHARED):
            lines.append(f"{key} = {eff[key]:.4g}")
    return "\n".join(lines) + "\n"


def _unmeetable_line(rows: list[dict]) -> str:
    """Which misses the data forces: one configuration measured further apart than any prediction can meet."""
    found = unmeetable(0.15)
    if not found:
        return "No configuration was measured so far apart twice that a prediction could not meet both within 15%."
    shown = {r["run_id"] for r in rows}
    least = sum(g.least_misses(0.15) for g in found if set(g.run_ids) <= shown)
    missed = sum(abs(r["error"]) > 0.15 for r in rows)
    groups = ", ".join(f"{' vs '.join(g.run_ids)} ({g.spread:.2f}x)" for g in found)
    return (f"Measured apart by more than any prediction can meet within 15% (1.35x), same configuration: {groups}; "
            f"so at least {least} of these {len(rows)} runs miss 15% whatever the constants ({missed} do)")


@click.command(name="calibrate")
@click.option("--runs", "runs_path", default=None,
              help="Your own measured runs (CSV with published_runs.csv's columns): refit the per-GPU multipliers "
                   "on the shipped constants to them instead.")
@click.option("--write", "write_path", type=click.Path(dir_okay=False), default=None,
              help="Write the fitted constants to this TOML file (an --efficiency file).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(runs_path: str | None, write_path: str | None, as_json: bool) -> None:
    """Fit compute / all-to-all constants per GPU and the shared host CPU cost on half the published runs;
    report both halves. With --runs, fit your own runs instead."""
    if write_path:
        check_writable(write_path, "--write")  # before the fit, not after it
    if runs_path:
        _calibrate_user(runs_path, write_path, as_json)
        return
    fitted, on_fit, held = calibrate(_usable_runs())
    unfitted = unfitted_predictions(fitted)
    if write_path:
        write_text(write_path, fitted_toml(fitted), "--write")
    rows = [{"run_id": p.run.run_id, "subset": subset, "model": p.run.model.name, "gpu": p.run.gpu.key,
             "gpus": p.run.layout.world_size, "measured": p.target, "predicted": p.predicted, "error": p.error}
            for subset, preds in (("fit", on_fit), ("held-out", held), (TFLOPS_ONLY, unfitted)) for p in preds]
    effs = fitted_effs(fitted)
    pairs = ordered_pairs(effs)
    order = [{"group": q.group, "faster": q.faster, "slower": q.slower, "measured_gap": q.measured_gap,
              "predicted_gap": q.predicted_gap, "agrees": q.agrees} for q in pairs]
    capped = {g: capped_a2a(efficiency(g, priors_only=True), effs[g], p["a2a_scale"]) for g, p in fitted.items()}
    if as_json:
        emit_json({"fitted": fitted, "a2a_capped": capped, "runs": rows, "ab_order": order,
                   "unmeetable_repeats": [{"run_ids": list(g.run_ids), "measured": list(g.measured),
                                           "spread": g.spread, "least_misses": g.least_misses(0.15)}
                                          for g in unmeetable(0.15)]})
        return
    out = console()
    out.print(table("Fitted per GPU (host CPU cost and the fused all-to-all's token and SM costs: one value for all)",
                    ["gpu", "compute x", "all-to-all x", "host us/layer", "a2a ns/token", "a2a GB/s/SM"],
                    [[g, f"{p['compute_scale']:.3f}", f"{p['a2a_scale']:.3f}", f"{p['host_us_per_layer']:.0f}",
                      f"{p['a2a_token_ns']:.2f}", f"{p['a2a_gbps_per_sm']:.1f}"] for g, p in fitted.items()]))
    held_back = {g: c for g, c in capped.items() if c}
    if held_back:  # the table's multiplier is the fit's; a dispatcher whose efficiency hit the link cap got less
        out.print(f"all-to-all x held at the link cap (the achieved share of a link stays <= {EFFICIENCY_CAP:g}): "
                  + "; ".join(f"{g} " + ", ".join(f"{k} x{v:.2f}" for k, v in c.items())
                              for g, c in held_back.items()))
    out.print(table("Tokens/s/GPU: predicted vs measured", ["run", "subset", "model", "gpu", "GPUs", "measured",
                                                            "predicted", "error"],
                    [[r["run_id"], r["subset"], r["model"], r["gpu"], r["gpus"], f"{r['measured']:,.0f}",
                      f"{r['predicted']:,.0f}", f"{100 * r['error']:+.1f}%"] for r in rows], justify_right_from=4))
    for subset in ("fit", "held-out", TFLOPS_ONLY):
        errs = [abs(r["error"]) for r in rows if r["subset"] == subset]
        if errs:
            within = sum(e <= 0.15 for e in errs)
            out.print(f"{subset}: median |error| {100 * statistics.median(errs):.1f}%, {within}/{len(errs)} within 15%")
    out.print(f"({TFLOPS_ONLY}: runs published as TFLOP/s only, in tokens where every FLOP convention agrees; "
              "never fitted)")
    out.print(_unmeetable_line(rows))
    wrong = [f"{q['faster']} > {q['slower']}" for q in order if not q["agrees"]]
    other_way = f"; predicted the other way: {', '.join(wrong)}" if wrong else ""
    out.print(f"A/B groups: {len(order) - len(wrong)}/{len(order)} pairs in the measured order (pairs whose measured "
              f"gap exceeds the group's repeat noise){other_way}")


def refit(runs: list, write_path: str | None, by: str = "moetune calibrate --runs") -> dict:
    """The per-GPU multipliers refitted to measured runs (a user's CSV, a sweep's candidates), each run predicted with
    the shipped constants and with the refit, written to WRITE_PATH where given: calibrate --runs' JSON object."""
    where = sections(by_gpu(runs)) if write_path else None  # a mix no file can hold fails before the fit
    fitted = fit_user_runs(runs)
    if write_path:
        write_text(write_path, user_toml(fitted, where, by), "--write")
    label = {f["gpu"]: name for name, f in fitted.items()}  # each run's GPU as the user gave it
    rows = [{"run_id": r.run_id, "model": r.model.name, "gpu": label[r.gpu.ref], "gpus": r.layout.world_size,
             "measured": r.tokens_per_s_per_gpu, "shipped": predict(r, efficiency(r.gpu.key)).predicted,
             "fitted": predict(r, fitted[label[r.gpu.ref]]["constants"]).predicted} for r in runs]
    gpu_of = {r["run_id"]: r["gpu"] for r in rows}
    misfits = [{**m, "message": _misfit_line(m, gpu_of[m["run_id"]])} for m in memory_misfits(runs)]
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
                            f"{r['fitted']:,.0f}", f"{100 * (r['fitted'] / r['measured'] - 1):+.1f}%"] for r in rows],
                          justify_right_from=3))
    print_refit(found, write_path, runs)


def print_refit(found: dict, write_path: str | None, runs: list) -> None:
    """Each GPU's multipliers, the limits the runs pressed, the memory warnings and where the constants went."""
    out, fitted = console(), found["fitted"]
    for gpu, f in fitted.items():
        # a capped efficiency is named once, with what it got in effect, on the limit line below
        a2a = (f"all-to-all x {f['a2a_scale']:.3f} ({', '.join(f['a2a_keys'])})" if f["a2a_note"] is None else
               f"all-to-all kept as shipped: {f['a2a_note']}")
        base = "" if f["catalog_unchanged"] else f" (on {shipped_of(f['gpu_key'])})"
        out.print(f"{gpu}{base}: {f['runs']} run(s): compute x {f['compute_scale']:.3f}, {a2a}")
        if f["limits"]:
            out.print(f"  limit: {'; '.join(f['limits'])}: your runs ask for more than the model allows, so the refit "
                      "does not meet them; check those rows (units, GPU count, configuration)")
    for m in found["memory_warnings"]:
        out.print(f"[yellow]warning[/yellow]: {escape(m['message'])}")
    out.print(_written_line(fitted, write_path, found.get("written", {}).get("sections"), runs))


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
