"""``moetune explain``: the seeds' first answer for one configuration (estimate flags or a plan result)."""

from dataclasses import replace
from pathlib import Path

import click
from rich.markup import escape

from moetune.cli.check_cmd import refused
from moetune.cli.estimate_input import estimate_from_flags, kw_release, load_overheads
from moetune.cli.options import (
    config_options,
    flags_a_saved_result_replaces,
    given,
    knob_options,
    layout_options,
    release_options,
)
from moetune.cli.output import (
    console,
    emit_json,
    launched_by_mlm,
    override_words,
    print_checks,
    table,
    unknown_launcher_note,
    user_files_line,
    workload_line,
)
from moetune.cli.plan_baseline import same_job
from moetune.cli.release_check import options_reading
from moetune.cli.versus_output import print_versus
from moetune.errors import MoetuneError
from moetune.files import read_json
from moetune.layout.validate import Workload
from moetune.planner.ep1_note import ep1_text
from moetune.planner.explain import explain
from moetune.planner.fp8_evidence import caveat_line as fp8_caveat_line
from moetune.planner.fp8_evidence import evidence_text
from moetune.planner.from_json import estimate_from_json, is_saved_result, on_plan_budget, refuse_failure
from moetune.planner.moves import TIGHT_SHARE
from moetune.planner.nvfp4_evidence import caveat_line
from moetune.planner.release_fit import upgrade_for
from moetune.planner.track_record import track_record_text
from moetune.planner.versus import versus
from moetune.walls.efficiency import load_efficiency_file


@click.command(name="explain")
@click.argument("model", required=False)
@click.option("--plan", "plan_file", type=click.Path(dir_okay=False), default=None,
              help="A `moetune plan --json` or `estimate --json` output to explain instead of flags.")
