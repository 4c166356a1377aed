"""How close moetune came on the published runs nearest to a configuration: the same model on the same GPU, and every
published run on that GPU, predicted with the constants the configuration is estimated with.

A prediction alone does not say how far to trust it. estimate, explain and plan print this beside it, misses
included (each listed run names its reason in data/known_gaps.toml), so a user planning DeepSeek-V3 in BF16 on H100
sees the one published run like it, predicted 22% slow, next to the two FP8 runs within 3%.
"""

import statistics
from dataclasses import replace
from functools import cache

from moetune.files import shipped_toml
from moetune.planner.calibrate import predict
from moetune.planner.ranking import SMALLEST_GAIN
from moetune.planner.repeats import measured_tokens
from moetune.planner.runs import TOLERANCE, Run, known_gaps, load_configured_runs, published_rows
from moetune.specs.hardware import modelled_on
from moetune.walls.efficiency import efficiency


@cache
def _errors(gpu_key: str, constants: tuple) -> tuple[tuple[Run, float], ...]:
    """(run, predicted / measured - 1) for every published run on this GPU with a throughput in tokens."""
    eff = dict(constants)
    return tuple((run, predict(run, eff).predicted / tokens - 1) for run in load_configured_runs()
                 if run.gpu.key == gpu_key and (tokens := measured_tokens(run)) is not None)


def track_record(model_name: str, gpu_key: str, eff: dict | None = None) -> dict:
    """Published runs of `model_name` on `gpu_key` with moetune's error on each, and the error over every published
    run on that GPU; `eff`: the efficiency constants in use (the shipped ones by default)."""
    rows = _errors(gpu_key, tuple(sorted((eff or efficiency(gpu_key)).items())))
    listed = {**known_gaps()["runs"], **known_gaps()["tflops_only"]}
    same = [{"run_id": run.run_id, "precision": run.knobs.precision, "dispatcher": run.knobs.dispatcher,
             "gpus": run.layout.world_size, "error": err, "listed_gap": run.run_id in listed, "release": run.release}
            for run, err in rows if run.model.name == model_name]
    errors = [abs(err) for _, err in rows]
    twin = None if rows or (eff is not None and eff != efficiency(gpu_key)) else _constants_twin(gpu_key)
    if twin:  # no run on this GPU: the record of the GPU whose constants it runs on
        return {**track_record(model_name, twin), "gpu": gpu_key, "constants_of": twin}
    published_on = sorted({r.gpu.key for r in load_configured_runs()
                           if r.model.name == model_name and measured_tokens(r) is not None})
    return {"model": model_name, "gpu": gpu_key, "same_model": same, "gpu_runs": len(rows),
            "gpu_models": len({run.model.name for run, _ in rows}),
            "gpu_within": sum(e <= TOLERANCE for e in errors),
            "gpu_median_abs_error": statistics.median(errors) if errors else None,
            "model_published_on": published_on,
            **({} if published_on else {"unseen_model": unseen_models(gpu_key)}),
            "incomplete": _incomplete(model_name, gpu_key, {run.run_id for run, _ in rows})}


@cache
def published_ep() -> tuple[int, ...]:
    """The EP sizes of the published runs moetune's step model is checked on (those with a throughput in tokens): a
    configuration at another EP is predicted where no measurement has tested the model."""
    return tuple(sorted({r.layout.ep for r in load_configured_runs() if measured_tokens(r) is not None}))


def ep_span(eps: tuple[int, ...]) -> str:
    """EP sizes as a range a note names: EP 8 to 64."""
    return f"EP {eps[0]}" if len(eps) == 1 else f"EP {eps[0]} to {eps[-1]}"


def unseen_models(gpu_key: str) -> dict:
    """How the fit fared on the published models left out of it in turn (data/unseen_models.toml): on this GPU where it
    has published runs, and over all of them: what to expect of a model with no published run."""
    table = _unseen_table()
    return {"gpu": table["gpu"].get(gpu_key), "all": table["all"]}


@cache
def _unseen_table() -> dict:
    return shipped_toml("unseen_models.toml")


