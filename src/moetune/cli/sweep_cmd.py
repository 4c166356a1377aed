"""``moetune sweep``: run a plan's top candidates as short benchmarks on the cluster, then read their logs back.

``sweep write PLAN.json --out DIR`` emits each candidate's launch (as ``moetune emit PLAN.json --rank N`` does) into
DIR/r01, DIR/r02, ..., set to run ``--iters`` iterations, log each one's time and save no checkpoint, with a
submit.sh that submits them and a manifest; ``--submit`` runs submit.sh here. ``sweep ingest DIR`` reads each
candidate's log: measured against predicted, the measured order against the predicted one, which candidate to run,
and the per-GPU constants refitted to what the cluster measured (``--write FILE``, an --efficiency file).
"""

from __future__ import annotations

import shlex
import stat
from pathlib import Path

import click
from rich.markup import escape

from moetune.cli.calibrate_cmd import print_refit, refit
from moetune.cli.check_cmd import RuleErrors, read_inputs_under
from moetune.cli.emit_cmd import check_command, emitted_files, warned, write_files
from moetune.cli.options import release_options
from moetune.cli.output import console, emit_json, table
from moetune.cli.release_check import for_release, inputs_release
from moetune.cli.sweep_shown import ingest_json, print_ingest
from moetune.configio.release_context import reading
from moetune.configio.releases import describe
from moetune.errors import MoetuneError
from moetune.files import check_writable, read_json, write_text
from moetune.planner.from_json import pick_result, saved_results
from moetune.planner.result_text import layout_label, recompute_label
from moetune.sweep.compare import measured_runs, rows
from moetune.sweep.manifest import MANIFEST, Candidate, Sweep, read_manifest, saved_result_data, write_manifest
from moetune.sweep.submit import run_submit, submit_ready, submit_sh
from moetune.units import GIB


# What every candidate's launch gets besides its plan: what Megatron Bridge's performance scripts set on every
# benchmark they publish (scripts/performance/utils/overrides.py _set_common_perf_overrides @067f987: no evaluation,
# Python's garbage collector run by hand every 100 iterations, no NaN or large-gradient checks, no checkpoint, a log
# line per iteration, the learning-rate schedule inside the run), so a candidate measures as the published runs that
# calibrate moetune measured; plus Megatron's TFLOP/s in each line. The warm-up stays below the decay, which
# Megatron-Core's scheduler asserts. Bridge's names (megatron_names.csv), which emit spells for Megatron-LM too.
def benchmark_sets(iters: int) -> dict[str, str]:
    return {"train.train_iters": str(iters), "train.eval_iters": "0", "train.manual_gc": "true",
            "train.manual_gc_interval": "100", "checkpoint.save": "null", "logger.log_interval": "1",
            "logger.log_throughput": "true", "ddp.check_for_nan_in_grad": "false",
            "ddp.check_for_large_grads": "false", "rerun_state_machine.check_for_nan_in_loss": "false",
            "scheduler.lr_decay_iters": str(iters), "scheduler.lr_warmup_iters": str(min(10, iters - 1))}


@click.group(name="sweep")
def command() -> None:
    """Run a plan's top candidates as short Slurm benchmarks (write), then compare their logs with the predictions
    and refit the constants (ingest)."""


@command.command(name="write")
@click.argument("plan_path", metavar="PLAN.json")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True,
              help="Directory for the sweep (one folder per candidate, submit.sh, sweep.json). Required.")
@click.option("--top", type=click.IntRange(min=1), default=4, show_default=True,
              help="How many of the plan's results to run, from its pick down.")
@click.option("--iters", type=click.IntRange(min=2), default=30, show_default=True,
              help="Training iterations each benchmark runs (train_iters).")
@click.option("--skip", type=click.IntRange(min=0), default=None,
              help="Iterations left out of the timing (warm-up, compilation, CUDA-graph capture). Default: a third "
                   "of --iters, at least 1.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Bridge dotted override for every candidate, of what the plan leaves to the recipe: data, tokenizer "
                   "(repeatable; a Megatron-LM launch takes its own in EXTRA_ARGS). What the plan sets is refused: "
                   "its prediction is for the plan's values.")
