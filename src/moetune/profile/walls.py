"""Name the dominant wall of a measured run, with its evidence (seed 000, Phase 3 table).

``facts`` flattens the measurement (trace figures per step, log figures, GPU, config) into the
names the rule table uses; ``decide`` walks the table's walls in order. Thresholds live in
data/diagnose_remedies.yaml, not here.
"""

from dataclasses import dataclass
from typing import Any

from moetune.profile.kernels import class_ids
from moetune.profile.megatron_log import TrainingLog
from moetune.profile.metrics import RankMetrics, StepMetrics
from moetune.profile.table import holds, remedies_table
from moetune.specs.hardware import GpuSpec, catalog, model_of
from moetune.specs.platform import on_nvl72
from moetune.units import GIB

NEAR_FULL = 0.90  # peak reserved share of the GPU worth naming (not a wall: diagnose_remedies.yaml memory)
# Compute capability -> architecture family (CUDA C Programming Guide, compute capabilities table).
_ARCH = {7: "volta", 8: "ampere", 9: "hopper", 10: "blackwell", 11: "blackwell", 12: "blackwell"}


@dataclass(kw_only=True, slots=True)
class Measurement:
    """Everything ``diagnose`` measured, before any judgement."""

    ranks: list[RankMetrics]
    combined: StepMetrics | None  # mean over ranks of each rank's steady-step mean
    log: TrainingLog | None
    gpu_name: str | None
    gpu_memory_bytes: float | None
    compute_capability: tuple[int, int] | None
    peak_reserved_bytes: float | None
    peak_source: str | None
    gpu: GpuSpec | None = None  # --gpu: the platform, a trace's device name aside
    capacity_source: str | None = None  # where gpu_memory_bytes came from, said where not --gpu's or a trace's


def arch(cc: tuple[int, int] | None) -> str:
    if cc is None:
        return "unknown"
    if cc[0] == 7 and cc[1] >= 5:
        return "turing"
    if cc == (8, 9):
        return "ada"
    return _ARCH.get(cc[0], "unknown")


def imbalance(ranks: list[RankMetrics]) -> dict[str, Any]:
    """Spread of per-rank GPU compute time: the slowest rank sets everyone's collective wait."""
    compute = {r.rank: _compute_seconds(r.mean) for r in ranks}
    if not compute:
        return {}
    mean = sum(compute.values()) / len(compute)
    slowest = max(compute, key=compute.get)
    return {
        "compute_seconds_by_rank": compute, "slowest_rank": slowest,
        "max_over_mean": compute[slowest] / mean if mean > 0 else 1.0,
        "step_seconds_by_rank": {r.rank: r.mean.seconds for r in ranks},
    }


def _compute_seconds(step: StepMetrics) -> float:
    groups = remedies_table()["groups"]
    return sum(step.breakdown.get(c, 0.0) for c in groups["compute"])


def facts(m: Measurement, config: dict[str, Any] | None = None) -> dict[str, Any]:
    platform = _platform_gpu(m)
    # the seeds' NVL72 row as the planner reads it (specs/platform.py on_nvl72): a cluster file's 72-GPU B200 domain too
    out: dict[str, Any] = {"ranks": len(m.ranks), "gpu.arch": arch(m.compute_capability),
                           "gpu.nvl72": platform is not None and on_nvl72(platform)}
    if m.gpu is not None:  # --gpu's (the traces' own, profile/device.py _same_arch: or a log alone's)
        out["gpu.arch"] = m.gpu.arch
    out["gemm_streams"] = max((len({op.stream for op in r.trace.ops if op.cls == "gemm"}) for r in m.ranks), default=0)
    s = m.combined
    if s is not None and s.seconds > 0:
        out.update(_step_facts(s))
        out["imbalance"] = imbalance(m.ranks).get("max_over_mean", 1.0) - 1.0
    if m.peak_reserved_bytes is not None and m.gpu_memory_bytes:
        out["memory_fraction"] = m.peak_reserved_bytes / m.gpu_memory_bytes
    if m.log is not None:
        out["oom"] = bool(m.log.oom_lines)
        out["alloc_retries"] = m.log.alloc_retries
    out.update({f"config.{k}": v for k, v in (config or {}).items()})
    moe = _moe_evidence(out, config or {})
    if moe is not None:
        out["moe"] = moe
    return out


def _platform_gpu(m: Measurement) -> GpuSpec | None:
    """The GPU whose platform the facts read: --gpu's where given, as the capacity and a compared prediction are (a
    device name names a catalog part, not the cluster file's NVLink domain or the variant the user means; where their
    platforms differ profile/device.py says so), else the catalog GPU the traces' device name names ("NVIDIA GB200"
    -> gb200; None for a part the catalog lacks)."""
    if m.gpu is not None:
        return m.gpu
    return catalog().get(model_of(m.gpu_name))


