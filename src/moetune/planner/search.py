"""The planner: every legal layout x micro-batch x knob set, pruned by memory, ranked by throughput.

Candidates are evaluated in numpy batches (walls/batch.py): one batch per knob set over every
(layout, micro-batch) pair. Ties and near-ties (within 1%) follow the seeds' order of preference:
smaller model parallelism, selective before full recompute, no offload, the platform's default dispatcher,
larger DP (seeds/000 Phase 1 and 2, seeds/004). The leading candidates on PP > 1 then have their pipeline ranks
re-split by the scalar `estimate` (planner/pipeline_balance.py), and the winners are re-evaluated with it for their
full breakdown.
"""

import time
from dataclasses import dataclass, field, replace

import numpy as np

from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs, unsaved_offloads
from moetune.layout.layout import Layout
from moetune.layout.ranks import job_nvlink_domain, members_in_domain
from moetune.layout.validate import Workload, interleaves
from moetune.planner.defaults import platform_defaults
from moetune.planner.enumerate import MBS_CHOICES, enumerate_layouts, knob_grid, pinned_split, tp_cp_sizes
from moetune.planner.estimate import Estimate, estimate
from moetune.planner.legal import legal_grid
from moetune.planner.moves import TIGHT_SHARE
from moetune.planner.ranking import bound, cp_weight, preference, within, without_idle_delay_wgrad
from moetune.planner.resplit import rebalance_best
from moetune.planner.why_none import no_layout_reason, sequence_note
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import ModelSpec
from moetune.walls.batch import batch_host_bytes, batch_memory, batch_step_seconds, time_key
from moetune.walls.batch_layouts import build_batch
from moetune.walls.efficiency import efficiency
from moetune.walls.memory import merged_overheads


@dataclass(kw_only=True, slots=True)
class PlanResult:
    candidates_evaluated: int
    feasible: int
    search_seconds: float
    layouts: int
    knob_sets: int
    results: list[Estimate] = field(default_factory=list)
    lightest_peak_gib: float | None = None  # least peak memory of any candidate under the lightest knobs
    lightest: str = ""  # that candidate's layout and micro-batch size
    capacity_gib: float = 0.0  # the GPU's memory
    lightest_host_gib: float | None = None  # host memory that candidate's optimizer offload needs per GPU
    host_capacity_gib: float | None = None  # the host memory per GPU (None: not known)
    headroom_gib: float = 0.0  # memory every candidate leaves free (plan --headroom)
    # DP sizes of otherwise legal layouts that the global batch rules out (GBS not a multiple of DP x MBS), where one
    # of that DP would fit (search._fitting_dp)
    gbs_excluded_dp: list[int] = field(default_factory=list)
    nvl72: bool = False  # the GPU's NVLink domain spans nodes (HybridEP's EP groups must lie in one)
    memory_fits: bool = False  # some candidate fit in memory under a searched knob set, its prerequisites aside
    # the fastest candidate with the optimizer's CPU offload, where the pick recomputes whole layers and it predicts
    # OFFLOAD_NOTE_GAIN more (offload_instead)
    offload_alternative: Estimate | None = None
    # the TP and CP sizes the sequence length itself ruled out, and the nearest length that allows them (None: none)
    sequence_note: str | None = None


