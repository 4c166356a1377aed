"""``moetune plan``: the fastest folded layouts and knob sets that fit, ranked."""

import sys

import click
from rich.markup import escape
from rich.progress import Progress

from moetune.cli.estimate_input import load_overheads, with_mtp
from moetune.cli.options import TOKENS, release_options
from moetune.cli.output import Notes, attention_notes, console, emit_json, print_model_notes, user_files_line
from moetune.cli.plan_baseline import same_job, same_optimizer
from moetune.cli.plan_fix import parse_fix
from moetune.cli.plan_output import next_steps, plan_json, print_plan, routing_line
from moetune.cli.release_check import options_reading
from moetune.cli.versus_output import print_versus
from moetune.errors import MoetuneError
from moetune.files import read_json
from moetune.layout.imbalance import DROPLESS_IMBALANCE, DROPLESS_IMBALANCE_EP
from moetune.layout.knob_checks import TOKEN_IMBALANCE_RANGE, token_imbalance_in_range
from moetune.layout.validate import Workload
from moetune.planner.ep1_note import ep1_pick
from moetune.planner.ep_domain import ep_domain_note, ep_domain_text, partial_domain_note
from moetune.planner.estimate import user_files
from moetune.planner.explain import checks
from moetune.planner.explain_retune import unsearched_gains
from moetune.planner.fp8_evidence import caveat_line as fp8_caveat_line
from moetune.planner.fp8_evidence import plan_caveat
from moetune.planner.from_json import estimate_from_json
from moetune.planner.nvfp4_evidence import caveat as nvfp4_caveat
from moetune.planner.nvfp4_evidence import caveat_line
from moetune.planner.plan_notes import UNSEARCHED, unsearched_text
from moetune.planner.release_fit import release_model
from moetune.planner.rule_findings import findings, with_fix
from moetune.planner.search import plan
from moetune.planner.track_record import estimate_record, track_record_text
from moetune.planner.versus import versus
from moetune.specs.hardware import load_gpu
from moetune.specs.platform import platform_defaults
from moetune.specs.registry import load_model
from moetune.walls.cp_legal import dsa_exchange_refusal
from moetune.walls.efficiency import load_efficiency_file


@click.command(name="plan")
@click.argument("model")
@click.option("--gpu", required=True, help="Catalog GPU or cluster .toml file.")
@click.option("--gpus", type=click.IntRange(min=1), required=True, help="World size.")
@click.option("--seq", type=TOKENS, default=4096, show_default=True, help="Sequence length (32768 or 32k).")
@click.option("--gbs", type=click.IntRange(min=1), default=None,
              help="Global batch size (required: it fixes DP x micro-batches).")
@click.option("--top", type=click.IntRange(min=1, max=100), default=5, show_default=True)
@click.option("--fix", multiple=True, help="Pin a choice: --fix ep=64 --fix precision=bf16 ...")
@click.option("--routing", type=click.Choice(["dropless", "force-balance"]), default="dropless", show_default=True)
@click.option("--token-imbalance", type=float, default=None, metavar="F", callback=lambda _c, _p, v: _factor(v),
              help=f"Dropless: your router's measured busiest expert rank's tokens / mean, charged at every EP > 1 "
                   f"(default {DROPLESS_IMBALANCE} from EP {DROPLESS_IMBALANCE_EP} up, less at smaller EP; none at EP "
                   "1). EP sizes below F are not searched.")
@click.option("--efficiency", type=click.Path(dir_okay=False), default=None,
              help="TOML of efficiency constants over the fitted ones (flat, or under a [gpu] section).")
@click.option("--overheads", type=click.Path(dir_okay=False), default=None,
              help="TOML of memory overheads over data/memory_overheads.toml (cuda_context_gib, ...).")
@click.option("--mtp-layers", type=click.IntRange(min=0), default=None,
              help="MTP depth trained (mtp_num_layers; default: the model's config.json, 0 to train without).")
@click.option("--headroom", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="GiB of GPU memory every candidate must leave free (the estimate's own error is a few %).")
@click.option("--baseline", type=click.Path(dir_okay=False), default=None,
              help="`moetune estimate --json` of a recipe or your config: explain how the pick differs.")
