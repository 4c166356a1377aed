"""``moetune check CONFIG...``: lint a Megatron Bridge / Megatron-LM config against the seeds' rules.

Exit codes: 0 no errors, 1 errors found (RuleErrors), 2 input unreadable (one ``error:`` line, MoetuneError).
"""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from moetune.cli.estimate_input import load_overheads
from moetune.cli.options import config_words, release_options, script_args_option
from moetune.cli.output import console, emit_json, override_words, unknown_launcher_note
from moetune.cli.release_check import inputs_release, release_findings
from moetune.configio.load import read_sources, settled
from moetune.configio.names import is_megatron_lm
from moetune.configio.release_context import reading
from moetune.errors import MoetuneError, UnsupportedPrecision
from moetune.layout.dsa_split import Unpriced
from moetune.layout.layout import parse_pipeline_layout
from moetune.planner import to_config as result_config
from moetune.planner.from_json import pick_result
from moetune.rules import Finding, evaluate
from moetune.rules.engine import vet_fixes
from moetune.rules.table import CONTEXTS

_ORDER = {"error": 0, "warning": 1, "info": 2}
_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


class RuleErrors(click.ClickException):
    """Exit code 1: the config has rule errors (main() prints `error: <message>` and returns 1).

    Raised instead of ctx.exit(1): with standalone_mode=False click returns ctx.exit's code from cli.main()
    rather than raising it, and main() does not pass that value on.
    """

    exit_code = 1


def refused(errors: int, what: str) -> RuleErrors:
    """Exit 1 after the numbers, as `check` fails: estimate, memory and explain of a configuration Megatron or the seeds
    refuse still show `what` it would be if it ran, and a script gating on them must not pass it."""
    return RuleErrors(f"{errors} rule error(s): Megatron or the seeds refuse this configuration as written; {what} "
                      "(`moetune check` lists the fixes)")


def said_once(findings: list[Finding], layout_error: Finding | None, release: tuple | list = ()) -> list[Finding]:
    """RELEASE (check.not_in_release's findings) ahead of layout.illegal (with --model) and the rules' findings, the
    config-only rules layout.illegal repeats (its same_as) dropped; then a finding that repeats a fault a rule says
    already, by its same_as, dropped: Megatron-Core's refusal, or a name or value the release lacks that a rule
    covers (cli/release_check.py)."""
    said = set(layout_error.same_as) if layout_error is not None else set()
    if layout_error is not None:
        findings = [layout_error] + [f for f in findings if f.rule not in said]
    said |= {f.rule for f in findings}
    return [f for f in [*release, *findings] if f is layout_error or not said & set(f.same_as)]


def config_options(func):
    """Inputs shared by check and emit (see moetune.configio.load)."""
    for opt in reversed([
        click.argument("configs", nargs=-1),
        click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                     help="Dotted override, e.g. model.expert_model_parallel_size=8 (repeatable)."),
        click.option("--mlm-args", default=None,
                     help='Megatron-LM arguments, e.g. "--tensor-model-parallel-size 2 ...".'),
        script_args_option(),
        click.option("--format", "fmt", type=click.Choice(["yaml", "json", "overrides", "mlm"]), default=None,
                     help="Force the format of CONFIG files (default: from the extension and content)."),
        click.option("--gpu", default=None, help="GPU (h100, gb200, ...) or a cluster .toml: cluster.gpu."),
        click.option("--gpus", type=click.IntRange(min=1), default=None, help="GPUs in the job: cluster.num_gpus."),
        release_options("names it lacks are errors (check) or refused (emit)"),
    ]):
        func = opt(func)
    return func


def read_inputs(configs, sets, mlm_args, fmt, gpu, gpus, rank: int = 1, saved: list | None = None,
                script_args: str | None = None) -> dict:
    """The merged config of the inputs; the result picked from each saved plan/estimate result read is appended to
    `saved`, whose overheads and model the memory wall runs with as they were predicted."""
    return read_inputs_under(configs, [sets], mlm_args, fmt, gpu, gpus, rank, saved, script_args)[0]