def estimate_record(e) -> dict:
    """The track record beside an estimate (`e`: planner.estimate.Estimate), with the shipped constants whatever
    --efficiency file the estimate runs under, and saying so. The record tells how far to trust moetune's model,
    measured on the published runs, which ran on the clusters the shipped constants were fitted to. A user's file
    describes another cluster (or a what-if): the published runs predicted with it show how unlike those clusters
    it is, not how close the user's own prediction comes (one file took H100's headline from 33 of 40 runs within
    15% to 18, read as moetune missing). How the user's constants meet the user's runs is what `calibrate --runs`
    reports."""
    record = track_record(e.model.name, e.gpu.key)
    if e.model.num_moe_experts and e.layout.ep == 1 and 1 not in published_ep():
        # every rank holds every expert (or a slice of each): no all-to-all and no busiest-rank factor, a step no
        # published run has measured (plan's Routing note says it of an EP 1 pick too: planner/ep1_note.py)
        record["unpublished_ep"] = {"ep": e.layout.ep, "published_ep": list(published_ep())}
    if family := modelled_on(e.gpu):  # a [gpu] table: the runs are its family's, not of the user's GPU
        record.update(gpu_name=e.gpu.name, modelled_on=family)
    if slower := observed_nic(e):
        record["observed_nic"] = slower
    if e.efficiency_overrides:
        record["constants"] = "shipped"
        record["not_under"] = e.user_files["efficiency_file"] or "the efficiency constants saved with the result"
    return record


def observed_nic(e) -> dict | None:
    """Where the published runs of this GPU read its NIC slower than its datasheet (hardware.toml nic_gbps_observed)
    and this run's traffic crosses nodes: its prediction at that speed, which the user weighs beside the one at the
    datasheet's."""
    gpu = e.gpu
    if not gpu.nic_gbps_observed or gpu.nic_gbps_observed >= gpu.nic_gbps or e.layout.world_size <= gpu.gpus_per_node:
        return None
    slow = e.variant(gpu=replace(gpu, nic_gbps=gpu.nic_gbps_observed),
                     with_memory=False).time["tokens_per_s_per_gpu"]  # the time alone: the NIC moves no byte of memory
    change = slow / e.time["tokens_per_s_per_gpu"] - 1
    return {"nic_gbps": gpu.nic_gbps_observed, "tokens_per_s_per_gpu": slow, "change": change} \
        if change < -SMALLEST_GAIN else None


def _incomplete(model_name: str, gpu_key: str, predicted: set[str]) -> list[str]:
    """Published runs of this model on this GPU that cannot be predicted: a field the source leaves out (the
    sequence length, the micro-batch, ...) or a figure not in tokens."""
    return sorted(rid for rid, row in published_rows().items()
                  if row["model"] == model_name and row["gpu"] == gpu_key and rid not in predicted)


def _constants_twin(gpu_key: str) -> str | None:
    """A GPU with published runs whose shipped constants this GPU uses unchanged (efficiency.toml: H200 runs on
    H100's fit, the same GH100 compute), or None."""
    mine = efficiency(gpu_key)
    return next((g for g in sorted({r.gpu.key for r in load_configured_runs()})
                 if g != gpu_key and efficiency(g) == mine), None)


def _run_text(r: dict) -> str:
    gap = ", a listed gap" if r["listed_gap"] else ""
    return f"{r['run_id']} {100 * r['error']:+.0f}% ({r['precision']}, {r['dispatcher']}, {r['gpus']} GPUs{gap})"


def _runs_text(same: list[dict]) -> str:
    """Each run when there are a few; else the error range per precision and the misses by name."""
    if len(same) <= 4:
        return ", ".join(_run_text(r) for r in same)
    parts = []
    for precision in sorted({r["precision"] for r in same}):
        errs = [100 * r["error"] for r in same if r["precision"] == precision]
        span = f"{errs[0]:+.0f}%" if len(errs) == 1 else f"{min(errs):+.0f}% to {max(errs):+.0f}%"
        parts.append(f"{len(errs)} {precision} at {span}")
    missed = [_run_text(r) for r in same if abs(r["error"]) > TOLERANCE]
    return "; ".join(parts) + (f"; outside {100 * TOLERANCE:.0f}%: {', '.join(missed)}" if missed else "")


