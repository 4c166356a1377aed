"""Predicted vs measured, wall by wall: which part of the model was wrong (diagnose --plan / --model).

Measured walls come from a trace diagnosis (profile/diagnose.py), per iteration:
communication = communication time not overlapped with compute; host = idle gaps the host caused;
bubble = idle waiting on other ranks, on cross-stream dependencies or inside CUDA-graph replays (pipeline waits show
up here);
compute = the rest of the step.
"""

import math

from moetune.errors import MoetuneError
from moetune.planner.config_map import to_config
from moetune.planner.estimate import Estimate
from moetune.planner.run_shape import RUN_SHAPE, config_run, dumped_run, run_differences
from moetune.profile.diagnose import DiagnoseResult
from moetune.walls.model_flops import megatron_model_flops, tflops_per_gpu

WALLS = ("compute", "communication", "bubble", "host")
# Predicted and measured steps further apart than this are more likely two runs than a model error: the worst
# published run moetune predicts is 1.8x off (R222, a documented regression; data/known_gaps.toml)
APART = 3.0


def measured_walls(d: DiagnoseResult) -> dict[str, float] | None:
    if not d.step_seconds or not d.breakdown:
        return None
    comm = d.exposed_communication_seconds or 0.0
    host = d.idle.get("host_bound", 0.0)
    bubble = d.idle.get("rank_wait", 0.0) + d.idle.get("dependency", 0.0) + d.idle.get("graph_replay", 0.0)
    return {"compute": max(d.step_seconds - comm - host - bubble, 0.0), "communication": comm, "bubble": bubble,
            "host": host}


def same_run(predicted: Estimate, measured: DiagnoseResult) -> None:
    """A prediction compares with a measurement of the same cluster: the traces' world size and GPU family (when
    they record them) must be the prediction's; else one error line."""
    world, family = measured.world_size, measured.facts.get("gpu.arch", "unknown")
    if world is not None and world != predicted.layout.world_size:
        source = "the traces record" if measured.ranks else "the log records"
        raise MoetuneError(f"the prediction is for {predicted.layout.world_size} GPUs but {source} world size "
                           f"{world}; compare a plan or config of this run")
    if family != "unknown" and family != predicted.gpu.arch:
        # only a saved one can be: a --model prediction is priced on --gpu, which diagnose has held to the traces
        ran = f"the traces ran on {family} GPUs" if measured.ranks else f"--gpu names {family} GPUs for the log"
        raise MoetuneError(f"the --plan's prediction is for {predicted.gpu.key} ({predicted.gpu.arch}) but {ran}; "
                           "compare a plan or estimate made with --gpu of the run's GPU")


# How log_differences names a field it finds apart: its own words for these, else the dump's destination
SAID_AS = {"model.seq_length": "sequence length", "cluster.num_gpus": "GPUs"}


def log_differences(predicted: Estimate, log) -> list[str]:
    """What a training log ran that the prediction did not: its global batch (each iteration's line; none where the
    batch ramps up), and where Megatron-LM dumped its arguments, the sequence length, GPUs, layout, micro-batch,
    model shape and the knobs the step rests on (run_shape.RUN_SHAPE: precision, dispatcher, overlaps, graphs,
    recompute); 'TP 2 (predicted 1)' each. A launch's own MODEL_ARGS may carry all of these (a sweep's EXTRA_ARGS win
    over the emitted flags), so a log of another job reads as one: a BF16 alltoall run with every overlap off had been
    compared with an FP8 DeepEP plan as a 0.53x model error."""
    sizes = {it.global_batch_size for it in log.iterations if it.global_batch_size}
    ramp = len(sizes) > 1 or log.args.get("rampup_batch_size") not in (None, "None")  # the batch grows: no one GBS
    logged, gbs = None if ramp else next(iter(sizes), None), predicted.workload.gbs(predicted.layout)
    ran = {k: v for k, v in dumped_run(log.args).items() if k != "train.global_batch_size"}  # the lines say it
    planned = config_run(to_config(predicted))
    return ([f"global batch {logged} (planned {gbs})"] if logged is not None and logged != gbs else []) + \
        [f"{SAID_AS.get(k, RUN_SHAPE[k][0])} {ran[k]} (planned {planned[k]})" for k in run_differences(ran, planned)]


def same_log_job(predicted: Estimate, log, others=None) -> None:
    """One line where the log timed another job than the prediction (a GBS 1024 log had read 0.96x against a GBS 8192
    plan; a candidate's log against the plan's pick); OTHERS: a callable giving (rank, estimate) of the plan's other
    results, one of which the log may be (called only where the log differs)."""
    differ = log_differences(predicted, log)
    if not differ:
        return
    match = [str(rank) for rank, e in (others() if others else []) if not log_differences(e, log)]
    hint = (f"it ran the layout of the plan's result {' or '.join(match)}: pass --rank {match[0]}"
            + (" (the log cannot tell their knobs apart)" if len(match) > 1 else "")) if match else \
        "compare a plan or config of this run"
    raise MoetuneError(f"the log {log.path} timed another job than the prediction ({'; '.join(differ)}): {hint}")


