"""``moetune estimate``: memory and time of one configuration; ``moetune memory``: its memory alone."""

import click
from rich.markup import escape

from moetune.cli.check_cmd import refused
from moetune.cli.estimate_input import estimate_from_flags
from moetune.cli.options import config_options, knob_options, layout_options, release_options
from moetune.cli.output import (
    attention_notes,
    console,
    emit_json,
    gib,
    launched_by_mlm,
    layout_extras,
    print_checks,
    print_model_notes,
    table,
    user_files_line,
    workload_line,
)
from moetune.cli.release_check import options_reading, release_json
from moetune.configio.releases import describe, option
from moetune.layout.ranks import groups_leaving_domain
from moetune.planner.defaults import default_scope
from moetune.planner.ep_domain import partial_domain_note
from moetune.planner.estimate import Estimate
from moetune.planner.explain import checks, gbs_default_text, optimizer_note, workload_of
from moetune.planner.nvfp4_evidence import caveat, caveat_line
from moetune.planner.track_record import estimate_record, track_record_text
from moetune.specs.platform import platform_defaults


def configuration_inputs(func):
    """MODEL and one configuration's flags (or a config), the same for estimate and memory."""
    for opt in reversed([click.argument("model"), layout_options, knob_options, config_options,
                         release_options("defaulted knobs move to what it runs, a given one it lacks is an error"),
                         click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")]):
        func = opt(func)
    return func


@click.command(name="estimate")
@configuration_inputs
def command(model: str, as_json: bool, **kw) -> None:
    """Per-rank memory (per pipeline stage) and step time of MODEL (built-in name or config.json) on a layout,
    with the rule findings for the configuration."""
    # the rules read the release named (rules core_at_least: what it runs is judged as it runs it); the reading holds
    # it checked (known_release), so the output takes it from there, as plan does
    with options_reading(kw.get("megatron_core"), kw.get("megatron_bridge")) as read:
        result = estimate_from_flags(model, kw)
        found = checks(result)  # a configuration Megatron refuses still gets its numbers, and says so
    release = read.release  # emit and check of the saved estimate target it (release_check.inputs_release)
    record = estimate_record(result)
    fp4 = caveat(result)
    if as_json:
        note = partial_domain_note(result)
        emit_json({**result.to_json(), **({"partial_domain_note": note} if note else {}),
                   **({"nvfp4_caveat": fp4} if fp4 else {}), "checks": found, "track_record": record,
                   **({"release": release_json(release, ())} if release else {})})
    else:
        print_estimate(result)
        if release is not None:
            console().print(f"For {describe(release)} ({option(release)}): defaulted knobs take what it runs "
                            "(planner/release_fit.py release_knobs); emit and check of a saved estimate target it")
        print_checks(found, mlm=launched_by_mlm(result))
        if files := user_files_line(result.user_files):
            console().print(files)
        if fp4:
            console().print(caveat_line(fp4))
        console().print(f"[bold]Track record[/bold]: {escape(track_record_text(record))}")
    errors = sum(c["severity"] == "error" for c in found)
    if errors:  # exit 1, as `check` does: a script gating on estimate must not pass a config Megatron refuses
        raise refused(errors, "the numbers are what it would cost if it ran")


@click.command(name="memory")
@configuration_inputs
def memory_command(model: str, as_json: bool, **kw) -> None:
    """Per-rank memory of MODEL on a layout: each pipeline stage's line items and whether it fits (`estimate` with
    the step time and rule findings beside it)."""
    with options_reading(kw.get("megatron_core"), kw.get("megatron_bridge")):  # as estimate's rules read it
        result = estimate_from_flags(model, kw)
        errors = [c for c in checks(result) if c["severity"] == "error"]  # a config Megatron refuses: as estimate says
    if as_json:
        emit_json({**{key: value for key, value in result.to_json().items() if key != "time"}, "checks": errors})
    else:
        print_estimate(result, with_time=False)
        print_checks(errors, mlm=launched_by_mlm(result))
    if errors:
        raise refused(len(errors), "the memory is what it would take if it ran")


def _item_label(name: str, precision: str) -> str:
    """A memory line's name as the table shows it: the quantized weights' lines keep their JSON keys (fp8_weights,
    fp8_weight_cache) under every recipe, and the table says which format they hold under NVFP4."""
    return name.replace("fp8_", "fp4_") + " (NVFP4)" if precision == "nvfp4" and name.startswith("fp8_weight") else name


def print_estimate(result: Estimate, with_time: bool = True) -> None:
    out = console()
    out.print(f"[bold]{result.model.name}[/bold] on {result.layout.world_size} x {result.gpu.name}: "
              f"{result.layout.describe()}" + "".join(f"; {x}" for x in layout_extras(result.layout, result.knobs)))
    leaving = groups_leaving_domain(result.layout, result.job_domain)
    crossing = [f"{g.upper()} ({100 * share:.0f}% of peers)" for g, share in leaving.items() if share > 0]
    out.print(f"rank order tp-cp-ep-dp-pp; outside the {result.job_domain}-GPU NVLink domain: "
              + (", ".join(crossing) if crossing else "no group"))
    if note := partial_domain_note(result):
        out.print(f"[yellow]note[/yellow]: {note}")
    out.print(workload_line(workload_of(result)))
    stages = result.stages
    names = list(dict.fromkeys(k for s in stages for k in s.items))
    rows = [[_item_label(name, result.knobs.precision)] + [gib(s.items.get(name, 0)) for s in stages]
            for name in names]
    rows.append(["[bold]total[/bold]"] + [f"[bold]{gib(s.total)}[/bold]" for s in stages])
    rows.insert(0, ["params on rank"] + [f"{s.params / 1e9:.3f}B" for s in stages])
    rows.insert(1, ["micro-batches in flight"] + [f"{s.in_flight_microbatches:g}" for s in stages])
    out.print(table("Memory per rank (GiB) by pipeline stage", ["item"] + [f"stage {s.stage}" for s in stages], rows))
    if result.time and with_time:
        print_time(result)
    print_defaulted(result)
    # a configuration that does not fit is still one to cost (exit 0, JSON memory.fits false); `check --model` fails on
    # it, and explain gives the seeds' fit steps
    verdict = "[green]fits[/green]" if result.fits else \
        "[red]does NOT fit[/red] (`explain` with these flags gives the seeds' fit steps; `check --model` exits 1 on it)"
    out.print(f"peak {gib(result.peak_bytes)} GiB on stage {result.worst_stage} of {gib(result.gpu.capacity_bytes)} "
              f"GiB usable: {verdict}")


def _mfu_peak(result: Estimate) -> str:
    """Which peak the MFU is of, where the recipe is not BF16 (with the BF16 figure beside it)."""
    if result.knobs.precision == "bf16":
        return ""
    return f" of the {result.knobs.precision} peak, {100 * result.time['mfu_bf16_peak']:.1f}% of BF16's"


def print_time(result: Estimate) -> None:
    t, out = result.time, console()
    walls = t["walls"]
    rows = [[w, f"{s:.3f}", f"{100 * s / t['step_seconds']:.1f}%"] for w, s in walls.items()]
    out.print(table(f"Step time {t['step_seconds']:.3f} s: {t['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, "
                    f"{t['tflops_per_gpu']:.1f} TFLOP/s/GPU ({t['flops_convention']}'s count), "
                    f"MFU {100 * t['mfu']:.1f}%{_mfu_peak(result)} "
                    f"(dominant: {t['dominant_wall']})", ["wall", "seconds", "share"], rows))
    for note in attention_notes(result):
        out.print(f"note: {note}")
    if note := optimizer_note(result):
        out.print(f"Optimizer: {note}")
    coll = [[c, f"{t['collectives'][c]:.3f}", f"{t['exposed_collectives'][c]:.3f}"] for c in t["collectives"]
            if t["collectives"][c] > 0]
    if coll:
        out.print(table("Communication per step (s)", ["collective", "total", "exposed"], coll))
    print_model_notes(out, result.model)


def print_defaulted(result: Estimate) -> None:
    """The knobs and batch the flags left to the platform's values: what memory and estimate both ran on (the
    dispatcher's buffers, the FP8 caches and graph pools in the memory table come from them)."""
    out = console()
    if result.defaulted:
        scope = ",".join(result.knobs.cuda_graph_scope) or "none"
        if result.knobs.cuda_graph_scope != default_scope(result.model, result.gpu):
            scope += " (the platform's scoped graphs less what Megatron refuses beside this recompute)"
        precision = result.knobs.precision
        if precision != platform_defaults(result.gpu)["precision"]:  # defaults.default_precision
            precision += f" (the GPU has no {platform_defaults(result.gpu)['precision']} Tensor Core rate)"
        # the value the estimate ran, not the knob's unset field: the parameter switches resolve to their presets
        shown = {"cuda_graph_scope": scope, "flex_num_sms": result.knobs.num_sms, "precision": precision,
                 "moe_router_dtype": f"{result.knobs.moe_router_dtype} (as plans emit it; Megatron's own: none)",
                 "fp8_param_gather": result.knobs.fp8_params, "fp4_param_gather": result.knobs.fp4_params}
        knobs = [k for k in result.defaulted if k not in ("global_batch_size", "seq_length")]  # the batch line's
        if knobs:
            out.print("defaulted to platform values: " + ", ".join(
                f"{k}={shown.get(k, getattr(result.knobs, k, None))}" for k in knobs))
        if "global_batch_size" in result.defaulted:
            out.print(f"global batch defaulted to {gbs_default_text(result)}: pass --gbs with the run's own")
