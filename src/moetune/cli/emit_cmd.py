"""``moetune emit INPUT...``: write what Megatron Bridge / Megatron-LM take for a planned config.

INPUT is a plan/estimate JSON (``{"config": {...}}``), a Bridge YAML, dotted overrides or Megatron-LM
arguments, read exactly like ``moetune check``. Refuses (exit 1) when the config has rule errors,
unless --allow-errors, and (exit 2) force-balanced routing unless --benchmark.
"""

from __future__ import annotations

import shlex
import stat
from pathlib import Path

import click
from rich.markup import escape

from moetune.cli.check_cmd import RuleErrors, check_findings, config_options, read_inputs
from moetune.cli.output import console, emit_json, table
from moetune.cli.release_check import bridge_names_note, for_release, inputs_release, written_lacking
from moetune.configio.release_context import reading
from moetune.configio.releases import option, product
from moetune.configio.written_for import other_releases, written_for
from moetune.emit import emit_all, force_balanced
from moetune.errors import MoetuneError
from moetune.files import write_text


def check_command(config: dict, out: Path, release: str | None = None) -> str:
    """`moetune check` of env.sh beside the arguments, with the job's GPU and count where the config names them and
    the release emit wrote for (--megatron-core / --megatron-bridge), quoted for a shell."""
    words = ["moetune", "check", str(out / "env.sh"), str(out / "megatron_lm_args.txt")]
    for flag, key in (("--gpu", "cluster.gpu"), ("--gpus", "cluster.num_gpus")):
        if config.get(key) is not None:
            words += [flag, str(config[key])]
    return shlex.join(words + (option(release).split() if release is not None else []))


def write_files(files: dict[str, str], out_dir: Path) -> list[Path]:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise MoetuneError(f"--out {out_dir}: cannot create the directory ({err.strerror})") from None
    written = []
    for name, text in files.items():
        path = write_text(out_dir / name, text, "--out")
        if name.endswith(".sh"):
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        written.append(path)
    return written


@click.command(name="emit")
@config_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Directory to write the files to (default: print them).")
@click.option("--allow-errors", is_flag=True, help="Emit even when `moetune check` finds errors.")
@click.option("--benchmark", is_flag=True,
              help="Write force-balanced routing (plan --routing force-balance), which runs on random router logits: "
                   "for a throughput benchmark, never a training run; the files say so.")
@click.option("--rank", type=click.IntRange(min=1), default=1, show_default=True,
              help="Which result of a plan JSON to emit (1 = the pick).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output: {files, config, findings}.")
def command(configs, sets, mlm_args, script_args, fmt, gpu, gpus, megatron_core, megatron_bridge, out_dir, allow_errors,
            benchmark, rank, as_json) -> None:
    """Emit Bridge overrides, Megatron-LM args, env vars and torchrun/Slurm scripts for INPUT."""
    # --megatron-core / --megatron-bridge: the names the inputs use, and the flags' spelling
    with reading(*inputs_release(configs, megatron_core, megatron_bridge)) as seen:
        config = read_inputs(configs, sets, mlm_args, fmt, gpu, gpus, rank, script_args=script_args)
        if seen.release is not None:
            config = for_release(config, seen)
        _emit(config, seen.release, out_dir, allow_errors, as_json, benchmark)


# the warning a --benchmark launch answers (data/rules.yaml), which emit then does not repeat
BENCHMARK_RULE = "dispatcher.force_balance_not_for_training"


def emitted_files(config: dict, release: str | None, allow_errors: bool,
                  benchmark: bool = False) -> tuple[dict[str, str], list]:
    """(file name -> text, the rule errors passed over and the warnings): refused in one line where the config routes
    force-balanced and BENCHMARK is not set (sweep's candidates are benchmarks), where `moetune check` finds errors
    (unless allow_errors) or the files would pass a name RELEASE lacks."""
    if force_balanced(config) and not benchmark:
        raise MoetuneError("force-balanced routing (moe_router_force_load_balancing) runs on random router logits, "
                           "which Megatron-Core keeps for benchmarks only: pass --benchmark to write it for a "
                           "throughput benchmark, or plan again with --routing dropless for a training run (a config "
                           "of your own: --set model.moe_router_force_load_balancing=false)")
    target = {"target_release": release} if release is not None else None  # rules.expr core_at_least reads it
    found = [f for f in check_findings(config, derived=target) if f.severity in ("error", "warning")  # and mcore's
             and not (benchmark and f.rule == BENCHMARK_RULE)]
    errors = [f for f in found if f.severity == "error"]
    if errors and not allow_errors:
        listed = "; ".join(f"{f.rule}: {f.message}" for f in errors[:3])
        first = f"the first 3: {listed}" if len(errors) > 3 else listed
        raise RuleErrors(f"the config has {len(errors)} rule error(s) ({first}); fix them or pass --allow-errors "
                         "(`moetune check` lists them all)")
    files = emit_all(config)
    if release is not None and (lacking := written_lacking(files, release)):
        raise MoetuneError(f"{option(release)}: the files would pass {', '.join(lacking)}, which that release lacks "
                           f"(moetune writes them for the plan); upgrade {product(release)} or drop what sets them")
    return files, found


def warned(findings: list) -> str | None:
    """One line naming the warnings among FINDINGS (emitted_files' second part), or None: emit writes a config that
    only warns, and says so, since a --set may have brought them (CUDA_DEVICE_MAX_CONNECTIONS=1 under EP overlap)."""
    rules = [f.rule for f in findings if f.severity == "warning"]
    return f"the config raises {len(rules)} warning(s): {', '.join(rules)}" if rules else None


def _emit(config: dict, release: str | None, out_dir, allow_errors: bool, as_json: bool, benchmark: bool) -> None:
    files, found = emitted_files(config, release, allow_errors, benchmark)
    written = write_files(files, Path(out_dir)) if out_dir else []
    if as_json:
        emit_json({"files": files if not out_dir else {p.name: str(p) for p in written}, "config": config,
                   "findings": [f.as_dict() for f in found], "written_for": written_for(release)})
    elif out_dir:
        console().print(table(f"moetune emit -> {out_dir}", ["file", "lines"],
                              [[str(p), files[p.name].count("\n")] for p in written]))
        # the release whose names the files use, as their headers say (Bridge 0.5.0 refuses 0.6.0's: audit)
        console().print(escape(f"written for {written_for(release)}; for another release, emit again with "
                               f"{other_releases()}, and check with the same option"))
        if force_balanced(config):  # --benchmark: said once here, and first in every file
            console().print("[yellow]benchmark launch[/yellow]: force-balanced routing runs on random router logits; "
                            "for a training run, plan again with --routing dropless")
        if line := bridge_names_note(files, release):
            console().print(f"[yellow]note[/yellow]: {escape(line)}")
        # the launch's variables live in env.sh, so a check of the arguments alone misses them (HybridEP's topology)
        console().print(f"check the launch as it runs: {check_command(config, Path(out_dir), release)}")
        if line := warned(found):
            console().print(f"[yellow]note[/yellow]: {escape(line)}; that check says why")
    else:
        for name, text in files.items():
            click.echo(f"==> {name} <==\n{text}")
        if line := warned(found):  # beside the files on stdout, not in them
            click.echo(f"note: {line}; `moetune check` of the config says why", err=True)
