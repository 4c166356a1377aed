"""``moetune diagnose TRACE_OR_DIR... [--log FILE] [--json]``: which wall dominates a measured run."""

import click
from rich.markup import escape

from moetune.cli.options import config_words, script_args_option
from moetune.cli.output import console, emit_json, launched_by_mlm, table, unknown_launcher_note
from moetune.configio.cluster import config_gpu
from moetune.configio.finalize import synced_optimizer_switches
from moetune.configio.load import load_config
from moetune.configio.mlm import argument_dump_config
from moetune.configio.names import LAUNCHER, is_megatron_lm, names
from moetune.configio.releases import at_default
from moetune.emit.mlm import mlm_fix_words
from moetune.errors import MoetuneError
from moetune.files import read_json
from moetune.planner import to_config as result_config
from moetune.planner.compare import compare, same_log_job
from moetune.planner.estimate import estimate
from moetune.planner.from_config import from_config, trained_model
from moetune.planner.from_json import estimate_from_json, saved_results
from moetune.planner.run_shape import config_run, dumped_run, run_differences
from moetune.profile.diagnose import DiagnoseResult, diagnose
from moetune.profile.megatron_log import TrainingLog, read_log
from moetune.profile.trace_json import recorded_world_size
from moetune.specs.hardware import GpuSpec
from moetune.specs.registry import load_model


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:,.2f}"


def _share(seconds: float, step: float | None) -> str:
    return f"{seconds / step:.1%}" if step else "-"


def _print(result: DiagnoseResult, mlm: bool = False) -> None:
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
        # a Megatron-LM launch has no Bridge field to set: its changes are said as its arguments (emit/mlm.py)
        rows = [[r.rule, escape(r.action or (mlm_fix_words(r.overrides) if mlm else "\n".join(r.change))),
                 escape(r.why)]
                for r in result.recommendations]
        words = "Megatron-LM arguments" if mlm else "Megatron Bridge overrides"
        out.print(table(f"Next changes ({words})", ["rule", "change", "why"], rows, justify_right_from=3))


def _print_comparison(cmp: dict) -> None:
    out = console()
    if not cmp["available"]:
        out.print(f"predicted vs measured: {cmp['why']}")
        return
    rows = [[w + (f" (measured: {v['measured_is']})" if "measured_is" in v else ""), f"{v['predicted']:.3f}",
             f"{v['measured']:.3f}"] for w, v in cmp["walls"].items()]
    rows.append(["step", f"{cmp['step_seconds']['predicted']:.3f}", f"{cmp['step_seconds']['measured']:.3f}"])
    if t := cmp.get("tflops_per_gpu"):
        rows.append([f"TFLOP/s/GPU ({t['flops_convention']}'s count)", f"{t['predicted']:.1f}", f"{t['measured']:.1f}"])
    out.print(table("Predicted vs measured per step (s)", ["wall", "predicted", "measured"], rows))
    out.print(f"[bold]Model check[/bold]: {escape(cmp['verdict'])}")


def _prediction(config: dict | None, model: str | None, plan_file: str | None, given: bool, rank: int | None,
                log=None):
    """The planned run to compare with: a plan/estimate JSON's result RANK (the pick by default), or MODEL + the
    config's layout and knobs (`given`: --config, --set or --mlm-args were passed; --gpu/--gpus alone hold no
    layout). With a LOG, one line where it timed another job (naming the plan's result it did time, if any)."""
    if rank is not None and not plan_file:
        raise MoetuneError("--rank picks a result of --plan; pass --plan FILE, or drop --rank")
    if plan_file:
        if model:
            raise MoetuneError("--plan and --model both name the prediction; pass one (--plan FILE, or --model with "
                               "--config)")
        saved, where, rank = read_json(plan_file, "--plan", saved="plan"), f"--plan {plan_file}", rank or 1
        predicted = estimate_from_json(saved, rank, where=where)
        unknown_launcher_note(saved, rank, where)
        if log is not None:  # before the traces are read: a log of another job compares nothing
            others = [n for n in range(1, len(saved_results(saved)) + 1) if n != rank]
            same_log_job(predicted, log, lambda: [(n, estimate_from_json(saved, n, where=where)) for n in others])
        return predicted
    if model is None:
        return None
    if not given:
        raise MoetuneError("--model needs the run's layout and knobs: --config (or --mlm-args), a Megatron-LM --log "
                           "with its argument dump, or use --plan FILE")
    if "cluster.gpu" not in config:
        raise MoetuneError("--model needs --gpu (the GPU the run used)")
    spec = trained_model(load_model(model), config)
    try:  # a layout or knob Megatron refuses, worded for the run's config (the checks word them for estimate's flags)
        layout, workload, knobs = from_config(config, spec)
        predicted = estimate(spec, config_gpu(config), layout, workload, knobs)
    except MoetuneError as err:
        raise MoetuneError(config_words(str(err), config)) from None
    if log is not None:
        same_log_job(predicted, log)
    return predicted


