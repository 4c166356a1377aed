"""The planner: every legal layout x micro-batch x knob set, pruned by memory, ranked by throughput.

`plan` searches in passes, offloading last: without the optimizer's CPU offload, then with it, then (MoE models)
with the routed experts' activations offloaded too; a full-recompute pick is weighed once more against optimizer
offload (offload_instead). Each pass (`_plan_once`) evaluates its candidates in numpy batches (planner/candidates.py,
search_grid.py).
Ties and near-ties (within 1%) follow the seeds' order of preference:
smaller model parallelism, selective before full recompute, no offload, the layout's default dispatcher (the
platform's where it runs: alltoall at EP 1), larger DP (seeds/000 Phase 1 and 2, seeds/004). The leading
candidates on PP > 1 then have their pipeline ranks re-split by the scalar `estimate` (planner/pipeline_balance.py),
and the winners are re-evaluated with it for their full breakdown.
"""

import time
from dataclasses import dataclass, field, replace

from moetune.collector import collector_paused
from moetune.errors import MoetuneError
from moetune.layout.cp_sizing import LONG_CONTEXT
from moetune.layout.dsa_split import refuse_unpriced
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.candidates import candidate_pairs, fitting_dp, memory_bound
from moetune.planner.enumerate import enumerate_layouts, pinned_split, tp_cp_sizes
from moetune.planner.estimate import Estimate, estimate
from moetune.planner.knob_grid import knob_grid
from moetune.planner.legal import legal_grid
from moetune.planner.moves import TIGHT_SHARE
from moetune.planner.near_tie import NearTie, near_tie
from moetune.planner.pins import carries, pins_agree
from moetune.planner.ranking import NEAR_TIE_MARGIN, rank_key, within, without_idle_delay_wgrad
from moetune.planner.release_fit import (
    layout_refusal,
    layouts_refused,
    model_lacking,
    release_grid,
    release_pins,
    runs,
)
from moetune.planner.resplit import rebalance_best, resplit_one, resplit_shown
from moetune.planner.search_grid import search_grid
from moetune.planner.search_state import Search
from moetune.planner.shape_note import shape_refusal
from moetune.planner.twins import entries_for, fold_twins
from moetune.planner.why_none import no_layout_reason, sequence_note
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import ModelSpec
from moetune.specs.platform import platform_defaults
from moetune.walls.batch_layouts import build_batch
from moetune.walls.efficiency import efficiency
from moetune.walls.overheads import merged_overheads