def _moe_evidence(f: dict[str, Any], config: dict[str, Any]) -> bool | None:
    """Whether the run is a MoE model: the config's expert count where it gives one, else grouped-GEMM or DeepEP /
    HybridEP kernels in the trace; unknown (None) otherwise, so MoE-only advice waits for evidence (an all-to-all
    alone may be a recommender's embedding exchange, TorchRec's kjt all2all)."""
    if "model.num_moe_experts" in config:  # None there is the config saying "no experts" (a dense model)
        experts = config["model.num_moe_experts"]
        return bool(experts and experts > 1)
    if f.get("share.grouped_gemm", 0) > 0 or f.get("share.deepep", 0) > 0 or f.get("share.hybridep", 0) > 0:
        return True
    return None


def _step_facts(s: StepMetrics) -> dict[str, float]:
    t = s.seconds
    out = {"step_seconds": t, "busy_share": s.busy_seconds / t, "idle_share": s.idle_seconds / t,
           "exposed_comm_share": s.exposed_comm_seconds / t, "comm_wait_share": s.comm_wait_seconds / t}
    out.update({f"{k}_share": v / t for k, v in s.idle.items()})
    for c in class_ids():
        out[f"share.{c}"] = s.breakdown.get(c, 0.0) / t
        out[f"exposed.{c}"] = s.exposed_by_class.get(c, 0.0) / t
    for name, members in remedies_table()["groups"].items():
        out[f"share.{name}"] = sum(out[f"share.{c}"] for c in members)
        out[f"exposed.{name}"] = sum(out[f"exposed.{c}"] for c in members)
    return out


def _score(wall: dict, f: dict[str, Any]) -> float:
    return sum(f.get(k, 0.0) for k in wall.get("score", ()))


def decide(f: dict[str, Any]) -> tuple[str, str]:
    """(wall id, why) following the table's order; see diagnose_remedies.yaml ``walls``."""
    walls = remedies_table()["walls"]
    for wall in walls:
        if "any" in wall and any(holds(c, f) for c in wall["any"]):
            i, hit = next((i, c) for i, c in enumerate(wall["any"]) if holds(c, f))
            says = wall.get("says", [])  # the table's words for the condition, else the condition itself
            return wall["id"], f"{says[i] if i < len(says) else ' '.join(map(str, hit))} ({wall['seed']})"
    if "busy_share" not in f:
        return "undetermined", "no trace: the log alone cannot split communication, host and compute time"
    scored = [(w, _score(w, f)) for w in walls if "score" in w]
    over = [(w, s) for w, s in scored if s >= w["at_least"]]
    if over:
        wall, score = max(over, key=lambda ws: ws[1])
        terms = " + ".join(wall["score"])
        why = f"{terms} = {score:.0%} of the step >= {wall['at_least']:.0%} ({wall['seed']})"
        queued = f.get("dependency_share", 0.0) + f.get("graph_replay_share", 0.0)
        if queued > score:  # the larger share is idle the trace cannot explain
            why += (f"; but the GPU idles {queued:.0%} of the step behind work the trace does not time, more than "
                    "this wall's share: find what that waits on before tuning this wall")
        return wall["id"], why
    last = walls[-1]
    best = ", ".join(f"{w['id']} {s:.0%} < {w['at_least']:.0%}" for w, s in scored)
    if "requires" in last and not holds(last["requires"], f):
        return "undetermined", (f"no wall reaches its threshold ({best}) and the GPU is busy only "
                                f"{f['busy_share']:.0%} of the step: " + _idle_blame(f))
    return last["id"], f"no other wall reaches its threshold ({best}); {last['seed']}"


def _idle_blame(f: dict[str, Any]) -> str:
    """Why the idle time names no wall: by its largest cause (metrics.IDLE_KEYS)."""
    if f.get("graph_replay_share", 0.0) >= max(f.get("dependency_share", 0.0), f.get("unattributed_share", 0.0)):
        return (f"most idle time ({f['graph_replay_share']:.0%} of the step) is inside CUDA-graph replays: kernels "
                "of a graph launched earlier wait on the graph's own dependencies or on an event it waits for, which "
                "a trace does not tie to a wall: profile the graph's region eagerly, or look at what it waits on")
    if f.get("dependency_share", 0.0) >= f.get("unattributed_share", 0.0):
        return (f"most idle time ({f.get('dependency_share', 0.0):.0%} of the step) is work already queued behind a "
                "dependency the trace does not time (a cross-stream event, a CUDA-graph replay launched earlier, or a "
                "collective of a stream or process not profiled), which no wall is charged with: profile every rank, "
                "or look at what the queued kernels wait on")
    return ("the idle time has no launch record to blame (a CUDA-graph replay, or a trace without CPU activity); "
            "profile with activities=[CPU, CUDA]")