def track_record_text(t: dict, files: bool = True) -> str:
    """One line: this model's runs on this GPU with their errors, then the GPU's runs in all; `files` False leaves
    out the data files behind them (plan's terminal line: `explain --plan` names them)."""
    if t.get("not_under"):  # estimate_record: the user's file is not what these errors measure
        return (track_record_text({**t, "not_under": None}, files) + f"; with the shipped constants, not those of "
                f"{t['not_under']}: "
                "the published runs ran on the clusters those were fitted to (`calibrate --runs` checks yours on "
                "your runs)")
    if t.get("modelled_on"):  # estimate_record: the user's own GPU, on a catalog GPU's constants and runs
        family = t["modelled_on"]
        return (f"no published run on {t['gpu_name']}, a [gpu] table modelled on {family}: it runs on {family}'s "
                "constants" + " (efficiency.toml)" * files + f" and {family}'s published runs stand for it; on "
                f"{family}: " + track_record_text({**t, "modelled_on": None}, files))
    if t["same_model"]:
        head = f"{len(t['same_model'])} published {t['model']} run(s) on {t['gpu']}: {_runs_text(t['same_model'])}"
    else:
        elsewhere = f" (its published runs are on {', '.join(t['model_published_on'])})" \
            if t["model_published_on"] else ""
        head = f"no published {t['model']} run on {t['gpu']}{elsewhere}"
    if t.get("incomplete"):
        head += (f" ({len(t['incomplete'])} more published, not predicted: a field or the throughput left out; "
                 f"{', '.join(t['incomplete'][:4])}{'...' if len(t['incomplete']) > 4 else ''})")
    if not t["gpu_runs"]:
        return f"{head}; no published run on this GPU to check the constants against" + _unseen_text(t) + _ep_text(t)
    if t.get("constants_of"):
        return (f"no published run on {t['gpu']}, which runs on {t['constants_of']}'s constants"
                + " (efficiency.toml)" * files + f"; on {t['constants_of']}: "
                + track_record_text({**t, "gpu": t["constants_of"], "constants_of": None}, files))
    return (f"{head}; all {t['gpu_runs']} published {t['gpu']} runs ({t['gpu_models']} models): "
            f"{t['gpu_within']} within {100 * TOLERANCE:.0f}%, median |error| "
            f"{100 * t['gpu_median_abs_error']:.1f}%" + " (listed gaps and reasons: data/known_gaps.toml)" * files
            + _nic_text(t, files) + _unseen_text(t) + _ep_text(t))


def _ep_text(t: dict) -> str:
    """For a run at an EP no published run has (EP 1: estimate_record's `unpublished_ep`)."""
    if not (u := t.get("unpublished_ep")):
        return ""
    theirs = f" (they run {ep_span(tuple(u['published_ep']))})" if u["published_ep"] else ""
    return f"; no published run has EP {u['ep']}{theirs}: moetune's step model is unchecked there"


def _unseen_text(t: dict) -> str:
    """For a model with no published run: how the fit fared on each published model it was refitted without."""
    if "unseen_model" not in t:
        return ""
    mine, every = t["unseen_model"]["gpu"], t["unseen_model"]["all"]
    where = (f"{mine['within']} of {mine['runs']} {t['gpu']} runs within {100 * TOLERANCE:.0f}% (median "
             f"{100 * mine['median_abs_error']:.1f}%), " if mine else "")
    return (f"; {t['model']} has no published run: each published model, refitted without its own runs, came "
            f"{where}{every['within']} of {every['runs']} in all (median {100 * every['median_abs_error']:.1f}%; "
            "`calibrate --leave-one-model-out`): expect errors of that size until your runs refit it (`sweep`, "
            "`calibrate --runs`)")


def _nic_text(t: dict, files: bool = True) -> str:
    if not (slow := t.get("observed_nic")):
        return ""
    return (f"; its published cross-node runs read as if the NIC ran at {slow['nic_gbps']:.0f} Gb/s a GPU"
            + " (hardware.toml nic_gbps_observed)" * files
            + f", where this run predicts {slow['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU "
            f"({100 * slow['change']:+.0f}%; a cluster file with nic_gbps = {slow['nic_gbps']:.0f} plans for it)")


def _same_config(run: Run, e) -> bool:
    def lay(x):  # sequence parallelism as it runs (None and False are the same at TP 1)
        return replace(x, sequence_parallel=x.sp)
    return (run.model.name == e.model.name and run.gpu.key == e.gpu.key and lay(run.layout) == lay(e.layout)
            and run.workload.seq_length == e.workload.seq_length
            and run.workload.micro_batch_size == e.workload.micro_batch_size
            and run.workload.gbs(run.layout) == e.workload.gbs(e.layout) and run.knobs == e.knobs)


def measured_twins(e) -> list[dict]:
    """The published runs of exactly this configuration that measured a throughput: what a recipe really ran at, where
    a comparison against its prediction would hide moetune's error on it (listed gaps: data/known_gaps.toml)."""
    gaps = {**known_gaps()["runs"], **known_gaps()["tflops_only"]}
    return [{"run_id": r.run_id, "measured": tokens, "release": r.release, "listed_gap": r.run_id in gaps}
            for r in load_configured_runs() if _same_config(r, e) and (tokens := measured_tokens(r))]