@release_options("only the knob sets it runs are searched, and emit and check of the saved plan target it")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(model, gpu, gpus, seq, gbs, top, fix, routing, token_imbalance, efficiency, overheads, mtp_layers, headroom,
            baseline, megatron_core, megatron_bridge, as_json) -> None:
    """Search every legal Parallel Folding layout x knob set; print the fastest that fit."""
    # the rows' rule findings read the release named (rules core_at_least), as check of the saved plan will; the
    # reading holds it checked (known_release), so the search takes it from there
    with options_reading(megatron_core, megatron_bridge) as read:
        _plan(model, gpu, gpus, seq, gbs, top, fix, routing, token_imbalance, efficiency, overheads, mtp_layers,
              headroom, baseline, read.release, as_json)


def _plan(model, gpu, gpus, seq, gbs, top, fix, routing, imbalance, efficiency, overheads, mtp_layers, headroom,
          baseline, release, as_json) -> None:
    """`imbalance`: --token-imbalance, the dropless factor every candidate is charged (None: moetune's default)."""
    spec, gpu_spec, fixed = with_mtp(load_model(model), mtp_layers), load_gpu(gpu), parse_fix(fix)
    spec = release_model(spec, release)  # TFLOP/s/GPU as that release's log counts it
    if why := dsa_exchange_refusal(spec, fixed.get("cp_comm_type")):  # the search would run all_gather silently
        raise MoetuneError(f"--fix cp_comm_type={fixed['cp_comm_type']}: {why}; pin all_gather, or leave it out")
    wl = Workload(seq_length=seq, global_batch_size=gbs)
    eff, over = load_efficiency_file(efficiency, gpu_spec.key), load_overheads(overheads)
    # a bad --baseline fails before the search, not after it
    base = estimate_from_json(read_json(baseline, "--baseline", "pass `moetune estimate --json` output",
                                        saved="estimate"), where=f"--baseline {baseline}") if baseline else None
    searched = fixed  # the user's pins, widened by a baseline's recipe; the FP8 caveat reads the pins alone
    if base is not None:
        same_job(baseline, base, spec, gpu_spec, gpus, wl, routing, imbalance)
        searched = same_optimizer(baseline, base, searched)
        if "precision" not in fixed:  # the baseline's own recipe is a candidate (the recipe audit: an fp8-current
            # recipe was switched to the seeds' blockwise for -0.1% while explain offered current back for +6.8%)
            searched = {**searched, "precision": sorted({"bf16", platform_defaults(gpu_spec)["precision"],
                                                      base.knobs.precision})}
    show = not as_json and sys.stderr.isatty()
    with Progress(console=console(), transient=True, disable=not show) as bar:
        task = bar.add_task("evaluating knob sets", total=None)
        result = plan(spec, gpu_spec, gpus, wl, fixed=searched, top=top, routing=routing, efficiency_overrides=eff,
                      progress=lambda done, total: bar.update(task, completed=done, total=total),
                      headroom_gib=headroom, overheads=over, release=release, token_imbalance=imbalance)
        # the caveat reads the user's pins (not the baseline's recipe), under the optimizer the search ran
        pins = {**fixed, **({"optimizer": searched["optimizer"]} if "optimizer" in searched else {})}
        fp8 = plan_caveat(result, spec, gpu_spec, gpus, wl, pins, routing=routing, efficiency_overrides=eff,
                          headroom_gib=headroom, overheads=over, release=release, token_imbalance=imbalance)
    comparison = versus(result.results[0], base) if base is not None and result.results else None
    # the pick's rule findings, evaluated once for its checks, the unsearched moves and the in-domain alternative
    found = findings(result.results[0]) if result.results else []
    unsearched = unsearched_gains(result.results[0], found) if result.results else []
    near_ep = ep_domain_note(result.results[0], found) if result.results else None
    partial = partial_domain_note(result.results[0]) if result.results else None
    record = estimate_record(result.results[0]) if result.results else None
    fp4 = nvfp4_caveat(result.results[0]) if result.results else None
    ep1 = ep1_pick(result)  # an EP 1 pick among EP > 1 candidates: what each was charged, and what no run measured
    # the files the search ran under, named even when nothing fits (each result records them too)
    files = user_files(eff, over)
    if as_json:
        data = plan_json(result, gbs, fixed)
        for i, (row, r) in enumerate(zip(data["results"], result.results)):  # each row as estimate --json has it
            row["checks"] = checks(r, found if i == 0 else None)
            row["track_record"] = record if i == 0 else estimate_record(r)
        emit_json({**data, **files, **({"fp8_caveat": fp8} if fp8 else {}), **({"nvfp4_caveat": fp4} if fp4 else {}),
                   **({"pick_checks": pick_checks(result.results[0], found, data["results"][0]["checks"])}
                      if result.results else {}),
                   **({"versus_baseline": comparison} if comparison else {}),
                   **({"unsearched_moves": unsearched} if unsearched else {}),
                   **({"ep_in_domain": near_ep} if near_ep else {}), **({"ep1_pick": ep1} if ep1 else {}),
                   **({"partial_domain_note": partial} if partial else {}),
                   **({"track_record": record} if record else {})})
    else:
        print_plan(result, gbs, fixed)
        notes = Notes(console())  # each line under the table wrapped to the terminal's width
        if line := user_files_line(files):
            notes.print(line)
        pick = result.results[0] if result.results else None
        if line := routing_line(pick, ep1):
            notes.print(line)
        for f in pick_checks(pick, found) if pick else []:
            notes.print(f"[bold]Check on #1[/bold] {f['severity']} {f['rule']}: {escape(f['message'])}"
                        f"{_fix_text(f, pick)}")  # escaped: brackets in a message are no markup
        if fp8:
            notes.print(fp8_caveat_line(fp8, "the pick", runs=False))
        if fp4:
            notes.print(caveat_line(fp4, "the pick"))
        for note in attention_notes(pick) if pick else []:
            notes.print(f"[yellow]note[/yellow] on #1: {note}")
        if partial:
            notes.print(f"[yellow]note[/yellow] on #1: {partial}")
        if near_ep:
            notes.print(f"[bold]NVLink domain[/bold]: #1's {ep_domain_text(result.results[0], near_ep)}")
        for m in unsearched:
            notes.print(f"[bold]{UNSEARCHED}[/bold]: {escape(unsearched_text(m))}")
        if pick:
            print_model_notes(notes, pick.model)
        if record:
            notes.print(f"[bold]Track record[/bold]: {escape(track_record_text(record, files=False))}")
        if comparison:
            print_versus(comparison)
        if pick:
            notes.print(next_steps(result))
    if not result.results:
        raise click.exceptions.Exit(1)  # a search that finds nothing is not a success for scripts either