def evidence(m: Measurement, f: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    if "step_seconds" in f:
        lines += _trace_evidence(m, f)
    if m.peak_reserved_bytes is not None:
        said = f"; {m.capacity_source}" if m.capacity_source else ""
        cap = f" of {m.gpu_memory_bytes / GIB:.1f} GiB ({f['memory_fraction']:.0%}{said})" if "memory_fraction" in f \
            else " (GPU capacity unknown: pass a trace or --gpu)"
        lines.append(f"peak reserved memory {m.peak_reserved_bytes / GIB:.1f} GiB{cap} [{m.peak_source}]")
        if f.get("memory_fraction", 0.0) >= NEAR_FULL and not (f.get("oom") or f.get("alloc_retries")):
            lines.append("reserved memory is near the GPU's size, but no out-of-memory and no allocator retries were "
                         "seen: PyTorch's caching allocator keeps what it freed, so this fits (little headroom)")
    if f.get("oom"):
        lines.append(f"log reports CUDA out-of-memory: {m.log.oom_lines[0]}")
    if f.get("alloc_retries"):
        lines.append(f"allocator retries (cache flushes under memory pressure): {f['alloc_retries']}")
    if m.log is not None and m.log.iteration_seconds is not None:
        tf = m.log.tflops_per_gpu
        how = "its one logged interval, warm-up included" if m.log.timed_once else "median of steady intervals"
        tokens = m.log.tokens_per_second_per_gpu  # where the argument dump gives the sequence and the GPUs
        lines.append(f"log: {m.log.iteration_seconds:.3f} s/iteration ({how})"
                     + (f", {tf:.1f} TFLOP/s/GPU" if tf is not None else "")
                     + (f", {tokens:,.0f} tokens/s/GPU" if tokens else ""))
    return lines


def _trace_evidence(m: Measurement, f: dict[str, Any]) -> list[str]:
    s = m.combined
    idle = ", ".join(f"{k.replace('_', '-')} {f[f'{k}_share']:.1%}" for k in s.idle)
    lines = [f"GPU busy {f['busy_share']:.1%} of the {s.seconds:.4f} s step; idle {f['idle_share']:.1%} ({idle})"]
    comm = sorted(((c, f[f"exposed.{c}"]) for c in remedies_table()["groups"]["comm"]), key=lambda x: -x[1])
    top = ", ".join(f"{c} {v:.1%}" for c, v in comm if v >= 0.005) or "none"
    lines.append(f"communication not overlapped with compute: {s.exposed_comm_seconds:.4f} s/step "
                 f"({f['exposed_comm_share']:.1%}; by class: {top})")
    if f["comm_wait_share"] >= 0.005:
        why = "slower peers, or on a slower iteration of its own: one rank's trace cannot tell them apart" \
            if len(m.ranks) == 1 else "slower peers"
        lines.append(f"communication kernels ran {f['comm_wait_share']:.1%} of the step beyond the fastest "
                     f"instance of the same transfer (waiting on {why})")
    if f.get("graph_replay_share", 0.0) >= 0.10:
        lines.append(f"the GPU idled {f['graph_replay_share']:.1%} of the step inside CUDA-graph replays (kernels of a "
                     "graph launched earlier waiting on its own dependencies or an event); no wall is charged with it")
    if f["dependency_share"] >= 0.10:
        lines.append(f"the GPU idled {f['dependency_share']:.1%} of the step with work already queued, waiting on "
                     "something the trace does not time (a cross-stream event, a CUDA-graph replay launched earlier, "
                     "or a collective of a stream or process not profiled); no wall is charged with it")
    kinds = sorted(((c, f[f"share.{c}"]) for c in remedies_table()["groups"]["compute"]), key=lambda x: -x[1])
    lines.append("compute kernels: " + ", ".join(f"{c} {v:.1%}" for c, v in kinds) + " of the step")
    if len(m.ranks) > 1:
        imb = imbalance(m.ranks)
        lines.append(f"rank {imb['slowest_rank']} computes {imb['max_over_mean'] - 1:.1%} longer than the "
                     f"mean of {len(m.ranks)} ranks")
    return lines