def compare(predicted: Estimate, measured: DiagnoseResult) -> dict:
    """Per wall: predicted and measured seconds; the verdict names the wall the model got most wrong."""
    same_run(predicted, measured)
    walls = measured_walls(measured)
    if walls is None:
        return _step_only(predicted, measured)
    pred = predicted.time["walls"]
    rows = {w: {"predicted": pred[w], "measured": walls[w]} for w in WALLS}
    step = {"predicted": predicted.time["step_seconds"], "measured": measured.step_seconds}

    def weight(w: str) -> float:  # how much this wall's error moves the step
        return abs(pred[w] - walls[w]) / max(step["measured"], 1e-12)

    worst = max(WALLS, key=weight)
    p, m = pred[worst], walls[worst]
    direction = "over-estimates" if p > m else "under-estimates"
    ratio = (p / m) if m > 0 else math.inf
    verdict = (f"the model {direction} {worst}: predicted {p:.3f} s, measured {m:.3f} s per step "
               f"({ratio:.2f}x); it moves the step by {100 * weight(worst):.0f}%")
    if predicted.layout.pp == 1:  # no pipeline: what the trace files under "bubble" is waiting of another kind
        rows["bubble"]["measured_is"] = "rank waits and untimed cross-stream dependencies (PP 1 has no bubble)"
        if worst == "bubble":
            verdict = (f"the run idles {m:.3f} s per step waiting on other ranks or on work the trace does not time, "
                       f"which the model does not predict (PP 1 has no pipeline bubble); it moves the step by "
                       f"{100 * weight(worst):.0f}%: find what the queued kernels wait on (`diagnose` evidence)")
    apart = step["predicted"] / max(step["measured"], 1e-12)
    if not 1 / APART <= apart <= APART:  # two runs, more likely than a model error: no wall is blamed
        verdict = (f"predicted and measured steps are {max(apart, 1 / apart):.1f}x apart, beyond any error of the "
                   f"model's published track record: is the prediction for this run's model, batch and layout? The "
                   f"walls are listed, but none is judged until it is (the largest gap is {worst})")
    return {"available": True, "walls": rows, "step_seconds": step, "worst_wall": worst, "verdict": verdict}


def _step_only(predicted: Estimate, measured: DiagnoseResult) -> dict:
    """A log alone: its iteration time against the predicted step, and its TFLOP/s against the prediction counted as
    that log's launcher counts them (a Megatron-LM log, which prints its arguments, counts gated MLPs and windows as
    training.py does; walls/model_flops.py conventions)."""
    log = measured.log or {}
    if not measured.step_seconds:
        return {"available": False, "why": "the measurement has neither a kernel timeline nor timed iterations"}
    step = {"predicted": predicted.time["step_seconds"], "measured": measured.step_seconds}
    apart = step["predicted"] / step["measured"]
    verdict = (f"a log alone, so the step only: predicted {step['predicted']:.3f} s, measured {step['measured']:.3f} "
               f"s per iteration ({apart:.2f}x); pass the run's traces to see which wall differs")
    if not 1 / APART <= apart <= APART:
        verdict = (f"predicted and measured steps are {max(apart, 1 / apart):.1f}x apart, beyond any error of the "
                   "model's published track record: is the prediction for this run's model, batch and layout? "
                   + verdict)
    out = {"available": True, "walls": {}, "step_seconds": step, "worst_wall": None, "verdict": verdict}
    if log.get("tflops_per_gpu"):
        convention = log.get("launcher") or predicted.model.flops_convention
        tflops = predicted.time["tflops_per_gpu"]
        if convention != predicted.model.flops_convention:  # counted again as the log's launcher counts
            flops = megatron_model_flops(predicted.model, predicted.workload.seq_length,
                                         predicted.workload.gbs(predicted.layout), tp=predicted.layout.tp,
                                         convention=convention)
            tflops = tflops_per_gpu(flops, step["predicted"], predicted.layout.world_size)
        out["tflops_per_gpu"] = {"predicted": tflops, "measured": log["tflops_per_gpu"],
                                 "flops_convention": convention}
        out["verdict"] = _other_work(tflops * step["predicted"], log["tflops_per_gpu"] * step["measured"]) + verdict
    return out


# A log's FLOPs a GPU a step (its TFLOP/s x its step) further from the prediction's than this counted another job:
# the work is fixed by the model, batch and sequence whatever the run's speed, and the launcher's FLOP conventions are
# already matched (_step_only); were they not, the three conventions (walls/model_flops.py) differ by 1.20x at most
# over the 28 built-in models at 4k and 32k (gpt-oss-120b at 4k: its GEGLU factor and sliding windows)
WORK_APART = 1.5


def _other_work(predicted: float, measured: float) -> str:
    """The verdict's opening where the log's work per step is not the prediction's (a Bridge log prints no arguments
    to check the job by, so a plan of another model had compared in silence); '' where it is."""
    ratio = measured / predicted if predicted > 0 else math.inf
    if 1 / WORK_APART <= ratio <= WORK_APART:
        return ""
    return (f"the log's work a GPU a step (TFLOP/s x step) is {ratio:.2f}x the prediction's: it timed another model, "
            "batch or sequence (compare a plan or config of this run); ")