def _candidates(layouts: list[Layout], wl: Workload, fixed: dict) -> list[tuple[Layout, int]]:
    mbs_choices = [fixed["mbs"]] if "mbs" in fixed else list(MBS_CHOICES)
    gbs = wl.global_batch_size
    return [(lay, m) for lay in layouts for m in mbs_choices
            if gbs % (m * lay.dp) == 0 and interleaves(lay.pp, lay.vpp, gbs // (m * lay.dp))]


def _without_recompute(knobs: Knobs) -> tuple:
    return (knobs.precision, knobs.dispatcher, knobs.cuda_graph_scope, knobs.ep_overlap, knobs.delay_wgrad,
            knobs.tp_comm_overlap, knobs.routing, knobs.optimizer_offload_fraction, knobs.main_grads_fp32,
            knobs.overlap_grad_reduce, knobs.overlap_param_gather, knobs.fp8_output_proj, knobs.cp_comm_type,
            knobs.hcp_a2a_size)


def _fits(spec: ModelSpec, gpu: GpuSpec, batch, wl: Workload, knobs: Knobs, overheads: dict,
          roomy_bytes: float = np.inf) -> tuple[np.ndarray, np.ndarray, bool]:
    """(rows that fit and run, rows that also leave moves.TIGHT_SHARE of the GPU free: peak <= roomy_bytes, whether
    any row fits in memory before the knobs' prerequisites are asked)."""
    try:
        gpu.peak_tflops(knobs.precision)
    except MoetuneError:
        return np.zeros(batch.size, bool), np.zeros(batch.size, bool), False
    peak = batch_memory(spec, batch, wl.seq_length, wl.global_batch_size, knobs, overheads)
    fits = peak <= gpu.capacity_bytes
    if knobs.optimizer_offload_fraction > 0 and gpu.host_capacity_bytes is not None:  # and the host holds the rest
        fits &= batch_host_bytes(batch, knobs) <= gpu.host_capacity_bytes
    in_memory = bool(fits.any())
    fits = _runs(fits, batch, knobs, gpu)
    return fits, fits & (peak <= roomy_bytes), in_memory


def _runs(fits: np.ndarray, batch, knobs: Knobs, gpu: GpuSpec) -> np.ndarray:
    """The rows of `fits` whose knobs' prerequisites the layout meets (`_Search.fits` counts the ones that fit in
    memory and fail only here, so plan's "nothing fits" can tell the two causes apart)."""
    f = batch.fields
    if knobs.dispatcher == "hybridep" and gpu.nvlink_domain >= 72:  # on NVL72 racks each HybridEP EP group must lie
        domain = job_nvlink_domain(int(f.world_size.flat[0]), gpu.gpus_per_node, gpu.nvlink_domain)  # in one of
        fits &= members_in_domain(f.ep[:, 0], f.etp[:, 0], domain) == f.ep[:, 0]  # the job's NVLink domains (rule
        # dispatcher.hybridep_ep_exceeds_domain); across 8-GPU nodes it reaches the other nodes over RDMA (Bridge's
        # H100 DeepSeek-V3 recipe: EP64, hybridep)
    if knobs.dispatcher != "alltoall":  # at EP=1 no token leaves the rank: a flex backend is the alltoall run again,
        fits &= f.ep[:, 0] > 1  # so it is listed once (estimate defaults EP=1 to alltoall likewise)
    if knobs.ep_overlap:  # EP-overlap prerequisites (seeds/003): EP > 1, and VPP whenever PP > 1
        fits &= (f.ep[:, 0] > 1) & ((f.pp[:, 0] == 1) | (f.vpp[:, 0] > 1))
    return fits


def _memory_bound(spec: ModelSpec, gpu: GpuSpec, batch, wl: Workload, grid: list[Knobs], overheads: dict):
    """Drop candidates that cannot fit under any knob set of the grid: memory is smallest with full
    recompute, the largest offload, no dispatcher buffers or graph pools, and either precision; a candidate
    over capacity even then is over it for every knob set (it still counts as evaluated)."""
    lightest = [Knobs(precision=p, recompute="full", routing=grid[0].routing if grid else "dropless",
                      optimizer_offload_fraction=max(k.optimizer_offload_fraction for k in grid),
                      main_grads_fp32=grid[0].main_grads_fp32 if grid else True)
                for p in sorted({k.precision for k in grid})] if grid else []
    if not lightest:
        return None, (None, "", None)
    peak = np.min([batch_memory(spec, batch, wl.seq_length, wl.global_batch_size, k, overheads) for k in lightest],
                  axis=0)
    rows = np.nonzero(peak <= gpu.capacity_bytes)[0]
    i = int(np.argmin(peak))
    # the host share the lightest knobs' optimizer offload needs (plan's "nothing fits" names it when it is the limit)
    host = float(batch_host_bytes(batch, lightest[0])[i]) / 2**30
    offload = ", optimizer offload" if lightest[0].optimizer_offload_fraction > 0 else ""
    least = (float(peak[i]) / 2**30, f"{batch.layout(i).short()}, MBS {int(batch.mbs[i, 0])}, full recompute{offload}",
             host)
    return (batch.subset(rows) if len(rows) else None), least


# The seeds' last resort when nothing fits (seeds/000 Phase 1: "add offloading only when recompute and parallelism
# are still insufficient"): fine-grained offloading of the routed experts' saved inputs, the largest MoE activations.
LAST_RESORT_OFFLOAD = frozenset({"expert_fc1", "moe_act"})


def plan(spec: ModelSpec, gpu: GpuSpec, world: int, wl: Workload, *, fixed: dict | None = None, top: int = 5,
         routing: str = "dropless", efficiency_overrides: dict | None = None, progress=None,
         headroom_gib: float = 0.0, overheads: dict | None = None) -> PlanResult:
    """The fastest candidates that fit with `headroom_gib` to spare, under the memory wall's overheads with the
    user's `overheads` figures on top; `progress(done, total)` is called once per knob set evaluated. Offloading
    comes last (seeds/000 Phase 1: "add offloading only when recompute and parallelism are still insufficient"):
    the optimizer's CPU offload is searched only when nothing fits without it, and then, for an MoE model, the
    routed experts' activations too (LAST_RESORT_OFFLOAD); a pinned offload is searched as pinned. The counts cover
    every pass run."""
    fixed = fixed or {}
    Layout(world_size=world)  # the job's size is in range before any layout is enumerated
    _pins_agree(fixed)
    if not 0 <= headroom_gib < gpu.memory_gib:
        raise MoetuneError(f"--headroom ({headroom_gib:g} GiB) must be at least 0 and below the GPU's "
                           f"{gpu.memory_gib:g} GiB")
    if "pipeline_layout" in fixed:
        pinned_split(spec, fixed["pipeline_layout"], fixed)
    passes = [fixed]
    if "optimizer_offload_fraction" not in fixed:
        passes = [{**fixed, "optimizer_offload_fraction": [0.0]}, fixed]
    if "offload_modules" not in fixed and spec.num_moe_experts:
        passes.append({**fixed, "offload_modules": LAST_RESORT_OFFLOAD})

    def search(pinned: dict, best: int, report=None) -> PlanResult:
        return _plan_once(spec, gpu, world, wl, fixed=pinned, top=best, routing=routing,
                          efficiency_overrides=efficiency_overrides, progress=report, headroom_gib=headroom_gib,
                          overheads=overheads)

    done, seconds = 0, 0.0
    for pinned in passes:
        result = search(pinned, top, progress)
        done, seconds = done + result.candidates_evaluated, seconds + result.search_seconds
        if result.results:
            break
    if (alt := offload_instead(result, pinned is passes[0], fixed, search)) is not None:
        done, seconds = done + alt.candidates_evaluated, seconds + alt.search_seconds
        result.offload_alternative = alt.results[0]
    result.candidates_evaluated, result.search_seconds = done, seconds
    return result


# The least predicted gain for which plan names the optimizer-offload alternative to a full-recompute pick: the
# memory estimate's own error (moves.TIGHT_SHARE) is 3%, and so is a near-tie well inside the step model's.
OFFLOAD_NOTE_GAIN = 0.03


def offload_instead(result: PlanResult, first_pass: bool, fixed: dict, search) -> PlanResult | None:
    """Where the pick recomputes whole layers and offload was not searched (nothing needed it), the same search with
    the optimizer's CPU offload, when it predicts OFFLOAD_NOTE_GAIN more: the seeds put offloading after recompute
    (seeds/000 Phase 1), and full recompute is recompute, so the pick stays; but their own DeepSeek-V3 long-context
    pattern runs selective recompute with optimizer offload (seeds/002), and at 128k on 256 H100 that predicts 18%
    over the full-recompute pick, which the user should see."""
    if not result.results or result.results[0].knobs.recompute != "full" or not first_pass \
            or "optimizer_offload_fraction" in fixed:
        return None
    alt = search({**fixed, "optimizer_offload_fraction": [1.0]}, 1)
    base = result.results[0].time["tokens_per_s_per_gpu"]
    if alt.results and alt.results[0].time["tokens_per_s_per_gpu"] >= base * (1 + OFFLOAD_NOTE_GAIN):
        return alt
    return None


def _pins_agree(fixed: dict) -> None:
    """Pinned knobs that cannot run together: one error line naming the pair (the search would find nothing and
    blame memory or the batch)."""
    if fixed.get("delay_wgrad") is True and fixed.get("ep_overlap") == [False]:
        raise MoetuneError("--fix delay_wgrad=true needs EP overlap (Megatron-Core: overlap_moe_expert_parallel_comm "
                           "must be enabled when enabling delay_wgrad_compute, transformer_config.py); drop --fix "
                           "ep_overlap=false or the delay_wgrad pin")
    if fixed.get("tp_comm_overlap") is True and fixed.get("tp") == 1:
        raise MoetuneError("--fix tp_comm_overlap=true needs TP > 1 (Megatron Bridge turns it off at TP 1 and "
                           "Megatron-LM refuses it without sequence parallelism); drop --fix tp=1 or the overlap pin")
    if fixed.get("ep_overlap") == [True] and fixed.get("pp", 1) > 1 and fixed.get("vpp") == 1:
        raise MoetuneError(f"--fix ep_overlap=true with pp={fixed['pp']} needs VPP > 1 (seeds/003 Prerequisites: with "
                           "PP, virtual_pipeline_model_parallel_size must be set; Megatron-Core asserts it) but "
                           "--fix vpp=1 is pinned; drop one of the pins")
    offload = fixed.get("offload_modules", frozenset())
    if offload and fixed.get("recompute") == "full":
        raise MoetuneError("--fix offload_modules with recompute=full: full recompute keeps only layer inputs, so "
                           "there is nothing fine-grained to offload; drop one of the pins")
    if inside := unsaved_offloads("selective", fixed.get("recompute_modules", ()), offload):
        raise MoetuneError(f"--fix offload_modules={','.join(inside)} with the 'moe' recompute module: recomputing the "
                           "whole MoE layer saves nothing inside it to offload (Megatron-Core asserts, "
                           "transformer_config.py); drop one of the pins")
    if fixed.get("ep") != 1:
        return
    for key, needs in (("dispatcher", ("deepep", "hybridep")), ("ep_overlap", (True,))):
        pinned = [v for v in fixed.get(key, []) if v in needs]
        if pinned and len(pinned) == len(fixed[key]):
            raise MoetuneError(f"--fix {key}={str(pinned[0]).lower()} needs EP > 1 (expert ranks to exchange tokens "
                               f"with) but --fix ep=1 is pinned; drop one of the pins")


def _plan_once(spec: ModelSpec, gpu: GpuSpec, world: int, wl: Workload, *, fixed: dict, top: int, routing: str,
               efficiency_overrides: dict | None, progress, headroom_gib: float,
               overheads: dict | None) -> PlanResult:
    if wl.global_batch_size is None:
        raise MoetuneError("plan needs --gbs (the global batch size fixes DP x micro-batches)")
    start = time.perf_counter()
    excluded: set[Layout] = set()
    layouts = enumerate_layouts(spec, gpu, world, wl, fixed, gbs_excluded=excluded)
    cands = _candidates(layouts, wl, fixed)
    # layouts never searched: ruled out by GBS itself, or with no MBS choice that makes DP x MBS divide it
    searched = {lay.dp for lay, _ in cands}
    excluded = [lay for lay in excluded | set(layouts) if lay.dp not in searched]
    if not cands:
        raise MoetuneError(f"no legal layout of {spec.name} on {world} GPUs with GBS {wl.global_batch_size}: "
                           + no_layout_reason(spec, gpu, world, wl, fixed))
    defaults = platform_defaults(gpu)
    grid = legal_grid(spec, gpu, knob_grid(spec, gpu, defaults, fixed, routing), wl.seq_length,
                      optional_delay_wgrad="delay_wgrad" not in fixed)
    budget = replace(gpu, memory_gib=gpu.memory_gib - headroom_gib)  # what a candidate may use
    s = _Search(spec=spec, gpu=budget, wl=wl, eff=efficiency(gpu.key, efficiency_overrides),
                resplit="pipeline_layout" not in fixed,
                overheads=merged_overheads(overheads), user_overheads=overheads, top=top,
                dispatcher=defaults["dispatcher"], progress=progress, total=len(grid),
                roomy_bytes=gpu.capacity_bytes * (1 - TIGHT_SHARE))
    batch, (least_gib, least, least_host) = _memory_bound(spec, budget, build_batch(spec, cands), wl, grid,
                                                          s.overheads)
    excluded_dp = _fitting_dp(spec, budget, excluded, wl, grid, s.overheads)
    if batch is not None:
        _search_grid(s, batch, grid)
    rebalance_best(s, efficiency_overrides)
    fastest = min((b[0] for b in s.best), default=1.0)
    # within 1% of each other, candidates are ordered by the seeds' preferences
    s.best.sort(key=lambda x: (within(x[0], fastest), x[1]))
    s.best = _first_of_each(s.best)  # two splits of one layout may re-split to the same string
    results = [estimate(spec, gpu, lay, Workload(seq_length=wl.seq_length, micro_batch_size=mbs,
                                                 global_batch_size=wl.global_batch_size),
                        replace(knobs, tp_comm_overlap=knobs.tp_comm_overlap and lay.sp),  # Bridge: off at TP 1
                        overheads, efficiency_overrides=efficiency_overrides)
               for _, _, lay, mbs, knobs, _ in s.best[:top]]
    if "delay_wgrad" not in fixed:
        results = [without_idle_delay_wgrad(e) for e in results]
    return PlanResult(candidates_evaluated=len(cands) * len(grid), feasible=s.feasible,
                      search_seconds=time.perf_counter() - start, layouts=len(layouts), knob_sets=len(grid),
                      results=results, lightest_peak_gib=least_gib, lightest=least, lightest_host_gib=least_host,
                      host_capacity_gib=gpu.host_memory_gib or None,
                      capacity_gib=gpu.capacity_bytes / 2**30, headroom_gib=headroom_gib,
                      gbs_excluded_dp=excluded_dp, nvl72=gpu.nvlink_domain > gpu.gpus_per_node,
                      memory_fits=s.memory_fits,
                      sequence_note=None if results else sequence_note(wl.seq_length,
                                                                       *tp_cp_sizes(gpu, world, wl.seq_length, fixed)))


def _fitting_dp(spec: ModelSpec, gpu: GpuSpec, layouts: list[Layout], wl: Workload, grid: list[Knobs],
                overheads: dict) -> list[int]:
    """The DP sizes of `layouts` (those the global batch ruled out) with one that would fit at MBS 1 under the grid's
    lightest knobs: a larger GBS that allows the others would not make them run."""
    if not layouts or not grid:
        return []
    # weighed at a batch that gives every pipeline its full depth of micro-batches in flight, as the larger GBS that
    # would allow them does (their own GBS may not even give each DP rank one micro-batch)
    deep = replace(wl, global_batch_size=max(lay.dp * lay.pp * lay.vpp for lay in layouts))
    batch, _ = _memory_bound(spec, gpu, build_batch(spec, [(lay, 1) for lay in layouts]), deep, grid, overheads)
    return [] if batch is None else sorted({int(d) for d in batch.fields.dp[:, 0]})


def _first_of_each(best: list) -> list:
    """`best` without later repeats of a (layout, micro-batch, knobs) candidate."""
    firsts: dict = {}
    for b in best:
        firsts.setdefault((b[2], b[3], b[4]), b)
    return list(firsts.values())


@dataclass(kw_only=True, slots=True)
class _Search:
    """One search's inputs and running state: the best candidates so far and the bound they set."""
    spec: ModelSpec
    gpu: GpuSpec
    wl: Workload
    eff: dict
    overheads: dict  # the memory wall's, with the user's on top
    user_overheads: dict | None  # the user's --overheads figures alone (estimate merges them itself)
    top: int
    resplit: bool  # re-split the leading candidates' pipeline ranks (not when --fix pipeline_layout pins the string)
    dispatcher: str  # the platform's default, preferred among near-ties
    progress: object
    total: int
    roomy_bytes: float = np.inf  # a peak at most this leaves moves.TIGHT_SHARE of the (whole) GPU free
    done: int = 0
    feasible: int = 0
    bound: float = np.inf  # candidates slower than this cannot reach the top (ranking.bound)
    memory_fits: bool = False  # some candidate fit in memory under some knob set, prerequisites aside
    best: list = field(default_factory=list)  # (step seconds, preference, layout, mbs, knobs, re-split bound)

    @property
    def kept(self) -> int:
        """Candidates each knob set may add, and the rank whose time bounds the rest: 4 x top, at least 20."""
        return max(4 * self.top, 20)

    def fits(self, batch, knobs: Knobs) -> np.ndarray:
        self.done += 1
        if self.progress:
            self.progress(self.done, self.total)
        fits, roomy, in_memory = _fits(self.spec, self.gpu, batch, self.wl, knobs, self.overheads, self.roomy_bytes)
        self.feasible += int(fits.sum())
        self.memory_fits |= in_memory
        return fits, roomy


def _groups(items, key) -> list[list]:
    out: dict[tuple, list] = {}
    for item in items:
        out.setdefault(key(item), []).append(item)
    return list(out.values())


def _search_grid(s: _Search, batch, grid: list[Knobs]) -> None:
    """Time every knob set of the grid where it fits."""
    fits_plain: dict[tuple, np.ndarray] = {}  # other knobs -> rows that fit with no recompute at all
    for group in _groups(sorted(grid, key=lambda k: k.recompute != "none"), time_key):  # no recompute first
        timed = {}
        for knobs in group:
            fits, roomy = s.fits(batch, knobs)
            plain_key = _without_recompute(knobs)
            if knobs.recompute == "none":
                fits_plain[plain_key] = roomy
                timed[knobs] = fits, roomy
            else:  # recompute only adds time: where the same knobs fit roomily without it, this set cannot win
                timed[knobs] = fits & ~fits_plain.get(plain_key, np.zeros_like(fits)), roomy
        _time(s, batch, timed)


def _time(s: _Search, batch, timed: dict[Knobs, np.ndarray]) -> None:
    """Step seconds of each knob set on its rows (one shared subset per group); the fastest join `s.best`."""
    union = np.logical_or.reduce([mask for mask, _ in timed.values()])
    if not union.any():
        return
    rows = np.nonzero(union)[0]
    sub = batch.subset(rows)  # time only what fits under some knob set of the group
    resplit = (sub.fields.pp[:, 0] > 1) & s.resplit
    for knobs, (mask, roomy) in timed.items():
        walls = batch_step_seconds(s.spec, sub, s.wl.seq_length, s.wl.global_batch_size, knobs, s.gpu, s.eff)
        # ranked as CP_SHORT_MARGIN slower where CP > 1 below the long-context regime (ranking.cp_weight)
        step = np.where(mask[rows], walls["step"] * cp_weight(sub.fields.cp[:, 0], s.wl.seq_length), np.inf)
        # the best a re-split could make it; inf where it does not fit (min(balanced, inf) would let it take a place)
        reach = np.where(resplit & np.isfinite(step), np.minimum(walls["balanced"] * (step / walls["step"]), step),
                         step)
        keep = min(s.kept, len(step))
        # the fastest as they are, and those a re-split could make fastest (neither crowds the other out)
        for i in np.union1d(np.argpartition(step, keep - 1)[:keep], np.argpartition(reach, keep - 1)[:keep]):
            if np.isfinite(step[i]) and reach[i] <= s.bound:
                lay = sub.layout(i)
                s.best.append((float(step[i]), preference(lay, knobs, s.dispatcher, s.wl.seq_length,
                                                           not roomy[rows[i]]), lay,
                               int(sub.mbs[i, 0]), knobs, float(reach[i])))
        s.bound = bound(s.best, s.kept)