def _result_config(data: dict, where: str) -> dict:
    """A saved plan/estimate given as --config, read as check reads it (its launcher said where it records none)."""
    config = result_config(data, where)
    unknown_launcher_note(data, 1, where)
    return config


def _run_config(configs, sets, mlm_args, gpu, gpus, log_path: str | None,
                script_args: str | None = None) -> tuple[dict | None, TrainingLog | None]:
    """The run's config and its log. A Megatron-LM log's arguments are what ran: they fill in what --config, --set,
    --mlm-args, --gpu and --gpus do not say, for the prediction (a --model one) and the advice alike."""
    config = None
    if configs or sets or mlm_args is not None or gpu or gpus or script_args is not None:
        config = load_config(list(configs), sets=list(sets), mlm_args=mlm_args, gpu=gpu, gpus=gpus,
                             from_result=_result_config, script_args=script_args)
    log = read_log(log_path) if log_path else None
    dump = _dump_config(log) if log is not None and log.argument_dump else {}
    if config is not None and log is not None and (differ := _against_dump(config, log.args)):
        raise MoetuneError(f"the config given contradicts the argument dump of --log {log_path}, which is what ran: "
                           f"{'; '.join(differ)}; pass the run's own config and GPU count, or leave them out: the "
                           "dump says them")
    return (_beside_dump(config, dump) if config is not None else (dump or None)), log


def _beside_dump(config: dict, dump: dict) -> dict:
    """The config given, over the dump where it says something: a Megatron-LM argument list's defaults, which its
    reader fills in for the flags left out, do not override what the dump says ran."""
    said = {k: v for k, v in config.items() if not (is_megatron_lm(config) and k in dump and at_default(k, v))}
    return {**dump, **said}


def _dump_config(log: TrainingLog) -> dict:
    """The config a Megatron-LM log's argument dump says. Only Megatron-LM prints one (Bridge prints none), so the run
    is a Megatron-LM launch, its defaults Megatron-LM's and its advice in its flags, where the dump is whole:
    print_args prints every argument, bf16 among them; one cut short (a grep of the log) says nothing of the rest, and
    Megatron-LM's defaults would read its precision as FP32."""
    config = argument_dump_config(log.args)
    return config | {LAUNCHER: "megatron-lm"} if "bf16" in log.args else config


def _against_dump(config: dict, args: dict) -> list[str]:
    """'NAME VALUE (the log ran DUMPED)' for each field of the run's shape (planner/run_shape.py: the layout, the batch,
    the precision, dispatcher, overlaps, graphs and recompute the advice and any prediction are tailored to) that the
    config and the log's argument dump ARGS both give, differently; NAME as the config was given (a Megatron-LM
    argument list's flag). A --model prediction also refuses it (planner/compare.py same_log_job); the advice alone
    had been tailored to the config in silence."""
    mlm, ran, given = is_megatron_lm(config), dumped_run(args), config_run(config)
    if mlm:  # Megatron-LM arguments leave most flags at their defaults, which the reader fills in: the dump says those
        given = {k: v for k, v in given.items() if not at_default(k, config.get(k))}

    def name(key: str) -> str:
        return "--gpus" if key == "cluster.num_gpus" else (names().mlm_flag(key) if mlm else None) or key

    return [f"{name(k)} {given[k]} (the log ran {ran[k]})" for k in run_differences(ran, given)]


def _run_gpu(config: dict | None, gpu: str | None, predicted, traces) -> GpuSpec | None:
    """The run's GPU, which the traces are checked against, memory reports are read against and the advice's
    platform is: --gpu's with the config's own topology (a --model prediction is priced on the same one); without
    --gpu, for a log alone, the prediction's; else none (the traces say it)."""
    if gpu:
        return config_gpu(config)
    return predicted.gpu if predicted is not None and not traces else None


