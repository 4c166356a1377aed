"""How `plan --baseline` and `explain --baseline` print the comparison of a configuration with its baseline
(planner/versus.py): the reason in one line, the baseline's own refusals and measurements, the settings the pick
changes with each group's predicted effect, and the seconds per wall."""

from moetune.cli.output import console, table


def print_versus(v: dict) -> None:
    out = console()
    note = "" if v["baseline_fits"] else " (the baseline does not fit)"
    out.print(f"[bold]Versus baseline[/bold]: {v['why']}{note}")
    if v.get("baseline_rule_errors"):
        out.print(f"[bold]Baseline[/bold]: it raises rule error(s) {', '.join(v['baseline_rule_errors'])} "
                  "(`moetune check` of its config says why): compared as what it would cost if it ran")
    if v.get("measured_note"):  # a saved plan from before it had none
        out.print(f"[bold]Measured[/bold]: {v['measured_note']}")
    rows = []
    for e in v["effects"]:  # each group's settings together, in the order they are applied in turn
        for i, k in enumerate(e["settings"]):
            first = i == 0
            rows.append([e["group"] if first else "", k, *map(str, v["changes"][k]),
                         _effect(e, "alone") if first else "", _effect(e, "in_turn") if first else ""])
    if rows:  # none where the pick is the baseline's configuration (its `why` says so)
        out.print(table("Settings the pick changes (predicted tokens/s/GPU: each group alone on the baseline, and in "
                        "turn on the groups above it)", ["group", "setting", "baseline", "pick", "alone", "in turn"],
                        rows))
    rows = [[w, f"{x['baseline']:.3f}", f"{x['pick']:.3f}", f"{x['saved']:+.3f}"] for w, x in v["walls"].items()]
    out.print(table("Seconds per step by wall", ["wall", "baseline", "pick", "saved"], rows))


def _effect(e: dict, how: str) -> str:
    """One group's predicted effect for the settings table: '+3.6%', '+3.6% (does not fit)', '+5.8% (refused by
    rule ...)' or 'needs others'."""
    if e[how] is None:
        return "needs others"
    said = ([] if e[f"{how}_fits"] else ["does not fit"]) + ([e[f"{how}_refused"]] if e[f"{how}_refused"] else [])
    return f"{e[how]:+.1%}" + (f" ({'; '.join(said)})" if said else "")
