"""``moetune estimate``: memory (and, once modelled, time) of one configuration."""

import click

from moetune.cli.options import build_knobs, build_layout, build_workload, knob_options, layout_options, load_overheads
from moetune.cli.output import console, emit_json, gib, table
from moetune.planner.estimate import Estimate, estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model


@click.command(name="estimate")
@click.argument("model")
@layout_options
@knob_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(model: str, as_json: bool, **kw) -> None:
    """Per-rank memory of MODEL (built-in name or config.json) on a layout, per pipeline stage."""
    result = estimate(load_model(model), load_gpu(kw["gpu"]), build_layout(kw), build_workload(kw),
                      build_knobs(kw), load_overheads(kw["overheads"]))
    if as_json:
        emit_json(result.to_json())
    else:
        print_estimate(result)


def print_estimate(result: Estimate) -> None:
    out = console()
    out.print(f"[bold]{result.model.name}[/bold] on {result.layout.world_size} x {result.gpu.name}: "
              f"{result.layout.describe()}")
    stages = result.stages
    names = list(dict.fromkeys(k for s in stages for k in s.items))
    rows = [[name] + [gib(s.items.get(name, 0)) for s in stages] for name in names]
    rows.append(["[bold]total[/bold]"] + [f"[bold]{gib(s.total)}[/bold]" for s in stages])
    rows.insert(0, ["params on rank"] + [f"{s.params / 1e9:.3f}B" for s in stages])
    rows.insert(1, ["micro-batches in flight"] + [f"{s.in_flight_microbatches:g}" for s in stages])
    out.print(table("Memory per rank (GiB) by pipeline stage", ["item"] + [f"stage {s.stage}" for s in stages], rows))
    verdict = "[green]fits[/green]" if result.fits else "[red]does NOT fit[/red]"
    out.print(f"peak {gib(result.peak_bytes)} GiB on stage {result.worst_stage} of {gib(result.gpu.capacity_bytes)} "
              f"GiB usable: {verdict}")
