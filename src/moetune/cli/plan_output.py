"""``moetune plan``'s results: the table people read (print_plan) and the JSON scripts read (plan_json)."""

from pathlib import Path

from rich.markup import escape

from moetune.cli.emit_cmd import check_command
from moetune.cli.output import Notes, console, fsdp_text
from moetune.cli.plan_notes import gain_over_pick, near_tie_json
from moetune.cli.plan_table import print_rows
from moetune.cli.release_check import release_json, release_line
from moetune.emit.launch import whole_nodes
from moetune.layout.knobs import imbalance_source
from moetune.planner.ep1_note import ep1_text, etp_alone_text
from moetune.planner.explain import optimizer_note
from moetune.planner.moves import tight
from moetune.planner.plan_notes import OFFLOAD_SOURCE, SHORT_CP_SOURCE, gbs_allowing, gbs_note, table_notes
from moetune.planner.ranking import cp_weight
from moetune.planner.search import PlanResult
from moetune.planner.why_none import nothing_fits


def ranking_weight(r) -> float:
    """The factor the search ranked this result's step by: CP_SHORT_MARGIN for CP > 1 below the long-context regime
    (planner/ranking.py), else 1; its time figures are its own prediction either way."""
    return float(cp_weight(r.layout.cp, r.workload.seq_length))


def _twins(result: PlanResult) -> list[list]:
    """The dispatcher twins folded into each row (search.PlanResult.same_prediction; none in a result built without)."""
    return result.same_prediction or [[] for _ in result.results]


def same_json(twins: list) -> dict:
    """A row's `same_prediction`: each dispatcher whose candidate predicts the row's step time and was folded into it
    (planner/twins.py), with the peak it needs (its buffers differ); nothing where none was."""
    return {"same_prediction": [{"dispatcher": e.knobs.dispatcher, "peak_bytes": e.peak_bytes} for e in twins]} \
        if twins else {}


def plan_json(result: PlanResult, gbs: int, pins: dict | None = None) -> dict:
    out = {"candidates_evaluated": result.candidates_evaluated, "feasible": result.feasible,
           "search_seconds": result.search_seconds, "layouts": result.layouts, "knob_sets": result.knob_sets,
           "headroom_gib": result.headroom_gib, "gbs_excluded_dp": result.gbs_excluded_dp,
           # the dropless factor every row was charged (plan --token-imbalance; null: the default, which grows with EP)
           "token_imbalance": result.token_imbalance,
           "results": [{**r.to_json(), "tight": tight(r), "ranking_weight": ranking_weight(r), **same_json(twins)}
                       for r, twins in zip(result.results, _twins(result))]}
    if result.release is not None:  # emit and check of this file target the same release (release_check.py)
        out["release"] = release_json(result.release, result.release_lacks)
    if result.gbs_excluded_dp:
        out["gbs_allowing_widest_dp"] = gbs_allowing(result.gbs_excluded_dp, gbs)
    if (alt := result.offload_alternative) is not None:
        out["offload_alternative"] = {**alt.to_json(), "predicted_gain": gain_over_pick(result, alt),
                                      "source": OFFLOAD_SOURCE}
    if (alt := result.short_cp_alternative) is not None:
        out["short_cp_alternative"] = {**alt.to_json(), "predicted_gain": gain_over_pick(result, alt),
                                       "source": SHORT_CP_SOURCE}
    if result.near_tie is not None:
        out["near_tie"] = near_tie_json(result)
    if result.shape_refusal is not None:
        out["shape_refusal"] = result.shape_refusal
    if not result.results:
        out["nothing_fits"] = {"lightest_peak_gib": result.lightest_peak_gib, "lightest": result.lightest,
                               "capacity_gib": result.capacity_gib, "lightest_host_gib": result.lightest_host_gib,
                               "lightest_state_gib": result.lightest_state_gib,
                               "host_capacity_gib": result.host_capacity_gib,
                               "sequence_excludes": result.sequence_note, "reason": nothing_fits(result, pins)}
    return out