@dataclass(kw_only=True, slots=True)
class PlanResult:
    candidates_evaluated: int
    feasible: int
    search_seconds: float
    layouts: int
    knob_sets: int
    results: list[Estimate] = field(default_factory=list)
    # by row: the dispatcher twins folded into it (planner/twins.py), each as its own row would have shown it
    same_prediction: list[list[Estimate]] = field(default_factory=list)
    # knob sets weighed by their no-recompute twin's floor alone, not timed (search_grid._Floors), over every pass
    bounded_knob_sets: int = 0
    lightest_peak_gib: float | None = None  # least peak memory of any candidate under the lightest knobs
    lightest: str = ""  # that candidate's layout and micro-batch size
    capacity_gib: float = 0.0  # the GPU's memory
    lightest_host_gib: float | None = None  # host memory that candidate's optimizer offload needs per GPU
    lightest_state_gib: float | None = None  # where nothing fits: the least model state of any candidate
    host_capacity_gib: float | None = None  # the host memory per GPU (None: not known)
    headroom_gib: float = 0.0  # memory every candidate leaves free (plan --headroom)
    # DP sizes of otherwise legal layouts that the global batch rules out (GBS not a multiple of DP x MBS), where one
    # of that DP would fit (candidates.fitting_dp)
    gbs_excluded_dp: list[int] = field(default_factory=list)
    nvl72: bool = False  # the GPU's NVLink domain is a rack (GpuSpec.rack_scale: HybridEP's EP groups must lie in one)
    memory_fits: bool = False  # some candidate fit in memory under a searched knob set, its prerequisites aside
    gemm_note: str | None = None  # the GEMM shape an FP8/FP4 recipe refused where that kept them from running
    # the fastest candidate with the optimizer's CPU offload, where the pick recomputes whole layers and it predicts
    # OFFLOAD_NOTE_GAIN more (offload_instead)
    offload_alternative: Estimate | None = None
    # below 16k, the fastest CP > 1 layout where its prediction beats the pick's but the CP weight ranked it off the
    # list (_short_cp_alternative)
    short_cp_alternative: Estimate | None = None
    # the fastest candidate the seeds' order ranked below the pick in its 1% band, and the preference that did it
    near_tie: NearTie | None = None
    # the TP and CP sizes the sequence length itself ruled out, and the nearest length that allows them (None: none)
    sequence_note: str | None = None
    # a BF16 pick where the GEMM shapes refused every FP8/FP4 candidate that fit in memory (shape_note.py)
    shape_refusal: dict | None = None
    release: str | None = None  # the release the knob sets were bounded by (plan --megatron-core / --megatron-bridge)
    token_imbalance: float | None = None  # the dropless factor every candidate was charged (plan --token-imbalance)
    ep_sizes: tuple[int, ...] = ()  # the EP sizes of the candidates searched (ep1_note.py: an EP 1 pick among wider)
    release_lacks: tuple[str, ...] = ()  # the fields it lacks that kept knob sets out (release_fit.release_grid)


# The seeds' last resort when nothing fits (seeds/000 Phase 1: "add offloading only when recompute and parallelism
# are still insufficient"): fine-grained offloading of the routed experts' saved inputs, the largest MoE activations.
LAST_RESORT_OFFLOAD = frozenset({"expert_fc1", "moe_act"})


