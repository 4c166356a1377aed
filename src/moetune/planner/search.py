"""The planner: every legal layout x micro-batch x knob set, pruned by memory, ranked by throughput.

Candidates are evaluated in numpy batches (walls/batch.py): one batch per knob set over every
(layout, micro-batch) pair. Ties and near-ties (within 1%) follow the seeds' order of preference:
smaller model parallelism, selective before full recompute, no offload, larger DP (seeds/000 Phase 1
and 2). The winners are re-evaluated with the scalar `estimate` for their full breakdown.
"""

import time
from dataclasses import dataclass, field

import numpy as np

from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.defaults import platform_defaults
from moetune.planner.enumerate import MBS_CHOICES, enumerate_layouts, knob_grid
from moetune.planner.estimate import Estimate, estimate
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import ModelSpec
from moetune.walls.batch import batch_memory, batch_step_seconds, build_batch
from moetune.walls.efficiency import efficiency
from moetune.walls.memory import default_overheads


@dataclass(kw_only=True, slots=True)
class PlanResult:
    candidates_evaluated: int
    feasible: int
    search_seconds: float
    layouts: int
    knob_sets: int
    results: list[Estimate] = field(default_factory=list)


def _candidates(layouts: list[Layout], wl: Workload, fixed: dict) -> list[tuple[Layout, int]]:
    mbs_choices = [fixed["mbs"]] if "mbs" in fixed else list(MBS_CHOICES)
    gbs = wl.global_batch_size
    return [(lay, m) for lay in layouts for m in mbs_choices if gbs % (m * lay.dp) == 0]


def _preference(lay: Layout, k: Knobs) -> tuple:
    """Seeds' order among near-equal candidates: less model parallelism, lighter recompute, no offload."""
    recompute = {"none": 0, "selective": 1, "full": 2}[k.recompute]
    return (lay.tp * lay.cp * lay.pp, recompute, k.optimizer_offload_fraction, -lay.dp, lay.tp, -lay.ep)


def plan(spec: ModelSpec, gpu: GpuSpec, world: int, wl: Workload, *, fixed: dict | None = None, top: int = 5,
         routing: str = "dropless", efficiency_overrides: dict | None = None, progress=None) -> PlanResult:
    if wl.global_batch_size is None:
        raise MoetuneError("plan needs --gbs (the global batch size fixes DP x micro-batches)")
    fixed = fixed or {}
    start = time.perf_counter()
    layouts = enumerate_layouts(spec, gpu, world, wl, fixed)
    cands = _candidates(layouts, wl, fixed)
    if not cands:
        raise MoetuneError(f"no legal layout of {spec.name} on {world} GPUs with GBS {wl.global_batch_size}; "
                           "check --gpus, --gbs and any --fix values")
    batch = build_batch(spec, cands)
    eff, overheads = efficiency(gpu.key, efficiency_overrides), default_overheads()
    grid = knob_grid(spec, gpu, platform_defaults(gpu), fixed, routing)
    best: list[tuple[float, tuple, int, Knobs]] = []
    feasible = 0
    for knobs in grid:
        if progress:
            progress()
        try:
            gpu.peak_tflops(knobs.precision)
        except MoetuneError:
            continue
        peak = batch_memory(spec, batch, wl.seq_length, wl.global_batch_size, knobs, overheads)
        fits = peak <= gpu.capacity_bytes
        if knobs.dispatcher == "hybridep":  # HybridEP's EP group must fit one NVLink domain (rule
            fits &= batch.fields.ep[:, 0] <= gpu.nvlink_domain  # dispatcher.hybridep_ep_exceeds_domain)
        feasible += int(fits.sum())
        if not fits.any():
            continue
        step = batch_step_seconds(spec, batch, wl.seq_length, wl.global_batch_size, knobs, gpu, eff)["step"]
        step = np.where(fits, step, np.inf)
        for i in np.argsort(step)[:top * 4]:
            if np.isfinite(step[i]):
                best.append((float(step[i]), _preference(batch.layouts[i], knobs), int(i), knobs))
    fastest = min((b[0] for b in best), default=1.0)
    # within 1% of each other, candidates are ordered by the seeds' preferences
    best.sort(key=lambda x: (round(100 * np.log(x[0] / fastest)), x[1]))
    results = [estimate(spec, gpu, batch.layouts[i], Workload(seq_length=wl.seq_length,
                        micro_batch_size=int(batch.mbs[i, 0]), global_batch_size=wl.global_batch_size), knobs,
                        efficiency_overrides=efficiency_overrides) for _, _, i, knobs in best[:top]]
    return PlanResult(candidates_evaluated=batch.size * len(grid), feasible=feasible,
                      search_seconds=time.perf_counter() - start, layouts=len(layouts), knob_sets=len(grid),
                      results=results)