def print_plan(result: PlanResult, gbs: int, pins: dict | None = None) -> None:
    out = console()
    notes = Notes(out)  # each note wrapped to the terminal's width
    notes.print(f"{result.candidates_evaluated:,} candidates ({result.layouts:,} layouts x micro-batch sizes x "
                f"{result.knob_sets} knob sets) in {result.search_seconds:.2f} s; {result.feasible:,} fit"
                + (f" with {result.headroom_gib:g} GiB kept free" if result.headroom_gib else ""))
    if result.gbs_excluded_dp:
        notes.print(f"[yellow]note[/yellow]: {gbs_note(result.gbs_excluded_dp, gbs)}")
    if result.release is not None:
        notes.print(release_line(result.release, result.release_lacks))
    if not result.results:
        notes.print(f"[red]nothing fits[/red]: {nothing_fits(result, pins)}")
        return
    print_rows(out, result.results, [[e.knobs.dispatcher for e in twins] for twins in _twins(result)])
    if note := optimizer_note(result.results[0]):  # pinned, so the same on every row
        notes.print(f"Optimizer (every row): {note}")
    for note in fsdp_text(result.results[0].knobs):  # one search pass, one strategy (search.plan)
        notes.print(f"Data-parallel sharding (every row): {note}")
    for note in table_notes(plan_json(result, gbs, pins)):  # worded from the JSON, as report's page words them
        notes.print(f"[yellow]note[/yellow]: {escape(note)}")


# where `next_steps` saves the plan and writes the launch (any names work: they are the commands' arguments)
PLAN_FILE, RUN_DIR = "plan.json", "run"


def next_steps(result: PlanResult) -> str:
    """The commands that take the plan on (plan's closing line, text output only): save it as JSON, then explain, emit
    and check the launch emit writes, as emit of the saved plan prints that check (emit_cmd.check_command: its GPU,
    count and the release the plan was searched for), and report. Only commands that run: where emit would refuse the
    pick's GPUs (part of a node), what to plan instead."""
    pick = result.results[0]
    world, per_node = pick.layout.world_size, pick.gpu.gpus_per_node
    if not whole_nodes(world, per_node):
        return _partial_node_steps(world, per_node)
    check = check_command({"cluster.gpu": pick.gpu.ref, "cluster.num_gpus": pick.layout.world_size}, Path(RUN_DIR),
                          result.release)
    # emit refuses force-balanced routing without --benchmark (it runs on random router logits: emit_cmd.py)
    bench = (" --benchmark", "a benchmark launch: force-balanced routing; to train, plan with --routing dropless; ") \
        if pick.knobs.routing == "force-balance" else ("", "")
    return (f"[bold]Next[/bold]: save this plan: the same command with `--json > {PLAN_FILE}`; then `moetune explain "
            f"--plan {PLAN_FILE}` (why #1, and what to retune), `moetune emit {PLAN_FILE} --out {RUN_DIR}/{bench[0]}` "
            f"({bench[1]}Megatron Bridge overrides, Megatron-LM arguments, env.sh and launch scripts; --rank N for row "
            "N), "
            f"`{escape(check)}` (the launch as it runs), and `moetune report {PLAN_FILE} --out plan.html` (a page to "
            "share)")


def _partial_node_steps(world: int, per_node: int) -> str:
    """next_steps where the job leaves a node partly used (rule scale.partial_node): emit refuses it (its launch runs
    whole nodes, emit/launch.py topology), so the line names the whole-node counts to plan, not emit and its check."""
    fewer = world // per_node * per_node
    return (f"[bold]Next[/bold]: save this plan: the same command with `--json > {PLAN_FILE}`; then `moetune explain "
            f"--plan {PLAN_FILE}` (why #1, and what to retune) and `moetune report {PLAN_FILE} --out plan.html` (a "
            f"page to share). moetune emit refuses {world} GPUs over {per_node}-GPU nodes (its launch runs whole "
            f"nodes): to launch, plan again with --gpus {fewer} or {fewer + per_node}, or with --gpu a cluster file "
            "whose gpus_per_node is what each node runs")


def routing_line(pick, ep1: dict | None = None) -> str | None:
    """What dropless routing charges the pick (None where nothing): where that factor comes from (the published
    dropless runs behind moetune's default, layout/imbalance.py) and what it costs are `explain --plan`'s. `ep1`: an
    EP 1 pick's facts among EP > 1 candidates (planner/ep1_note.py ep1_pick)."""
    if pick is None or pick.knobs.routing != "dropless":
        return None
    if ep1:
        return f"[bold]Routing[/bold]: {escape(ep1_text(ep1))}"
    if (charged := pick.knobs.imbalance_at(pick.layout.ep)) > 1:
        source = "moetune's default" if pick.knobs.token_imbalance is None else imbalance_source(pick.knobs)
        return (f"[bold]Routing[/bold]: dropless: the busiest of EP {pick.layout.ep} expert ranks is charged "
                f"{charged:.2f}x the mean ({source}); `explain --plan` shows where that comes from and what it costs; "
                "published benchmarks run force-balanced routing, on random router logits: a throughput "
                "measurement, not a way to train")
    if pick.layout.ep == 1 and pick.layout.etp > 1:
        return f"[bold]Routing[/bold]: {escape(etp_alone_text(pick.knobs, pick.layout.etp))}"
    return None
