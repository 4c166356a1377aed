"""``moetune calibrate`` on the published runs: the fit, each run predicted against its measurement, and the checks
that say how far those figures carry: which held-out runs rerun a fitted configuration, the measured order of the
A/B groups and their ties, and (``--leave-one-model-out``) each model predicted by a fit that never saw it."""

import statistics

from moetune.cli.output import console, emit_json, table
from moetune.errors import MoetuneError
from moetune.files import write_text
from moetune.layout.validate import validate
from moetune.planner.ab_order import TIE_TOLERANCE, ordered_pairs, tied_apart
from moetune.planner.calibrate import (
    COMPUTE_KEYS,
    SHARED,
    Prediction,
    calibrate,
    capped_a2a,
    fitted_effs,
    leave_one_model_out,
    unfitted_predictions,
    with_params,
)
from moetune.planner.repeats import reruns, unmeetable
from moetune.planner.runs import TOLERANCE, load_runs
from moetune.walls.efficiency import EFFICIENCY_CAP, efficiency

TFLOPS_ONLY = "tflops-only"


def usable_runs():
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
    found = unmeetable(TOLERANCE)
    if not found:
        return "No configuration was measured so far apart twice that a prediction could not meet both within 15%."
    shown = {r["run_id"] for r in rows}
    least = sum(g.least_misses(TOLERANCE) for g in found if set(g.run_ids) <= shown)
    missed = sum(abs(r["error"]) > TOLERANCE for r in rows)
    groups = ", ".join(f"{' vs '.join(g.run_ids)} ({g.spread:.2f}x)" for g in found)
    return (f"Measured apart by more than any prediction can meet within 15% (1.35x), same configuration: {groups}; "
            f"so at least {least} of these {len(rows)} runs miss 15% whatever the constants ({missed} do)")


def _pair(q) -> dict:
    return {"group": q.group, "faster": q.faster, "slower": q.slower, "measured_gap": q.measured_gap,
            "predicted_gap": q.predicted_gap, "agrees": q.agrees}


def _row(p: Prediction, subset: str) -> dict:
    return {"run_id": p.run.run_id, "subset": subset, "model": p.run.model.name, "gpu": p.run.gpu.key,
            "gpus": p.run.layout.world_size, "measured": p.target, "predicted": p.predicted, "error": p.error}


def _stats(rows: list[dict]) -> str:
    errs = [abs(r["error"]) for r in rows]
    within = sum(e <= TOLERANCE for e in errs)
    return f"median |error| {100 * statistics.median(errs):.1f}%, {within}/{len(errs)} within {TOLERANCE:.0%}"


def published(write_path: str | None, as_json: bool, one_model_out: bool) -> None:
    """Fit on the calibration half of the published runs; report every run and the checks on the fit."""
    runs = usable_runs()
    fitted, on_fit, held = calibrate(runs)
    if write_path:
        write_text(write_path, fitted_toml(fitted), "--write")
    rows = [_row(p, subset) for subset, preds in (("fit", on_fit), ("held-out", held),
                                                  (TFLOPS_ONLY, unfitted_predictions(fitted))) for p in preds]
    rerun = {r.run_id for r in reruns([p.run for p in held], [p.run for p in on_fit])}  # on_fit: the fitted runs
    effs = fitted_effs(fitted)
    order, ties = ordered_pairs(effs), ordered_pairs(effs, ties=True)
    apart = {(q.faster, q.slower) for q in tied_apart(ties)}
    capped = {g: capped_a2a(efficiency(g, priors_only=True), effs[g], p["a2a_scale"]) for g, p in fitted.items()}
    lomo = [_row(p, "left out") for p in leave_one_model_out(runs)] if one_model_out else None
    if as_json:
        emit_json({"fitted": fitted, "a2a_capped": capped, "runs": [{**r, "rerun_of_fit": r["run_id"] in rerun}
                                                                   for r in rows],
                   "ab_order": [_pair(q) for q in order],
                   "ab_ties": [{**_pair(q), "predicted_apart": (q.faster, q.slower) in apart} for q in ties],
                   "unmeetable_repeats": [{"run_ids": list(g.run_ids), "measured": list(g.measured),
                                           "spread": g.spread, "least_misses": g.least_misses(TOLERANCE)}
                                          for g in unmeetable(TOLERANCE)],
                   **({"leave_one_model_out": lomo} if lomo is not None else {})})
        return
    _print_fit(fitted, capped, rows)
    _print_checks(rows, rerun, order, [q for q in ties if (q.faster, q.slower) in apart], len(ties))
    if lomo is not None:
        _print_lomo(lomo)


def _print_fit(fitted: dict, capped: dict, rows: list[dict]) -> None:
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


def _print_checks(rows: list[dict], rerun: set, order: list, apart: list, ties: int) -> None:
    out = console()
    for subset in ("fit", "held-out", TFLOPS_ONLY):
        mine = [r for r in rows if r["subset"] == subset]
        if mine:
            out.print(f"{subset}: {_stats(mine)}")
    held = [r for r in rows if r["subset"] == "held-out"]
    again, new = [r for r in held if r["run_id"] in rerun], [r for r in held if r["run_id"] not in rerun]
    if again and new:
        out.print(f"  of the held-out: {len(again)} rerun a fitted configuration (a later release, another "
                  f"measurement): {_stats(again)}; {len(new)} configurations the fit never saw: {_stats(new)}")
    out.print(f"({TFLOPS_ONLY}: runs published as TFLOP/s only, in tokens where every FLOP convention agrees; never "
              "in the fit of the multipliers, though R151-R158's routing pairs set the dropless imbalance, "
              "layout/imbalance.py)")
    out.print("The held-out runs are not blind: the model's structure was revised against them (docs/time.md); "
              "--leave-one-model-out refits without each model in turn, the better guide for a model of your own.")
    out.print(_unmeetable_line(rows))
    wrong = [f"{q.faster} > {q.slower}" for q in order if not q.agrees]
    other_way = f"; predicted the other way: {', '.join(wrong)}" if wrong else ""
    out.print(f"A/B groups: {len(order) - len(wrong)}/{len(order)} pairs in the measured order (pairs whose measured "
              f"gap exceeds the group's repeat noise){other_way}")
    if ties:
        listed = ", ".join(f"{q.faster} vs {q.slower} (measured {100 * q.measured_gap:+.1f}%, predicted "
                           f"{100 * q.predicted_gap:+.1f}%)" for q in apart)
        out.print(f"A/B ties (measured within the group's repeat noise): {ties - len(apart)}/{ties} predicted within "
                  f"{100 * TIE_TOLERANCE:.0f}% of the measured ratio" + (f"; not: {listed}" if apart else ""))


def _print_lomo(rows: list[dict]) -> None:
    models = sorted({r["model"] for r in rows})
    console().print(table("Leave one model out: each model's runs predicted by a fit without them",
                          ["model", "runs", "median |error|", "within 15%"],
                          [[m, len(mine := [r for r in rows if r["model"] == m]),
                            f"{100 * statistics.median(abs(r['error']) for r in mine):.1f}%",
                            f"{sum(abs(r['error']) <= TOLERANCE for r in mine)}/{len(mine)}"] for m in models],
                          justify_right_from=1))
    console().print(f"left out in turn: {_stats(rows)}")
