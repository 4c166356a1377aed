"""One search pass's candidates, evaluated in numpy batches (walls/batch.py): one batch per knob set over every
(layout, micro-batch) pair.

Candidates over capacity under the grid's lightest knobs are dropped first (memory_bound); each knob set then keeps
the rows that fit in memory and meet its prerequisites, times them, and the fastest join the pass's running best
list (Search.best), which bounds what later knob sets may add (ranking.bound).
"""

from dataclasses import dataclass, field, replace

import numpy as np

from moetune.errors import MoetuneError
from moetune.layout.gemm_shapes import Widths, gemm_refusal, gemm_shapes_ok
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.ranks import hybridep_spans_on
from moetune.layout.validate import Workload, interleaves
from moetune.planner.defaults import default_dispatcher
from moetune.planner.enumerate import MBS_CHOICES
from moetune.planner.ranking import bound, cp_weight, preference
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import ModelSpec
from moetune.walls.batch import (
    batch_host_bytes,
    batch_memory,
    batch_state_bytes,
    batch_step_seconds,
    time_key,
    whole_layer_balanced,
)
from moetune.walls.batch_layouts import build_batch, distinct_shapes


def candidate_pairs(layouts: list[Layout], wl: Workload, fixed: dict) -> list[tuple[Layout, int]]:
    """The (layout, micro-batch size) pairs a pass searches: DP x MBS divides the global batch, into a micro-batch
    count the layout's interleaved schedule runs (layout/validate.py interleaves)."""
    mbs_choices = [fixed["mbs"]] if "mbs" in fixed else list(MBS_CHOICES)
    gbs = wl.global_batch_size
    sizes: dict[tuple, list[int]] = {}  # (DP, PP, VPP), all the test reads -> its sizes: ~6k layouts, a few dozen keys
    out = []
    for lay in layouts:
        if (key := (lay.dp, lay.pp, lay.vpp)) not in sizes:
            dp, pp, vpp = key
            sizes[key] = [m for m in mbs_choices if gbs % (m * dp) == 0 and interleaves(pp, vpp, gbs // (m * dp))]
        out.extend((lay, m) for m in sizes[key])
    return out


def _without_recompute(knobs: Knobs) -> tuple:
    return (knobs.precision, knobs.dispatcher, knobs.cuda_graph_scope, knobs.ep_overlap, knobs.delay_wgrad,
            knobs.tp_comm_overlap, knobs.routing, knobs.optimizer_offload_fraction, knobs.main_grads_fp32,
            knobs.overlap_grad_reduce, knobs.overlap_param_gather, knobs.fp8_output_proj, knobs.cp_comm_type,
            knobs.hcp_a2a_size, knobs.quantized_params)


def _fits(spec: ModelSpec, gpu: GpuSpec, batch, wl: Workload, knobs: Knobs, overheads: dict,
          roomy_bytes: float = np.inf) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows that fit and run, rows that also leave moves.TIGHT_SHARE of the GPU free: peak <= roomy_bytes, rows
    that fit in memory before the knobs' prerequisites are asked)."""
    try:
        gpu.peak_tflops(knobs.precision)
    except MoetuneError:
        return np.zeros(batch.size, bool), np.zeros(batch.size, bool), np.zeros(batch.size, bool)
    peak = batch_memory(spec, batch, wl.seq_length, wl.global_batch_size, knobs, overheads, arch=gpu.arch)
    fits = peak <= gpu.capacity_bytes
    if knobs.optimizer_offload_fraction > 0 and gpu.host_capacity_bytes is not None:  # and the host holds the rest
        fits &= batch_host_bytes(batch, knobs) <= gpu.host_capacity_bytes
    in_memory = fits.copy()
    fits = _runs(fits, batch, knobs, gpu, spec, wl.seq_length)
    return fits, fits & (peak <= roomy_bytes), in_memory


def _runs(fits: np.ndarray, batch, knobs: Knobs, gpu: GpuSpec, spec: ModelSpec, seq: int) -> np.ndarray:
    """The rows of `fits` whose knobs' prerequisites the layout meets (`Search.fits` counts the ones that fit in
    memory and fail only here, so plan's "nothing fits" can tell the two causes apart)."""
    f = batch.fields
    if knobs.precision != "bf16":  # the tokens per rank and per-rank widths its GEMMs accept (estimate refuses alike)
        fits &= _gemm_shapes(batch, spec, gpu, knobs.precision, seq)
    if knobs.dispatcher == "hybridep":  # on a rack each HybridEP EP group must lie in one of the job's NVLink domains
        # (rule dispatcher.hybridep_ep_exceeds_domain); across 8-GPU nodes it reaches the other nodes over RDMA
        # (Bridge's H100 DeepSeek-V3 recipe: EP64)
        fits &= hybridep_spans_on(gpu, f.world_size.flat[0], f.ep[:, 0], f.etp[:, 0])
    if knobs.dispatcher == "hybridep" and "full_iteration" in knobs.cuda_graph_scope:  # the TE op fuser that
        # config_map.STATIC_EXPERTS writes there fuses the experts only at ETP 1 (rule compute.op_fuser_expert_tp)
        fits &= f.etp[:, 0] == 1
    if knobs.dispatcher != "alltoall":  # at EP=1 no token leaves the rank: a flex backend is the alltoall run again,
        fits &= f.ep[:, 0] > 1  # so it is listed once (estimate defaults EP=1 to alltoall likewise)
    if knobs.ep_overlap:  # EP-overlap prerequisites (seeds/003): EP > 1, and VPP whenever PP > 1
        fits &= (f.ep[:, 0] > 1) & ((f.pp[:, 0] == 1) | (f.vpp[:, 0] > 1))
    return fits


def _gemm_shapes(batch, spec: ModelSpec, gpu: GpuSpec, precision: str, seq: int) -> np.ndarray:
    """The rows whose GEMM shapes this FP8/FP4 recipe accepts (layout/gemm_shapes.py), judged once per distinct
    (MBS, TP, CP, ETP, SP) shape and recipe of the plan's batch."""
    def make() -> np.ndarray:
        u, inverse = distinct_shapes(batch.root())
        ok = gemm_shapes_ok(Widths.of(spec), precision, gpu.arch, seq=seq, mbs=u.mbs[:, 0], tp=u.tp[:, 0],
                            cp=u.cp[:, 0], sp=u.sp[:, 0], etp=u.etp[:, 0])
        return np.broadcast_to(ok, u.mbs[:, 0].shape)[inverse]
    root = batch.root().memo(("gemm_shapes", precision, seq), make)
    return root if batch.origin is None else batch.memo(("gemm_shapes", precision, seq), lambda: root[batch.rows])


def memory_bound(spec: ModelSpec, gpu: GpuSpec, batch, wl: Workload, grid: list[Knobs], overheads: dict):
    """Drop candidates that cannot fit under any knob set of the grid: memory is smallest with full
    recompute, the largest offload, no dispatcher buffers or graph pools, and either precision; a candidate
    over capacity even then is over it for every knob set (it still counts as evaluated)."""
    lightest = [Knobs(precision=p, recompute="full", routing=grid[0].routing if grid else "dropless",
                      optimizer_offload_fraction=max(k.optimizer_offload_fraction for k in grid),
                      main_grads_fp32=grid[0].main_grads_fp32 if grid else True,
                      megatron_fsdp=grid[0].megatron_fsdp if grid else None)  # one pass shares its strategy
                for p in sorted({k.precision for k in grid})] if grid else []
    if not lightest:
        return None, (None, "", None, None)
    peak = np.min([batch_memory(spec, batch, wl.seq_length, wl.global_batch_size, k, overheads, arch=gpu.arch)
                   for k in lightest], axis=0)
    rows = np.nonzero(peak <= gpu.capacity_bytes)[0]
    i = int(np.argmin(peak))
    # the host share the lightest knobs' optimizer offload needs (plan's "nothing fits" names it when it is the limit)
    host = float(batch_host_bytes(batch, lightest[0])[i]) / 2**30
    offload = ", optimizer offload" if lightest[0].optimizer_offload_fraction > 0 else ""
    if lightest[0].megatron_fsdp:
        offload += f", Megatron FSDP {lightest[0].megatron_fsdp}"
    # where nothing fits: the least model state any candidate holds, which no shorter sequence lowers (why_none)
    state = None if len(rows) else float(min(batch_state_bytes(spec, batch, k, gpu.arch).min() for k in lightest))
    least = (float(peak[i]) / 2**30, f"{batch.layout(i).short()}, MBS {int(batch.mbs[i, 0])}, full recompute{offload}",
             host, None if state is None else state / 2**30)
    return (batch.subset(rows) if len(rows) else None), least


def fitting_dp(spec: ModelSpec, gpu: GpuSpec, layouts: list[Layout], wl: Workload, grid: list[Knobs],
                overheads: dict) -> list[int]:
    """The DP sizes of `layouts` (those the global batch ruled out) with one that would fit at MBS 1 under the grid's
    lightest knobs: a larger GBS that allows the others would not make them run."""
    if not layouts or not grid:
        return []
    # weighed at a batch that gives every pipeline its full depth of micro-batches in flight, as the larger GBS that
    # would allow them does (their own GBS may not even give each DP rank one micro-batch)
    deep = replace(wl, global_batch_size=max(lay.dp * lay.pp * lay.vpp for lay in layouts))
    batch, _ = memory_bound(spec, gpu, build_batch(spec, [(lay, 1) for lay in layouts]), deep, grid, overheads)
    return [] if batch is None else sorted({int(d) for d in batch.fields.dp[:, 0]})


@dataclass(kw_only=True, slots=True)
class Search:
    """One search's inputs and running state: the best candidates so far and the bound they set."""
    spec: ModelSpec
    gpu: GpuSpec
    wl: Workload
    eff: dict
    overheads: dict  # the memory wall's, with the user's on top
    user_overheads: dict | None  # the user's --overheads figures alone (estimate merges them itself)
    top: int
    resplit: bool  # re-split the leading candidates' pipeline ranks (not when --fix pipeline_layout pins the string)
    progress: object
    total: int
    roomy_bytes: float = np.inf  # a peak at most this leaves moves.TIGHT_SHARE of the (whole) GPU free
    done: int = 0
    feasible: int = 0
    bound: float = np.inf  # candidates slower than this cannot reach the top (ranking.bound)
    memory_fits: bool = False  # some candidate fit in memory under some knob set, prerequisites aside
    # where candidates fit in memory but none runs: the GEMM shape an FP8/FP4 recipe refused in one of them
    gemm_note: str | None = None
    best: list = field(default_factory=list)  # (step seconds, preference, layout, mbs, knobs, re-split bound)
    short_cp: bool = False  # collect short_cp_best: a search that shows plan's note, below the long-context regime
    # below the long-context regime, the fastest CP > 1 candidates by their own prediction (the ranking weighs CP
    # there: ranking.cp_weight), so plan can say where the weight hid a faster layout: (reach, layout, mbs, knobs)
    short_cp_best: list = field(default_factory=list)
    dispatchers: frozenset = frozenset()  # the dispatchers the grid searches
    defaults: dict = field(default_factory=dict)  # (EP, ETP) -> dispatcher(): it depends on the expert mesh alone

    def dispatcher(self, lay: Layout) -> str | None:
        """The layout's default dispatcher, which ranking.preference favours among near-ties: the platform's where
        it runs, alltoall at EP 1 and where no flex backend spans the EP group (defaults.default_dispatcher), not the
        platform's alone, which an EP-1 layout cannot run. None where the search does not run it (--fix
        dispatcher=alltoall on H100): no candidate of that layout runs its default, so none is ranked down."""
        key = (lay.ep, lay.etp)
        if key not in self.defaults:
            default = default_dispatcher(self.gpu, lay)
            self.defaults[key] = default if default in self.dispatchers else None
        return self.defaults[key]

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
        self.memory_fits |= bool(in_memory.any())
        if self.gemm_note is None and knobs.precision != "bf16" and in_memory.any() and not fits.any():
            i = int(np.argmax(in_memory))
            lay = batch.layout(i)
            self.gemm_note = gemm_refusal(Widths.of(self.spec), knobs.precision, self.gpu.arch,
                                          seq=self.wl.seq_length, mbs=int(batch.mbs[i, 0]), tp=lay.tp, cp=lay.cp,
                                          sp=lay.sp, etp=lay.etp)
        return fits, roomy


def _groups(items, key) -> list[list]:
    out: dict[tuple, list] = {}
    for item in items:
        out.setdefault(key(item), []).append(item)
    return list(out.values())


def search_grid(s: Search, batch, grid: list[Knobs]) -> None:
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


def _time(s: Search, batch, timed: dict[Knobs, np.ndarray]) -> None:
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
        weight = step / walls["step"]  # the CP weight the ranking put on each step (inf where it does not fit)
        # the best a re-split could make it; inf where it does not fit (min(balanced, inf) would let it take a place)
        reach = np.where(resplit & np.isfinite(step), _within(walls["balanced"], step, weight), step)
        # tightened to whole layers where that first bound keeps it in reach of the list (the rest stay out either way)
        near = np.nonzero(resplit & np.isfinite(step) & (reach <= s.bound))[0]
        cp_near = _cp_first(s, sub, walls, resplit & mask[rows]) if s.short_cp else near[:0]
        tight = _whole_layers(s, sub, walls, _union(near, cp_near, len(step)))  # once for both readers
        if len(near):
            reach[near] = _within(tight[near], step[near], weight[near])
        if s.short_cp:
            _short_cp_best(s, _cp_reach(s, walls, cp_near, tight), mask[rows], sub, knobs)
        keep = min(s.kept, len(step))
        # the fastest as they are, and those a re-split could make fastest (neither crowds the other out)
        for i in _union(np.argpartition(step, keep - 1)[:keep], np.argpartition(reach, keep - 1)[:keep], len(step)):
            if np.isfinite(step[i]) and reach[i] <= s.bound:
                lay = sub.layout(i)
                s.best.append((float(step[i]), preference(lay, knobs, s.dispatcher(lay), s.wl.seq_length,
                                                           not roomy[rows[i]]), lay,
                               int(sub.mbs[i, 0]), knobs, float(reach[i])))
        s.bound = bound(s.best, s.kept)


def _union(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """np.union1d of two arrays of row indices below `n` (ascending, each once), by a mask: no sort, and not
    np.unique, which asks np.ma.is_masked, whose first call imports numpy.ma (~10 ms of a cold plan)."""
    mask = np.zeros(n, bool)
    mask[a] = mask[b] = True
    return np.flatnonzero(mask)


# CP candidates kept for the short-context note: each costs a re-split and an estimate when the note is weighed
SHORT_CP_KEPT = 8
# CP candidates the loose first bound ranks first, tightened to whole layers before the note keeps its few (_cp_reach).
# The 4 is arbitrary, not measured: a larger pool asks whole_layer_balanced of more rows per knob set on the search's
# hot path; a smaller one misses more candidates whose whole-layer bound ranks among the kept but whose loose one falls
# below the pool, as some do (GLM-4.5-Air on 48 H200 at 12k: 67 of 132 knob sets; yet its note, and that of 7 other
# searches, came out the same with every CP row tightened)
SHORT_CP_POOL = 4 * SHORT_CP_KEPT


def _within(balanced: np.ndarray, step: np.ndarray, weight: np.ndarray | None = None) -> np.ndarray:
    """The step a re-split could reach: the balanced step (walls["balanced"], or _whole_layers') under the CP weight
    the ranking put on `step` (ranking.cp_weight; None: unweighted), never above `step`."""
    return np.minimum(balanced if weight is None else balanced * weight, step)


def _whole_layers(s: Search, sub, walls: dict, rows) -> np.ndarray:
    """walls["balanced"] tightened to whole layers (walls/batch.py whole_layer_balanced) at `rows`, NaN elsewhere."""
    tight = np.full(len(walls["step"]), np.nan)
    if len(rows):
        tight[rows] = whole_layer_balanced(sub, s.wl.global_batch_size, walls, rows)
    return tight


def _loose_reach(s: Search, walls: dict) -> np.ndarray:
    return _within(walls["balanced"], walls["step"]) if s.resplit else walls["step"].copy()


def _cp_first(s: Search, sub, walls: dict, resplit) -> np.ndarray:
    """The SHORT_CP_POOL CP > 1 candidates the first bound ranks first, so that whole layers may reorder them before
    the few the note keeps are taken."""
    first = np.where(resplit & (sub.fields.cp[:, 0] > 1), _loose_reach(s, walls), np.inf)
    near = np.argsort(first)[:SHORT_CP_POOL]
    return near[np.isfinite(first[near])]


def _cp_reach(s: Search, walls: dict, cp_near, tight) -> np.ndarray:
    """The unweighted step a re-split could reach, for the short-context note: the first bound, tightened to whole
    layers for the CP > 1 candidates it ranks first (_cp_first; a loose first bound had filled the kept few with PP6
    splits that whole layers leave slower than the pick, crowding out the PP3 one that beats it)."""
    reach = _loose_reach(s, walls)
    reach[cp_near] = _within(tight[cp_near], walls["step"][cp_near])
    return reach


def _short_cp_best(s: Search, raw, fits, sub, knobs: Knobs, keep: int = SHORT_CP_KEPT) -> None:
    """Keep the `keep` fastest fitting CP > 1 candidates by their unweighted step (the best a re-split could make
    each, where the search re-splits), below the long-context regime (Search.short_cp)."""
    cp = sub.fields.cp[:, 0] > 1
    if not cp.any():
        return
    raw = np.where(fits & cp, raw, np.inf)
    worst = s.short_cp_best[-1][0] if len(s.short_cp_best) == keep else np.inf
    first = np.argpartition(raw, keep - 1)[:keep] if len(raw) > keep else np.arange(len(raw))
    for i in first:
        if raw[i] < worst:
            s.short_cp_best.append((float(raw[i]), sub.layout(int(i)), int(sub.mbs[i, 0]), knobs))
    s.short_cp_best = sorted(s.short_cp_best, key=lambda x: x[0])[:keep]