@collector_paused
def plan(spec: ModelSpec, gpu: GpuSpec, world: int, wl: Workload, *, fixed: dict | None = None, top: int = 5,
         routing: str = "dropless", efficiency_overrides: dict | None = None, progress=None,
         headroom_gib: float = 0.0, overheads: dict | None = None, weigh_offload: bool = True,
         release: str | None = None, token_imbalance: float | None = None) -> PlanResult:
    """The fastest candidates that fit with `headroom_gib` to spare, under the memory wall's overheads with the
    user's `overheads` figures on top; `progress(done, total)` is called once per knob set evaluated. Offloading
    comes last (seeds/000 Phase 1: "add offloading only when recompute and parallelism are still insufficient"):
    the optimizer's CPU offload is searched only when nothing fits without it, and then, for an MoE model, the
    routed experts' activations too (LAST_RESORT_OFFLOAD); a pinned offload is searched as pinned. The counts cover
    every pass run. `weigh_offload`: search the optimizer-offload alternative to a full-recompute pick
    (offload_instead; a caller that does not show it skips the search). `release`: a Megatron-Core or Bridge release
    (configio/releases.py) whose fields bound the knob sets (release_fit.py). `token_imbalance`: a measured dropless
    factor every candidate is charged at its EP (Knobs.token_imbalance, estimate's --token-imbalance); None: the
    default, which grows with EP (layout/imbalance.py)."""
    refuse_unpriced(spec, gpu.arch)  # one line before any search, not a "no layout fits"
    if release is not None:
        model_lacking(spec, gpu, release)
        fixed = {**(fixed or {}), **release_pins(spec, release, fixed or {})}
    fixed = fixed or {}
    if fixed.get("optimizer") == "muon":  # Muon runs without the optimizer's CPU offload (layout/knobs.py): no pass
        fixed = {**fixed, "optimizer_offload_fraction": [0.0]}  # or offload_instead search asks for it
    Layout(world_size=world)  # the job's size is in range before any layout is enumerated
    pins_agree(spec, fixed, routing, token_imbalance)
    if not 0 <= headroom_gib < gpu.memory_gib:
        raise MoetuneError(f"--headroom ({headroom_gib:g} GiB) must be at least 0 and below the GPU's "
                           f"{gpu.memory_gib:g} GiB")
    if "pipeline_layout" in fixed:
        pinned_split(spec, fixed["pipeline_layout"], fixed)
    passes = [fixed]
    if "optimizer_offload_fraction" not in fixed:
        passes = [{**fixed, "optimizer_offload_fraction": [0.0]}, fixed]
    # the last resort where the release runs it (fine-grained offloading came in Megatron-Core 0.16): without it,
    # nothing fits is the answer, not a refusal of a pass the user never asked for
    if "offload_modules" not in fixed and spec.num_moe_experts and (
            release is None or runs(Knobs(offload_modules=LAST_RESORT_OFFLOAD), release)):
        passes.append({**fixed, "offload_modules": LAST_RESORT_OFFLOAD})

    shared: dict = {}  # the passes' layouts and batch: they differ in the offload knobs alone (_candidates)

    def search(pinned: dict, best: int, report=None, shown: bool = weigh_offload) -> PlanResult:
        return _plan_once(spec, gpu, world, wl, fixed=pinned, top=best, routing=routing,
                          token_imbalance=token_imbalance, efficiency_overrides=efficiency_overrides,
                          progress=report, headroom_gib=headroom_gib, overheads=overheads, weigh_notes=shown,
                          shared=shared, release=release)

    done, seconds, bounded = 0, 0.0, 0
    for pinned in passes:
        result = search(pinned, top, progress)
        done, seconds = done + result.candidates_evaluated, seconds + result.search_seconds
        bounded += result.bounded_knob_sets
        if result.results:
            break
    if weigh_offload and (alt := offload_instead(result, pinned is passes[0], fixed, search)) is not None:
        done, seconds = done + alt.candidates_evaluated, seconds + alt.search_seconds
        bounded += alt.bounded_knob_sets
        result.offload_alternative = alt.results[0]
    result.candidates_evaluated, result.search_seconds, result.bounded_knob_sets = done, seconds, bounded
    return result


# The least predicted gain for which plan names the optimizer-offload alternative to a full-recompute pick
OFFLOAD_NOTE_GAIN = NEAR_TIE_MARGIN


def offload_instead(result: PlanResult, first_pass: bool, fixed: dict, search) -> PlanResult | None:
    """Where the pick recomputes whole layers and offload was not searched (nothing needed it), the same search with
    the optimizer's CPU offload, when it predicts OFFLOAD_NOTE_GAIN more: the seeds put offloading after recompute
    (seeds/000 Phase 1), and full recompute is recompute, so the pick stays; but their own DeepSeek-V3 long-context
    pattern runs selective recompute with optimizer offload (seeds/002), and at 128k on 256 H100 that predicts 18%
    over the full-recompute pick, which the user should see."""
    if not result.results or result.results[0].knobs.recompute != "full" or not first_pass \
            or "optimizer_offload_fraction" in fixed:
        return None
    alt = search({**fixed, "optimizer_offload_fraction": [1.0]}, 1, shown=False)
    base = result.results[0].time["tokens_per_s_per_gpu"]
    if alt.results and alt.results[0].time["tokens_per_s_per_gpu"] >= base * (1 + OFFLOAD_NOTE_GAIN):
        return alt
    return None