def _emit(result: DiagnoseResult, cmp: dict | None, as_json: bool, mlm: bool = False) -> None:
    """The diagnosis and, with a prediction, its wall-by-wall comparison: as JSON (the comparison under
    "comparison") or as tables, the changes as Megatron-LM arguments for a Megatron-LM launch (`mlm`)."""
    if as_json:
        out = result.to_dict()
        if cmp is not None:
            out["comparison"] = cmp
        emit_json(out)
        return
    _print(result, mlm)
    if cmp is not None:
        _print_comparison(cmp)


@click.command(name="diagnose")
@click.argument("traces", nargs=-1, type=click.Path(path_type=str))
@click.option("--log", "log_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Megatron-LM / Megatron Bridge training log: the job's whole stdout (the last rank prints the "
                   "iteration lines, rank 0 the start-up lines and Megatron-LM's argument dump).")
@click.option("--config", "configs", multiple=True, type=click.Path(path_type=str),
              help="The run's config (Bridge YAML or JSON, dotted overrides, Megatron-LM args, MODEL_ARGS YAML, "
                   "env.sh), as for `check`.")
@click.option("--set", "sets", multiple=True, help="Dotted override of the run's config (repeatable).")
@click.option("--mlm-args", default=None, help="The run's Megatron-LM arguments.")
@script_args_option()
@click.option("--model", default=None, help="Built-in model or config.json: predict the run from --config.")
@click.option("--gpu", default=None, help="GPU of the run (with --model).")
@click.option("--gpus", type=click.IntRange(min=1), default=None, help="GPUs of the run (with --model).")
@click.option("--force-gpu", is_flag=True,
              help="Price the run on --gpu (or the plan's GPU) even where the traces record another part of its "
                   "architecture (other SMs, or another catalog GPU's name): a note instead of an error.")
@click.option("--plan", "plan_file", default=None, help="`moetune estimate/plan --json` of this run to compare.")
@click.option("--rank", type=click.IntRange(min=1), default=None,
              help="Which result of --plan the run is (default 1, the pick), as `emit --rank N` wrote it.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(traces: tuple[str, ...], log_path: str | None, configs, sets, mlm_args, script_args, model, gpu, gpus,
            force_gpu: bool, plan_file, rank: int | None, as_json: bool) -> None:
    """Find the dominant wall (memory, communication, host overhead, compute) in Kineto traces
    (.json/.json.gz, one file per rank, or directories of them) and/or a Megatron training log,
    and name the next changes; with --config the advice is tailored, with --plan or --model the
    prediction is compared wall by wall."""
    if force_gpu and not (gpu or plan_file):  # it forces a GPU named to be the traces': without one it does nothing
        raise MoetuneError("--force-gpu prices the run on --gpu or the --plan's GPU; give one of them, or drop it")
    config, log = _run_config(configs, sets, mlm_args, gpu, gpus, log_path, script_args)
    if model and traces and config is not None and "cluster.num_gpus" not in config:
        if world := recorded_world_size(list(traces)):  # what the traces record, where neither --gpus nor the config
            config = {**config, "cluster.num_gpus": world}  # says it (they are checked against it below)
    # the layout and knobs a --model prediction needs: a config given, or what a Megatron-LM log's argument dump says
    given = bool(configs or sets or mlm_args is not None or log is not None and log.argument_dump)
    predicted = _prediction(config, model, plan_file, given, rank, log)
    run_gpu = _run_gpu(config, gpu, predicted, traces)
    # the remedies ask the distributed optimizer (parameter-gather overlap needs it): as the run syncs its two switches
    result = diagnose(list(traces), log=log, config=synced_optimizer_switches(config) if config else None, gpu=run_gpu,
                      priced_on=predicted.gpu if predicted is not None else None, force_gpu=force_gpu)
    _emit(result, compare(predicted, result) if predicted is not None else None, as_json,
          mlm=_launched_by_mlm(config, predicted, given))


def _launched_by_mlm(config: dict | None, predicted, given: bool) -> bool:
    """Whether the run is a Megatron-LM launch, so its advice says Megatron-LM arguments: as its config says where one
    was `given` or a Megatron-LM log's arguments name the launcher (what ran), else as a saved --plan recorded
    (Estimate.launcher); --gpu/--gpus alone say nothing of it."""
    if config and (given or LAUNCHER in config):
        return is_megatron_lm(config)
    return predicted is not None and launched_by_mlm(predicted)