@release_options("the files are written in its names, as emit writes them")
@click.option("--allow-errors", is_flag=True, help="Write candidates `moetune check` finds errors in.")
@click.option("--submit", is_flag=True, help="Run submit.sh now (on a login node, sbatch on PATH; RECIPE set for a "
                                             "Bridge launch, or ENGINE=megatron-lm).")
@click.option("--sbatch-args", default="", metavar='"ARG ..."',
              help='sbatch options for every job with --submit, as one string a shell splits, e.g. "--account=A '
                   '--partition=P".')
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def write(plan_path, out_dir, top, iters, skip, sets, megatron_core, megatron_bridge, allow_errors, submit,
          sbatch_args, as_json) -> None:
    """Emit the top candidates of PLAN.json (`moetune plan --json`) as benchmarks, with a submit.sh."""
    skip = max(1, iters // 3) if skip is None else skip  # the first iteration compiles and captures: never timed
    if skip >= iters:
        raise MoetuneError(f"--skip {skip}: must be below --iters ({iters}), or no iteration is timed")
    if given := [s for s in sets if s.split("=", 1)[0].strip() in benchmark_sets(iters)]:
        key = given[0].split("=", 1)[0].strip()
        raise MoetuneError(f"--set {given[0]}: the sweep sets {key} for every benchmark, as Bridge's performance "
                           "scripts do (sweep_cmd.benchmark_sets)"
                           + ("; the benchmark's length is --iters" if key == "train.train_iters" else ""))
    if not out_dir:
        raise MoetuneError("--out: an empty path; pass the directory for the sweep")
    out = Path(out_dir)
    if (out / MANIFEST).exists():
        raise MoetuneError(f"--out {out}: already holds a sweep ({MANIFEST}); pass another directory, so its logs "
                           f"stay with the candidates that wrote them (or submit it: {out / 'submit.sh'})")
    extra = _sbatch_words(sbatch_args, submit)
    results, plan = _plan_results(plan_path)
    with reading(*inputs_release([plan_path], megatron_core, megatron_bridge)) as seen:
        emitted = {f"r{rank:02d}": _candidate_files(plan_path, rank, sets, iters, seen, allow_errors,
                                                    out / f"r{rank:02d}")
                   for rank in range(1, min(top, len(results)) + 1)}
    sweep = _sweep(plan_path, iters, skip, seen.release, list(emitted), results)
    for folder, (files, _) in emitted.items():  # all emitted before any is written: a refusal writes nothing
        write_files(files, out / folder)
    write_manifest(sweep, out)
    script = write_text(out / "submit.sh", submit_sh(list(emitted), sweep.plan), "--out")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    jobs = run_submit(out, extra) if submit else []
    warnings = [f"{folder}: {line}" for folder, (_, line) in emitted.items() if line]
    _print_written(sweep, out, jobs, as_json,
                   _notes(sweep, top, len(results) if plan and len(results) < top else None) + warnings)


def _sweep(plan_path: str, iters: int, skip: int, release: str | None, folders: list[str],
           results: list[dict]) -> Sweep:
    """The manifest of the candidates in FOLDERS, checked before anything is written: a result whose predictions
    ingest compares (manifest.PREDICTED) a hand edit removed is one line, and leaves no half-made sweep."""
    try:
        return Sweep(plan=str(Path(plan_path).resolve()), iters=iters, skip=skip, release=release,
                     candidates=[Candidate(rank=i, folder=f, result=r)
                                 for i, (f, r) in enumerate(zip(folders, results, strict=False), 1)])
    except ValueError as err:
        raise MoetuneError(f"{plan_path}: {err}; pass unmodified `moetune plan --json` output") from None


def _sbatch_words(sbatch_args: str, submit: bool) -> tuple[str, ...]:
    """--sbatch-args split as a shell would; what --submit needs checked before anything is written (sbatch on PATH,
    the Bridge recipe named), so a refusal leaves no half-made sweep."""
    if sbatch_args and not submit:
        raise MoetuneError("--sbatch-args: passed to sbatch by --submit; add --submit, or give them to submit.sh")
    try:
        words = tuple(shlex.split(sbatch_args))
    except ValueError as err:
        raise MoetuneError(f"--sbatch-args {sbatch_args!r}: {err}; quote it as a shell would") from None
    if submit:
        submit_ready()
    return words


def _notes(sweep: Sweep, top: int, available: int | None) -> list[str]:
    """What a reader of the written sweep should know: a plan of fewer results than --top (AVAILABLE; None where it
    holds enough, or is one estimate), a candidate predicted not to fit."""
    notes = [f"the plan holds {available} result(s), so {available} of --top {top} are written; plan with --top "
             f"{top} for more"] if available is not None else []
    return notes + [f"{c.folder} is predicted NOT to fit ({c.result['memory']['peak_bytes'] / GIB:.1f} of "
                    f"{c.result['memory']['capacity_bytes'] / GIB:.1f} GiB): its benchmark will likely run out of "
                    "memory" for c in sweep.candidates if not c.result["memory"].get("fits", True)]


def _plan_results(plan_path: str) -> tuple[list[dict], bool]:
    """The saved results a sweep can run, and whether they are a plan's (else one estimate's)."""
    data = saved_result_data(read_json(plan_path, "", "pass the output of `moetune plan --json` (or `estimate "
                                                  "--json`)", saved="plan"), plan_path)
    try:
        pick_result(data)  # the one-line errors of a plan with no results
    except MoetuneError as err:
        raise MoetuneError(f"{plan_path}: {err}") from None
    return saved_results(data), "results" in data


def _candidate_files(plan_path: str, rank: int, sets, iters: int, seen, allow_errors: bool, where: Path) -> tuple:
    """(emit's files for result RANK of the plan, set to benchmark; the line naming its config's warnings and the
    check of its launch in WHERE that says why, or None); a refusal names the result."""
    try:
        bench = tuple(f"{key}={value}" for key, value in benchmark_sets(iters).items())
        # the plan's result read once: its config with the user's --set, and without it where there is one
        config, *planned = read_inputs_under([plan_path], [(*sets, *bench)] + ([bench] if sets else []), None, None,
                                             None, None, rank)
        if sets:
            _keeps_the_plan(planned[0], config, sets)
        if seen.release is not None:
            config = for_release(config, seen)
        # a sweep runs benchmarks: a force-balanced plan's candidates are written, the files saying so
        files, found = emitted_files(config, seen.release, allow_errors, benchmark=True)
        line = warned(found)
        return files, line and f"{line} (`{check_command(config, where, seen.release)}` says why)"
    except (MoetuneError, RuleErrors) as err:  # one line naming the result, with the exit code it had
        raise type(err)(f"result {rank}: {err}") from None


# Sections --set may add to: what the prediction does not read (data, tokenizer, checkpoint loading, logging and
# profiling outputs, the learning rate, fault tolerance) and env.* (the cluster's own NCCL and network variables)
SET_SECTIONS = ("dataset", "tokenizer", "checkpoint", "logger", "profiling", "rng", "validation", "scheduler", "ft",
                "straggler", "nvrx_straggler", "rerun_state_machine", "inprocess_restart", "env")


def _keeps_the_plan(planned: dict, config: dict, sets) -> None:
    """--set may add what the plan leaves to the recipe (data, tokenizer), not change what it set, nor set what the
    prediction reads (the model, parallelism, precision, optimizer and overlap sections): the prediction the sweep
    measures against is the plan's (a changed layout, batch or model shape would be compared with it)."""
    if outside := [s for s in sets if s.split("=", 1)[0].strip().lstrip("~+").split(".", 1)[0] not in SET_SECTIONS]:
        raise MoetuneError(f"--set {outside[0]}: the sweep measures the plan's own configurations, and this sets "
                           "what its prediction reads; --set takes only " + ", ".join(f"{s}.*" for s in SET_SECTIONS)
                           + " (plan again with the change, plan --fix, and sweep that plan)")
    if changed := [k for k in planned if config.get(k, DELETED) != planned[k]]:
        key = changed[0]
        raise MoetuneError(f"--set: it changes {key}, which the plan set to {planned[key]!r} (--set {' '.join(sets)}); "
                           "the sweep measures the plan's own configurations: plan again with the change (plan --fix, "
                           "or estimate it) and sweep that plan")


DELETED = object()  # a key `--set ~KEY` removed


def _print_written(sweep: Sweep, out: Path, jobs: list[str], as_json: bool, notes: list[str]) -> None:
    if as_json:
        emit_json({"sweep": str(out), "candidates": [{"rank": c.rank, "folder": str(out / c.folder),
                                                      "fits": c.result["memory"].get("fits", True)}
                                                     for c in sweep.candidates],
                   "iters": sweep.iters, "skip": sweep.skip, "submitted": jobs, "notes": notes})
        return
    shown = console()
    shown.print(table(f"moetune sweep -> {out} ({sweep.iters} iterations each, timed after {sweep.skip})",
                      ["#", "folder", "layout", "mbs", "precision", "dispatcher", "recompute", "tok/s/GPU",
                       "peak GiB"],
                      [[c.rank, c.folder, layout_label(c.result), c.result["workload"]["micro_batch_size"],
                        c.result["knobs"]["precision"], c.result["knobs"]["dispatcher"], recompute_label(c.result),
                        f"{c.result['time']['tokens_per_s_per_gpu']:,.0f}",
                        f"{c.result['memory']['peak_bytes'] / GIB:.1f}"] for c in sweep.candidates],
                      justify_right_from=7))
    if sweep.release is not None:
        shown.print(f"written for {describe(sweep.release)}")
    for note in notes:
        shown.print(f"[yellow]note[/yellow]: {escape(note)}")
    for line in jobs:
        shown.print(f"submitted: {line}")
    if not jobs:
        shown.print(escape(f"submit on the cluster: RECIPE=<this model's Bridge recipe> {out / 'submit.sh'} "
                           "[sbatch options] (ENGINE=megatron-lm for Megatron-LM)"))
    shown.print(f"when they have run: moetune sweep ingest {out}")


@command.command(name="ingest")
@click.argument("directory", metavar="DIR")
@click.option("--write", "write_path", type=click.Path(dir_okay=False), default=None,
              help="Write the constants refitted to the measured candidates to this TOML file (an --efficiency "
                   "file for plan, estimate and explain).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def ingest(directory, write_path, as_json) -> None:
    """Read each candidate's log in DIR (`sweep write --out DIR`): measured against predicted, and the refit."""
    sweep = read_manifest(directory)
    if write_path:
        check_writable(write_path, "--write", (Path(directory) / MANIFEST, sweep.plan))
    found = rows(sweep, Path(directory))
    runs = measured_runs(found, sweep.release)
    fit = refit(runs, write_path, f"moetune sweep ingest {directory}") if runs else None
    note = _set_aside(sweep, write_path) if fit is not None else None
    if as_json:
        emit_json(ingest_json(sweep, found, fit) | ({"notes": [note]} if note else {}))
    else:
        print_ingest(sweep, found, Path(directory))
        if fit is not None:
            print_refit(fit, write_path, runs)
        if note:
            console().print(f"[yellow]note[/yellow]: {escape(note)}")
    if fit is None:  # after the table: what each candidate's log says is still worth reading
        raise NothingMeasured(f"no candidate of {directory} is measured yet: nothing to refit"
                              + (f", {write_path} not written" if write_path else ""))


def _set_aside(sweep: Sweep, write_path: str | None) -> str | None:
    """Where the plan was made under an --efficiency file: the refit starts from the shipped constants, as calibrate
    --runs does, so the file it writes holds the refit alone, not that file's other constants (said, not merged)."""
    files = sorted({f for c in sweep.candidates if (f := c.result.get("efficiency_file"))})
    if not files:
        return None
    kept = f"; {write_path} holds the refit alone" if write_path else ""
    return (f"the plan was made under --efficiency {', '.join(files)}, which the refit sets aside: it starts from the "
            f"shipped constants, as calibrate --runs does{kept} (copy over what that file sets and the refit does not)")


class NothingMeasured(MoetuneError):
    """Exit 1, after the table: the sweep is fine, its logs hold no timing yet (a script waiting on it checks this)."""

    exit_code = 1