def _candidates(spec: ModelSpec, gpu: GpuSpec, world: int, wl: Workload, fixed: dict, shared: dict | None,
                release: str | None = None, token_imbalance: float | None = None) -> tuple:
    """The legal layouts, those the global batch alone rules out, the (layout, MBS) candidates and their batch (None
    without any), kept in `shared` for the plan's next pass: the passes and offload_instead's search differ in the
    offload knobs alone, which neither enumerate_layouts nor candidate_pairs reads, and the batch's memo
    (walls/batch.py, keyed by the knobs each piece depends on) then serves them all."""
    if shared is not None and "candidates" in shared:
        return shared["candidates"]
    excluded: set[Layout] = set()
    legal = enumerate_layouts(spec, gpu, world, wl, fixed, gbs_excluded=excluded)
    reasons = [layout_refusal(spec, lay, release) for lay in legal]
    layouts = [lay for lay, why in zip(legal, reasons) if why is None]
    if legal and not layouts:  # each layout refused: the one line names why, as many times as it refused
        raise MoetuneError(layouts_refused(reasons, release))
    layouts = carries(layouts, token_imbalance)
    cands = candidate_pairs(layouts, wl, fixed)
    found = layouts, excluded, cands, build_batch(spec, cands) if cands else None
    if shared is not None:
        shared["candidates"] = found
    return found