def _factor(value: float | None) -> float | None:
    """--token-imbalance in range, as Knobs checks it (layout/knob_checks.py), said as the option's usage error."""
    if not token_imbalance_in_range(value):
        raise click.BadParameter(f"{value:g} must be {TOKEN_IMBALANCE_RANGE}")
    return value


def pick_checks(pick, found: list | None = None, row: list[dict] | None = None) -> list[dict]:
    """The pick's rule errors and warnings as its row has them (explain.checks: what `moetune check` of its config
    reports; a pinned --fix can lead the search where the seeds warn, TP past the NVLink domain), and on a warning
    whose fix runs on this job what the fix predicts (`with_fix`), since the search already weighed it against the
    pick. `row`: the row's checks where the caller has them (copied, not changed)."""
    out = [dict(c) for c in row] if row is not None else checks(pick, found)
    for check in out:
        fixed = with_fix(pick, check["fix"]) if check["severity"] == "warning" else None
        if fixed is not None and fixed.time != pick.time:
            check["with_fix"] = {"tokens_per_s_per_gpu": fixed.time["tokens_per_s_per_gpu"], "fits": fixed.fits,
                                 "peak_gib": fixed.peak_bytes / 2**30}
    return out


def _fix_text(check: dict, pick) -> str:
    """What the check's own fix predicts beside the pick."""
    if "with_fix" not in check:
        return ""
    w, speed = check["with_fix"], pick.time["tokens_per_s_per_gpu"]
    fits = "" if w["fits"] else f", and needs {w['peak_gib']:.1f} GiB of {pick.gpu.capacity_bytes / 2**30:.1f}"
    return (f" (its fix predicts {w['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, "
            f"{w['tokens_per_s_per_gpu'] / speed - 1:+.0%} against the pick{fits})")