@click.option("--rank", type=click.IntRange(min=1), default=1, show_default=True, help="Which plan result.")
@layout_options
@knob_options
@config_options
@release_options("defaulted knobs move to what it runs, and each retune move says the release it needs")
@click.option("--baseline", type=click.Path(dir_okay=False), default=None,
              help="An `estimate --json` of the same job (e.g. a published recipe): what this configuration changes "
                   "and which wall gains.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(model, plan_file, rank, baseline, as_json, **kw) -> None:
    """Fit, Scale, Profile, Retune for MODEL and a layout (or a plan result), with this run's numbers."""
    # the rules read the release named (rules core_at_least), as estimate's and plan's do: explain's findings and
    # moves are judged as that release runs them
    with options_reading(kw.get("megatron_core"), kw.get("megatron_bridge")):
        _explain(model, plan_file, rank, baseline, as_json, kw)


def _explain(model, plan_file, rank, baseline, as_json, kw: dict) -> None:
    # errors name the file as the user gave it: after --plan, or as the MODEL argument
    source = f"--plan {plan_file}" if plan_file else model
    json_model = bool(model) and model.lower().endswith(".json")
    saved = _saved_result(plan_file or model, bool(plan_file)) if plan_file or json_model else None
    if saved is None and plan_file:
        raise MoetuneError(f"--plan {plan_file}: not a `moetune plan --json` or `estimate --json` output")
    if saved is not None and (kw["configs"] or kw["mlm_args"] or kw["sets"] or kw["script_args"] is not None):
        raise MoetuneError("explain reads one configuration: a saved plan/estimate, or --config / --mlm-args / --set "
                           "/ --script-args with MODEL, not both")
    if saved is not None:
        if plan_file and model:
            raise MoetuneError(f"explain reads one configuration: --plan {plan_file} or MODEL {model}, not both")
        if clash := flags_a_saved_result_replaces():
            raise MoetuneError(f"{', '.join(clash)}: the saved result {source} holds its layout, knobs and "
                               "cluster; drop them, or explain MODEL with flags")
        # under the efficiency/overhead files the saved result was made with, unless others are passed here
        result = estimate_from_json(saved, rank, overheads=load_overheads(kw["overheads"]),
                                    efficiency_overrides=load_efficiency_file(kw["efficiency"], None),
                                    where=source)
        unknown_launcher_note(saved, rank, source)
        result, headroom = on_plan_budget(result, saved)
        if kw["token_imbalance"] is not None:  # the dropless factor a saved result may be weighed again under
            result = result.variant(knobs=replace(result.knobs, token_imbalance=kw["token_imbalance"]))
    else:
        if not model:
            raise MoetuneError("explain needs MODEL and layout flags, or --plan FILE")
        if given("rank"):
            raise MoetuneError("--rank picks a result of a saved plan; pass --plan FILE with it")
        result = estimate_from_flags(model, kw)
    answer = explain(result)
    if saved is not None and headroom:
        answer["fit"]["headroom_gib"] = headroom
    # a plan or estimate saved for a release (its "release"), or one named here: what each move needs of it
    release = saved["release"]["release"] if saved is not None and isinstance(saved.get("release"), dict) else \
        kw_release(kw)
    if release is not None:
        with_release_needs(answer, release)
    if baseline:
        saved = read_json(baseline, "--baseline", "pass `moetune estimate --json` output", saved="estimate")
        base = estimate_from_json(saved, where=f"--baseline {baseline}")
        same_job(baseline, base, result.model, result.gpu, result.layout.world_size,
                  Workload(seq_length=result.workload.seq_length, global_batch_size=result.workload.gbs(result.layout)),
                  result.knobs.routing, result.knobs.token_imbalance)
        answer["versus_baseline"] = versus(result, base)
    elif saved is not None and rank == 1 and "versus_baseline" in saved:  # a plan saved with --baseline
        answer["versus_baseline"] = saved["versus_baseline"]
    if saved is not None and rank == 1 and "ep1_pick" in saved:  # the plan's EP 1 pick among EP > 1 candidates
        answer["ep1_pick"] = saved["ep1_pick"]
    if as_json:
        emit_json(answer)
    else:
        print_explain(answer, mlm=launched_by_mlm(result))
        if "versus_baseline" in answer:
            print_versus(answer["versus_baseline"])
    if errors := sum(c["severity"] == "error" for c in answer["checks"]):  # as estimate and memory of the same flags
        raise refused(errors, "the explanation is of what it would do if it ran")


def with_release_needs(answer: dict, release: str) -> None:
    """Each retune move the plan's release cannot run says which release it needs (release_fit.upgrade_for): the gain
    an upgrade would bring, where the plan itself kept to the release."""
    answer["release"] = release
    for move in answer["retune"]:
        move["needs_release"] = upgrade_for(move["change"], release)


def _saved_result(path: str, after_flag: bool):
    """A saved plan or estimate (JSON with results or a layout), or None for anything else, e.g. a Hugging Face
    config.json given as MODEL. `after_flag`: the path came after --plan (errors say so), not as MODEL."""
    if not after_flag and not Path(path).exists():
        raise MoetuneError(f"{path}: no such file; pass a `moetune plan --json` or `estimate --json` output, a model's "
                           "config.json or a built-in model name")
    data = read_json(path, "--plan" if after_flag else "", "pass `moetune plan --json` output" + (
        "" if after_flag else " or a Hugging Face config.json"), saved="plan" if after_flag else "any")
    if is_saved_result(data):
        return data
    refuse_failure(data, path)  # what a failed command writes: its error, not its shape
    if not after_flag and not (isinstance(data, dict) and {"model_type", "architectures"} & data.keys()):
        raise MoetuneError(f"{path}: neither a `moetune plan --json` / `estimate --json` output (no results, no "
                           "layout) nor a Hugging Face config.json (no model_type); pass one of them")
    return None


def _bias_dtype_words(bias: dict) -> str:
    """The dtype the fc2 bias pass runs in, and what sets it (walls/compute.py fp32_probs_source)."""
    if bias["fp32_probs_from"] == "moe_router_dtype" and bias["moe_router_dtype"] == "fp64":
        return ("at FP32's bytes, a floor: the router computes the probabilities in FP64 (moe_router_dtype; "
                "Megatron-Core moe/router.py), which DeepEP and HybridEP cast down to FP32 and alltoall keeps wider")
    if bias["fp32_probs_from"] == "moe_router_dtype":
        given = ("; moe_router_dtype was not given: fp32, as plans' configs set it (Megatron's own default is none)"
                 if bias["moe_router_dtype_defaulted"] else "")
        return ("in FP32: the router computes the probabilities in FP32 (moe_router_dtype; Megatron-Core "
                f"moe/router.py), about 2.4x the bytes of BF16 ones{given}")
    if bias["fp32_probs_from"] == "dispatcher":
        return ("in FP32: DeepEP and HybridEP cast the router's BF16 probabilities to FP32 (Megatron-Core "
                "token_dispatcher.py), about 2.4x the bytes of BF16 ones")
    return "in BF16 (moe_router_dtype unset, and the alltoall dispatcher keeps the router's probabilities BF16)"


def print_explain(a: dict, mlm: bool = False) -> None:
    out = console()
    f, s, p = a["fit"], a["scale"], a["profile"]
    verdict = "fits" if f["fits"] else "does NOT fit"
    items = ", ".join(f"{k} {v:.1f}" for k, v in f["largest_items_gib"].items())
    if "workload" in a:
        out.print(f"[bold]Batch[/bold]: {workload_line(a['workload'])}")
    out.print(f"[bold]Fit[/bold]: {verdict}: peak {f['peak_gib']:.1f} of {f['capacity_gib']:.1f} GiB on stage "
              f"{f['worst_stage']} (largest: {items} GiB)")
    if f.get("headroom_gib"):
        out.print(f"  - against the plan's budget: the GPU less its --headroom {f['headroom_gib']:g} GiB, as the moves "
                  "below are too")
    if f.get("note"):
        out.print(f"  - {f['note']}")
    ladder = 0  # the recompute/offload steps apply one on top of another (planner/fit_steps.py)
    steps = f.get("steps", [])
    for i, step in enumerate(steps):
        what = step.get("layout") or escape(override_words(step.get("change", {}), mlm))
        fits = "fits" if step.get("fits", True) else "still does not fit"
        if "change" in step and not ladder and any("layout" in s for s in steps[:i]):
            out.print("  - or, keeping this layout, one step on top of another:")
        then = "then " if "change" in step and ladder else ""
        ladder += "change" in step
        tight = ", tight" if step.get("tight") else ""
        note = f"; {step['note']}" if step.get("note") else ""
        out.print(f"  - {then}{step['step']}: {what} -> peak {step['peak_gib']:.1f} GiB, {fits}{tight}, "
                  f"{step['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU{note} ({step['source']})")
    if fix := f.get("fastest_fix"):
        what = escape(override_words(fix["change"], mlm))
        out.print(f"  - faster than the ladder: {fix['rule']}: {what} -> peak {fix['new_peak_gib']:.1f} GiB, fits"
                  f"{', tight' if fix['tight'] else ''}, {fix['new_tokens_per_s_per_gpu']:,.0f} tokens/s/GPU "
                  f"({fix['source']}; seeds/000 Three Walls: the memory wall's fixes include a better PP layout)")
    out.print(f"[bold]Scale[/bold]: Attention {s['attention_mesh']} | MoE {s['moe_mesh']}"
              + (f" | VPP {s['vpp']}" if s["vpp"] > 1 else "")
              + (f" | {s['pipeline_split']}" if s["pipeline_split"] != "even" else ""))
    for note in s["notes"]:
        out.print(f"  - {note}")
    shares = ", ".join(f"{k} {100 * v:.0f}%" for k, v in p["wall_shares"].items())
    out.print(f"[bold]Profile[/bold]: dominant wall {p['dominant_wall']} ({p['why']}); {shares}")
    if a["optimizer_note"]:
        out.print(f"  - {a['optimizer_note']}")
    if a["gbs_defaulted"]:
        out.print(f"  - global batch defaulted to {a['gbs_defaulted']}: pass --gbs with the run's own")
    if b := p.get("expert_bias"):
        how = _bias_dtype_words(b)
        out.print(f"  - biased experts: the fc2 bias, scaled by each row's probability, is added outside the GEMM, "
                  f"eagerly (moe/experts.py _apply_bias), {b['seconds']:.2f} s, {100 * b['share_of_compute']:.0f}% of "
                  f"compute, {how} (walls/compute.py expert_bias_seconds)")
    if (r := p.get("routing")) and "ep_first_layout" in r:
        fits = "" if r["ep_first_fits"] else ", and does not fit"
        out.print(f"  - dropless routing on EP 1: {r['source']}, so no imbalance is charged; the seeds' EP-first "
                  f"layout over the same ranks ({r['ep_first_layout']}) is charged "
                  f"{r['ep_first_token_imbalance']:.2f}x the mean at its busiest expert rank and does "
                  f"{r['ep_first_tokens_per_s_per_gpu']:,.0f} "
                  f"tokens/s/GPU{fits}: why this run keeps ETP (pass --token-imbalance with your router's measured "
                  "factor to weigh them again)")
    elif r:
        out.print(f"  - dropless routing: the busiest expert rank is charged {r['token_imbalance']:.2f}x the mean "
                  f"({r['source']}); force-balanced, the same run does "
                  f"{r['force_balanced_tokens_per_s_per_gpu']:,.0f} tokens/s/GPU: the imbalance costs "
                  f"{100 * r['cost']:.0f}%. Measure yours from the router's per-expert token counts and pass "
                  "--token-imbalance")
    if ep1 := a.get("ep1_pick"):  # the saved plan's: its pick runs EP 1 among EP > 1 candidates
        out.print(f"  - {escape(ep1_text(ep1))}")
    rows = [[r["rule"] + (" *" if r["unconfirmed"] else ""), escape(override_words(r["change"], mlm)),
             f"{100 * r['predicted_gain']:+.1f}%",
             f"{r['new_peak_gib']:.1f}" + (" tight" if r["tight"] else ""),
             r["source"] + (f"; needs {r['needs_release']}" if r.get("needs_release") else "")] for r in a["retune"]]
    if rows:
        what = "Megatron-LM arguments" if mlm else "overrides"
        out.print(table("Retune: next changes, predicted", ["move", what, "tokens/s", "peak GiB", "rule"], rows,
                        justify_right_from=2))
        if any(r["tight"] for r in a["retune"]):
            out.print(f"  tight: under {100 * TIGHT_SHARE:.0f}% of the GPU free, within the memory estimate's error")
        if any(r["unconfirmed"] for r in a["retune"]):
            out.print(f"  * moetune's FP8 gain, unconfirmed for this model: {evidence_text(a['fp8_evidence'])}")
    elif any(c["severity"] == "error" for c in a["checks"]):
        out.print("[bold]Retune[/bold]: Megatron or the seeds refuse this configuration (Check errors below) and no "
                  "single move clears an error; apply their fixes first, or let `moetune plan` choose")
    else:
        blocked = "; ".join(f"{r['rule']} {100 * r['predicted_gain']:+.1f}% but needs {r['new_peak_gib']:.1f} GiB"
                            for r in a.get("retune_blocked_by_memory", []))
        out.print("[bold]Retune[/bold]: no single move predicts a gain that still fits"
                  + (f" (memory stops: {blocked}, of {a['fit']['capacity_gib']:.1f})" if blocked else "")
                  + "; `moetune plan` changes layout and knobs together")
    print_checks(a["checks"], mlm)
    if files := user_files_line(a):
        out.print(files)
    if a["fp8_caveat"]:
        out.print(fp8_caveat_line(a["fp8_caveat"]))
    if a["nvfp4_caveat"]:
        out.print(caveat_line(a["nvfp4_caveat"]))
    if "uncalibrated" in a:
        out.print(f"[yellow]note[/yellow]: {a['uncalibrated']}")
    out.print(f"[bold]Track record[/bold]: {escape(track_record_text(a['track_record']))}")
    d = a["default_mappings"]
    out.print(f"[bold]Defaults[/bold] for {d['platform']}:")
    fields, rules = d["bridge_fields"], d["rules"]

    def spelled(*names: str) -> str:  # as Megatron Bridge spells them
        return escape(override_words({k: v for k, v in fields.items() if k.split(".")[-1].startswith(names)}))

    out.print(f"  - dispatcher {d['dispatcher']}: {spelled('moe_token_dispatcher', 'moe_flex')}"
              + (f" ({d['dispatcher_note']})" if d["dispatcher_note"] else "") + f" ({rules['dispatcher']})"
              + (f"; {d['flex_num_sms']} dispatcher SMs ({d['flex_num_sms_source']})" if d["flex_num_sms"] else ""))
    out.print(f"  - FP8 recipe {d['fp8_recipe']}: {spelled('fp8', 'fp4') or 'mixed_precision.fp8=null'} "
              f"({rules['fp8_recipe']})")
    out.print(f"  - CUDA graphs {','.join(d['cuda_graph_scope']) or 'none'}: {spelled('cuda_graph')} "
              f"({rules['cuda_graph_scope']})")
    if d["cp_comm_type"]:
        out.print(f"  - CP exchange {d['cp_comm_type']}, the legal one that costs least ({d['cp_comm_type_source']})")
