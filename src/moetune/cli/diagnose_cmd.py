"""``moetune diagnose TRACE_OR_DIR... [--log FILE] [--json]``: which wall dominates a measured run."""

import click
from rich.markup import escape

from moetune.cli.output import console, emit_json, table
from moetune.profile.diagnose import DiagnoseResult, diagnose


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:,.2f}"


def _share(seconds: float, step: float | None) -> str:
    return f"{seconds / step:.1%}" if step else "-"


def _print(result: DiagnoseResult) -> None:
    out, step = console(), result.step_seconds
    world = f" of {result.world_size}" if result.world_size else ""
    out.print(f"[bold]moetune diagnose[/bold]: {result.ranks} rank trace(s){world}, step {_ms(step)} ms")
    if result.breakdown:
        rows = [[cls, _ms(s), _share(s, step)] for cls, s in sorted(result.breakdown.items(), key=lambda x: -x[1]) if s]
        rows.append(["exposed communication", _ms(result.exposed_communication_seconds),
                     _share(result.exposed_communication_seconds or 0.0, step)])
        out.print(table("Kernel time per step by class (summed over streams)", ["class", "ms", "share"], rows))
        idle = [["total idle" if k == "seconds" else k, _ms(v), _share(v, step)] for k, v in result.idle.items()]
        out.print(table("GPU idle per step (comm_kernel_wait: inside comm kernels, not idle)",
                        ["cause", "ms", "share"], idle))
    if len(result.per_rank) > 1:
        rows = [[r["rank"], _ms(r["seconds"]), _ms(r["busy_seconds"]), _ms(r["idle"]["seconds"]),
                 _ms(r["exposed_communication_seconds"])] for r in result.per_rank]
        out.print(table("Per rank (ms per step)", ["rank", "step", "busy", "idle", "exposed comm"], rows))
    out.print(f"\n[bold]Dominant wall: {result.dominant_wall}[/bold] - {escape(result.wall_reason)}")
    for line in result.evidence:
        out.print(f"  - {escape(line)}")
    for note in result.notes:
        out.print(f"  note: {escape(note)}")
    if result.recommendations:
        rows = [[r.rule, escape("\n".join(r.change)), escape(r.why)] for r in result.recommendations]
        out.print(table("Next changes (Megatron Bridge overrides)", ["rule", "change", "why"], rows,
                        justify_right_from=3))


@click.command(name="diagnose")
@click.argument("traces", nargs=-1, type=click.Path(path_type=str))
@click.option("--log", "log_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Megatron-LM / Megatron Bridge training log (stdout of the last rank).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(traces: tuple[str, ...], log_path: str | None, as_json: bool) -> None:
    """Find the dominant wall (memory, communication, host overhead, compute) in Kineto traces
    (.json/.json.gz, one file per rank, or directories of them) and/or a Megatron training log,
    and name the next changes."""
    result = diagnose(list(traces), log=log_path)
    if as_json:
        emit_json(result.to_dict())
    else:
        _print(result)