def _plan_once(spec: ModelSpec, gpu: GpuSpec, world: int, wl: Workload, *, fixed: dict, top: int, routing: str,
               token_imbalance: float | None, efficiency_overrides: dict | None, progress, headroom_gib: float,
               overheads: dict | None, weigh_notes: bool = True, shared: dict | None = None,
               release: str | None = None) -> PlanResult:
    if wl.global_batch_size is None:
        raise MoetuneError("plan needs --gbs (the global batch size fixes DP x micro-batches)")
    start = time.perf_counter()
    layouts, excluded, cands, built = _candidates(spec, gpu, world, wl, fixed, shared, release, token_imbalance)
    # layouts never searched: ruled out by GBS itself, or with no MBS choice that makes DP x MBS divide it
    searched = {lay.dp for lay, _ in cands}
    excluded = [lay for lay in excluded | set(layouts) if lay.dp not in searched]
    if not cands:
        raise MoetuneError(f"no legal layout of {spec.name} on {world} GPUs with GBS {wl.global_batch_size}: "
                           + no_layout_reason(spec, gpu, world, wl, fixed))
    defaults = platform_defaults(gpu)
    grid = knob_grid(spec, gpu, defaults, fixed, routing, token_imbalance)
    # what the release runs of each set first: the rule table then judges the sets as they will run
    grid, release_lacks = release_grid(grid, release) if release is not None else (grid, ())
    grid = legal_grid(spec, gpu, grid, wl.seq_length, optional_delay_wgrad="delay_wgrad" not in fixed,
                      optional_attn_graph="cuda_graph_scope" not in fixed)
    budget = replace(gpu, memory_gib=gpu.memory_gib - headroom_gib)  # what a candidate may use
    s = Search(spec=spec, gpu=budget, wl=wl, eff=efficiency(gpu.key, efficiency_overrides),
               resplit="pipeline_layout" not in fixed,
               overheads=merged_overheads(overheads), user_overheads=overheads, top=top,
               dispatchers=frozenset(k.dispatcher for k in grid), progress=progress, total=len(grid),
               short_cp=weigh_notes and wl.seq_length < LONG_CONTEXT,
               roomy_bytes=gpu.capacity_bytes * (1 - TIGHT_SHARE))
    batch, (least_gib, least, least_host, least_state) = memory_bound(spec, budget, built, wl, grid, s.overheads)
    excluded_dp = fitting_dp(spec, budget, excluded, wl, grid, s.overheads)
    if batch is not None:
        search_grid(s, batch, grid)
    rebalance_best(s, efficiency_overrides)
    fastest = min((b[0] for b in s.best), default=1.0)
    # within 1% of each other, candidates are ordered by the seeds' preferences
    s.best.sort(key=lambda x: rank_key(x[0], x[1], fastest))
    # the rows shown are each at their own best split (none overtakes the pick), then ranked again among themselves
    resplit_shown(s, top, fastest, efficiency_overrides)
    # dispatcher twins fold into one row (planner/twins.py): the rows shown reach `top` distinct candidates, each at
    # its own split (`shown` only grows, up to len(s.best), so this ends)
    shown, (kept, twins) = top, fold_twins(s.best)
    while (need := entries_for(s.best, kept, top)) > shown:
        shown = need
        resplit_shown(s, shown, fastest, efficiency_overrides)
        kept, twins = fold_twins(s.best)
    s.best = kept
    def result(lay, mbs, knobs) -> Estimate:  # a candidate as a row shows it, on the GPU itself
        wl_row = Workload(seq_length=wl.seq_length, micro_batch_size=mbs, global_batch_size=wl.global_batch_size)
        e = estimate(spec, gpu, lay, wl_row, replace(knobs, tp_comm_overlap=knobs.tp_comm_overlap and lay.sp),
                     overheads, efficiency_overrides=efficiency_overrides)  # Bridge: TP comm overlap off at TP 1
        return e if "delay_wgrad" in fixed else without_idle_delay_wgrad(e)

    results = [result(lay, mbs, knobs) for _, _, lay, mbs, knobs, _ in s.best[:top]]
    same = [[result(lay, mbs, k) for k in twins.get((lay, mbs, knobs), [])]
            for _, _, lay, mbs, knobs, _ in s.best[:top]]
    # named only where a caller shows it (not offload_instead's search, nor the FP8 caveat's BF16 one)
    short_cp = _short_cp_alternative(s, results, result, efficiency_overrides) if weigh_notes else None
    tie = near_tie(s, results, result, fastest, efficiency_overrides) if weigh_notes else None
    shapes = shape_refusal(s, results[0], defaults["precision"]) if weigh_notes and results else None
    return PlanResult(short_cp_alternative=short_cp, near_tie=tie, shape_refusal=shapes,
                      candidates_evaluated=len(cands) * len(grid),
                      feasible=s.feasible, search_seconds=time.perf_counter() - start, layouts=len(layouts),
                      knob_sets=len(grid), bounded_knob_sets=s.bounded,
                      results=results, same_prediction=same, lightest_peak_gib=least_gib, lightest=least,
                      lightest_host_gib=least_host, lightest_state_gib=least_state,
                      host_capacity_gib=gpu.host_memory_gib or None,
                      capacity_gib=gpu.capacity_bytes / 2**30, headroom_gib=headroom_gib,
                      gbs_excluded_dp=excluded_dp, nvl72=gpu.rack_scale,
                      memory_fits=s.memory_fits, gemm_note=None if results else s.gemm_note,
                      sequence_note=None if results else sequence_note(
                          wl.seq_length, *tp_cp_sizes(gpu, world, wl.seq_length, fixed), world),
                      release=release, release_lacks=release_lacks, token_imbalance=token_imbalance,
                      ep_sizes=tuple(sorted({lay.ep for lay, _ in cands})))


def _short_cp_alternative(s, results: list[Estimate], result, efficiency_overrides) -> Estimate | None:
    """The fastest CP > 1 candidate below the long-context regime where its own prediction beats the pick's by more
    than the near-tie band but the ranking's CP weight (ranking.cp_weight) kept it off the list: plan names it, as a
    row would show it (`result`), fitting the search's memory budget (--headroom)."""
    if not s.short_cp_best or not results or any(r.layout.cp > 1 for r in results):
        return None
    pick, best = results[0].time["step_seconds"], None
    for reach, lay, mbs, knobs in s.short_cp_best:  # the few CP candidates that could beat the pick, each re-split
        if within(pick, reach) <= 0:
            break
        if s.resplit and lay.pp > 1:  # at its own best split, as the pick is
            lay = resplit_one(s, lay, mbs, knobs, efficiency_overrides)
        alt = result(lay, mbs, knobs)
        fits = alt.fits_on(s.gpu)  # on the search's budget (--headroom), not the whole GPU it shows
        if fits and (best is None or alt.time["step_seconds"] < best.time["step_seconds"]):
            best = alt
    return best if best is not None and within(pick, best.time["step_seconds"]) > 0 else None