def read_inputs_under(configs, set_lists, mlm_args, fmt, gpu, gpus, rank: int = 1, saved: list | None = None,
                      script_args: str | None = None) -> list[dict]:
    """read_inputs' config under each list of --set overrides of SET_LISTS, in order, the inputs read once (sweep write
    holds a plan's config with the user's --set against the plan's own)."""
    if not (configs or any(set_lists) or mlm_args is not None or script_args is not None):
        raise MoetuneError("nothing to read: give a CONFIG file, --mlm-args or --set key=value")
    results: list[dict] = []  # the configs of saved plan/estimate results read, as they were predicted

    def from_result(data: dict, where: str) -> dict:
        results.append(result_config(data, where, rank=rank))
        unknown_launcher_note(data, rank, where)
        if saved is not None:
            saved.append(pick_result(data, rank))
        return results[-1]

    sources = read_sources(configs, mlm_args=mlm_args, gpu=gpu, fmt=fmt, from_result=from_result,
                           script_args=script_args)
    if rank > 1 and not results:  # a config holds one configuration: a --rank past it must not pass unread
        raise MoetuneError(f"--rank {rank}: picks a result of a saved plan (`moetune plan --json`), and the inputs "
                           "hold none; drop --rank, or pass the plan")
    return [_held_to_results(settled(sources, sets=sets, gpu=gpu, gpus=gpus), results, gpu, gpus)
            for sets in set_lists]


def _held_to_results(config: dict, results: list[dict], gpu, gpus) -> dict:
    """CONFIG, where --gpu/--gpus keep the cluster its saved RESULTS were predicted for and its layout string parses."""
    for saved in results:  # a plan was predicted for its own cluster: --gpu/--gpus may not move it elsewhere
        for flag, key, given in (("--gpu", "cluster.gpu", gpu), ("--gpus", "cluster.num_gpus", gpus)):
            if given is not None and str(saved.get(key)) != str(config[key]):
                raise MoetuneError(f"{flag} {given}: the saved result was predicted for {saved.get(key)}; plan that "
                                   f"cluster (`moetune plan ... {flag} {given}`) instead of re-targeting this one")
    if isinstance(text := config.get("model.pipeline_model_parallel_layout"), str):
        # a string Megatron cannot parse is bad input, whatever else the config holds; named as the config names it
        parse_pipeline_layout(text, named=f"model.pipeline_model_parallel_layout {text!r}")
    return config


def check_findings(config: dict, context: str = "check", mcore: bool = True, derived: dict | None = None) -> list:
    findings = vet_fixes(config, evaluate(config, derived, context=context), derived, context=context)
    if mcore:
        from moetune.rules.mcore import mcore_findings

        findings = mcore_findings(config) + findings
    return sorted(findings, key=lambda f: _ORDER[f.severity])


def _fix_text(fix: dict, mlm: bool = False) -> str:
    """A fix in the config's names, or for a Megatron-LM launch (`mlm`) in its arguments (emit/mlm.py)."""
    return override_words(fix, mlm, sep=" ")


def findings_table(findings: list, mlm: bool = False) -> Table:
    """Severity, rule id, and the message with its fix (as Megatron-LM arguments for a Megatron-LM launch: `mlm`) and
    seed source underneath."""
    t = Table(title="moetune check", title_justify="left", show_lines=True)
    t.add_column("severity", no_wrap=True)
    t.add_column("rule", no_wrap=True)
    t.add_column("finding", overflow="fold")
    for f in findings:
        text = escape(f.message)
        if f.fix:
            text += f"\n[green]fix:[/] {escape(_fix_text(f.fix, mlm))}"
        elif f.fix_withdrawn:
            text += f"\n[yellow]no fix:[/] its own would trip {', '.join(f.fix_withdrawn)}"
        text += f"\n[dim]source: {escape(f.source)}[/]"
        t.add_row(f"[{_STYLE[f.severity]}]{f.severity}[/]", f.rule, text)
    return t


@click.command(name="check")
@config_options
@click.option("--context", type=click.Choice(CONTEXTS), default="check", show_default=True,
              help="Which rules apply: a user's config (check), a planned one (explain), a measured run (diagnose).")
@click.option("--no-mcore", is_flag=True, help="Skip Megatron-Core's own TransformerConfig validation.")
@click.option("--model", default=None,
              help="Built-in model or config.json: run the memory wall on the config (fit rules need it; default: the "
                   "model a saved plan/estimate result names).")
@click.option("--overheads", type=click.Path(dir_okay=False), default=None,
              help="TOML overriding memory_overheads.toml figures for --model's memory wall (default: a saved plan's "
                   "own, else the built-in figures).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(configs, sets, mlm_args, script_args, fmt, gpu, gpus, megatron_core, megatron_bridge, context, no_mcore,
            model, overheads, as_json) -> None:
    """Check CONFIG (Bridge YAML or JSON, dotted overrides, Megatron-LM args, a MODEL_ARGS YAML or an env.sh) against
    the seeds' rules."""
    saved: list[dict] = []
    # the names the inputs use, for --megatron-core / --megatron-bridge (cli/release_check.py)
    with reading(*inputs_release(configs, megatron_core, megatron_bridge)) as seen:
        config = read_inputs(configs, sets, mlm_args, fmt, gpu, gpus, saved=saved, script_args=script_args)
    # a saved plan or estimate names its model (its built-in name or config.json): its memory wall runs as under
    # --model (the fit rules need it)
    models = {r.get("model_source", r["model"]) for r in saved if r.get("model")}
    model = model or (models.pop() if len(models) == 1 else None)
    if overheads and not model:
        raise MoetuneError("--overheads sets the memory wall's figures, which only --model runs: add --model MODEL")
    saved_overheads = next((r["overheads"] for r in saved if r.get("overheads")), None)  # the first saved figures
    overheads = load_overheads(overheads) if overheads else saved_overheads
    if not any(not k.startswith("cluster.") for k in config):
        raise MoetuneError("nothing to check: the config sets no Megatron Bridge field (an empty file?); pass a "
                           "Bridge YAML, --set key=value overrides or Megatron-LM arguments")
    derived, layout_error, unpriced, read = None, None, None, len(config)
    if model:
        if "cluster.gpu" not in config or "cluster.num_gpus" not in config:
            raise MoetuneError("--model needs --gpu and --gpus to run the memory wall")
        from moetune.planner.memory_facts import config_memory_facts
        from moetune.planner.model_fields import architecture_conflicts, architecture_fields, provider_fields
        from moetune.specs.registry import load_model

        spec = load_model(model)
        conflicts = architecture_conflicts(spec, config)  # the config's own values stand; say they are another's
        # the model's architecture where the config leaves it to the recipe, so Megatron-Core validates it too; for
        # a Bridge config also what Bridge's model bridges and recipes set (a Megatron-LM launch has no recipe)
        fill = {k: v for k, v in architecture_fields(spec).items() if v is not None}
        mlm = is_megatron_lm(config)
        # no --mtp-num-layers is no MTP there, as estimate reads it
        if mlm or not spec.mtp_num_layers:
            fill.pop("model.mtp_num_layers", None)
        if not mlm:
            precision_given = any(k.startswith("mixed_precision.") for k in config)  # the recipe's, or all of it
            fill.update({k: v for k, v in provider_fields(spec).items()
                         if not (precision_given and k.startswith("mixed_precision."))})
        config = dict(sorted({**fill, **config}.items()))
        try:
            derived = config_memory_facts(spec, config, overheads)
        except UnsupportedPrecision:  # the rule table's precision errors say so, with the config's fix
            pass
        except Unpriced as err:  # no layout fault: the memory wall cannot size this model, the config rules still run
            unpriced = Finding(rule="check.model_unpriced", severity="warning",
                               message=f"{err}; the memory wall's fit rules are skipped, the config's own rules run",
                               source="moetune layout/dsa_split.py refuse_unpriced")
        except MoetuneError as err:  # the layout itself breaks a Megatron rule: that is a finding, not bad input
            layout_error = Finding(rule="layout.illegal", severity="error", message=config_words(str(err), config),
                                   fix={},
                                   source="moetune layout/validate.py: Megatron-Core's divisibility rules",
                                   same_as=err.same_as)  # the config-only rules (ids) that say the same fault
    if seen.release is not None:  # the rules that hold from a Megatron-Core release on ask it (core_at_least)
        derived = {**(derived or {}), "target_release": seen.release}
    findings = check_findings(config, context, mcore=not no_mcore, derived=derived)
    # one finding for one fault; a saved result's default-held newer fields are info (emit leaves them out)
    findings = said_once(findings, layout_error, release_findings(seen, config, bool(saved)))
    if unpriced:
        findings.insert(0, unpriced)
    if model and conflicts:
        findings.insert(0, Finding(rule="check.model_differs", severity="warning",
                                   message=f"the config's architecture is not {model}'s: {'; '.join(conflicts)}; the "
                                           "checks use the config's values", source="moetune --model"))
    errors = sum(f.severity == "error" for f in findings)
    if as_json:
        emit_json({"findings": [f.as_dict() for f in findings], "config": config})
    else:
        out = console()
        out.print(findings_table(findings, mlm=is_megatron_lm(config)))
        counts = {s: sum(f.severity == s for f in findings) for s in _ORDER}
        filled = f" (+{len(config) - read} from {model}'s architecture and its recipe's defaults)"
        out.print(f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info; "
                  f"{read} config keys read" + (filled if len(config) > read else ""))
    if errors:
        raise RuleErrors(f"{errors} rule error(s) in the config")
