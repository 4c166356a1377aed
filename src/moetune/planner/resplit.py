"""Re-split the pipeline ranks of the candidates a re-split could still make the fastest (planner/pipeline_balance.py
moves the layers; this picks which candidates and ranks the result as the search ranked it)."""

from moetune.layout.dsa_split import keeps_index_groups
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import fits_memory, memory_estimate_peaks, step_estimate
from moetune.planner.pipeline_balance import rebalance
from moetune.planner.ranking import cp_weight, preference, rank_key, within
from moetune.planner.search_state import Search
from moetune.walls.batch_keys import step_key
from moetune.walls.memory import memory_peaks

RESPLIT_LIMIT = 24  # most distinct layouts re-split per search (each costs a few scalar estimates, ~1-2 ms apiece)
# The re-split bound (walls/batch.py "balanced") moves only the slowest rank's decoder layers, at the step's own
# count of its runs; what else a split moves (the interleaved bubble's slowest chunk, the largest stage's DP traffic,
# the EP-overlap windows of each virtual stage) it leaves as it was, and re-splits beat it: by 0.5% (Llama-4-Scout on
# 40 B300 at 8k, PP5 VPP6 EP2 ETP2 DeepEP: bound 11.481 s, re-split 11.428 s, then in the pick's 1% band below a pick
# with heavier recompute) and by 6% (Qwen3-Next-80B-A3B on 128 H100, TP1 PP8 VPP4, force-balanced: bound 0.752 s,
# re-split 0.709 s, which moves three layers off the loss rank's chunks; the pick had been TP2 at 0.723 s). A
# candidate stays in reach while its bound is within this of the band; RESPLIT_LIMIT caps what it costs (bench/:
# DeepSeek-V3 on 1,024 H100 0.60 -> 0.69 s). Measured, not derived (a bound that also counted the EP-overlap windows and
# DP traffic a split moves would need none): re-splitting every kept candidate of 11 plans (bench/resplit_bound.py,
# 2026-11-29), the most a re-split beat its bound is 5.7% (that Qwen3-Next PP8 VPP4 EP-overlap split), 2.2% elsewhere,
# all with EP overlap; tests/planner/test_resplit_bound.py holds the slack above the Qwen3-Next case
REACH_SLACK = 0.07


def out_of_reach(reach: float, fastest: float) -> bool:
    """Whether a candidate's re-split bound leaves it out of the 1% band of `fastest`, REACH_SLACK allowed."""
    return within(reach / (1 + REACH_SLACK), fastest) > 0


def rebalance_best(s: Search, efficiency_overrides: dict | None) -> None:
    """Re-split the pipeline ranks of every kept candidate a re-split could still make the fastest: first those in the
    1% band of the fastest as they are, then in order of the step each would take with its slowest rank at the least
    any split of whole layers could make it (walls/batch.py _split_floor: no re-split beats that), until that bound
    leaves the 1% band of the fastest step found so far, where the seeds' order picks among near-ties (ranking.within,
    planner/pipeline_balance.py); at most RESPLIT_LIMIT distinct layouts, the
    other knob sets of a layout already re-split trying its split. The pick does not depend on --top; the rows after
    it are re-split by resplit_shown."""
    if not s.resplit or not s.best:  # the user pinned the layout string
        return
    fastest = min(b[0] for b in s.best)
    # the candidates already in the band of the fastest come first (the pick is one of them, or one a re-split brings
    # there), then the rest by the step a re-split could reach. A loose bound spends RESPLIT_LIMIT on layouts that
    # cannot gain: every stage at the mean of the distinct stages, where whole layers and the loss cannot be spread
    # evenly (PP16 over 61 layers), had crowded out the pick (Kimi-K2 on 1,024 GB200 at 128k: PP2, +3.2% re-split,
    # left as it was); and that mean, counting 15 alike ranks once, read GLM-4.5's PP17 splits (no MTP, 136 GB200)
    # 5.5 s against their 8.8 s, so 24 of them went first and the PP17 pick stood 4.6% behind PP34 rows shown under it
    s.best.sort(key=lambda x: (within(x[0], fastest) > 0, x[5]))
    banded = sum(within(b[0], fastest) <= 0 for b in s.best)  # the first `banded` entries are in the band
    found: dict[tuple, Layout] = {}  # (layout, mbs) -> its re-split under the knobs tried first
    for i, (step, _, lay, mbs, knobs, reach) in enumerate(s.best):
        if len(found) == RESPLIT_LIMIT:
            break
        if out_of_reach(reach, fastest):  # neither it nor any later one of its group can reach the band
            if i >= banded:
                break
            continue  # the band's rest are out of reach too, but the candidates after it are ordered by reach

        if lay.pp < 2:
            continue
        fastest = min(fastest, _resplit_entry(s, i, found, efficiency_overrides))


def resplit_shown(s: Search, shown: int, fastest: float, efficiency_overrides: dict | None) -> None:
    """Re-split the candidates that rebalance_best left as they were (out of reach of the pick) among the first
    `shown` of the ranked list, so each row plan prints is predicted at its own best split (a runner-up had read 2%
    slower than `--fix` of the same layout and knobs gives: plan audit); then, one at a time in order of their
    re-split bound, those further down that bound ranks ahead of the last row shown, so no row is missing that its
    own split would show (rebalance_best stops once the bound leaves the pick's band), up to RESPLIT_LIMIT distinct
    layouts. Only rows 1 onward are ranked again, so the pick stays the pick (where rebalance_best stopped at
    RESPLIT_LIMIT a re-split row could in principle have beaten it). Two splits of one layout may re-split to the
    same string: the later is dropped. The passes end within twice the list's length (`passes`)."""
    s.best = first_of_each(s.best)  # rebalance_best's re-splits may already coincide
    found: dict[tuple, Layout] = {}  # kept across passes: a later knob set of a layout starts from its split

    def rank(x) -> tuple:  # the seeds' order picks among near-ties
        return rank_key(x[0], x[1], fastest)

    # A pass that does not return re-splits one candidate at least (its bound cleared, _unsplit never picks it again)
    # or drops one repeat (the list only shrinks): at most len(s.best) of each, so a pass with neither, which returns,
    # comes by pass 2 * len(s.best) + 1
    passes = 2 * len(s.best) + 1
    for _ in range(passes):
        todo = _unsplit(s, shown, rank, len(found) < RESPLIT_LIMIT)
        for i in todo:
            _resplit_entry(s, i, found, efficiency_overrides)
        s.best[1:] = sorted(s.best[1:], key=rank)  # the pick stays the pick
        kept = first_of_each(s.best)
        if not todo and len(kept) == len(s.best):
            return
        s.best = kept
    # raised, not asserted: `python -O` strips asserts and the search would go on with an unsettled list
    raise RuntimeError(f"resplit_shown unsettled after {passes} passes, which cannot be: a pass that does not "
                         "return re-splits a candidate (never picked again) or drops a repeat, each at most "
                         "len(s.best) times")


def _unsplit(s: Search, shown: int, rank, further: bool) -> list[int]:
    """Places in s.best of the candidates on PP > 1 not re-split yet among the first `shown`, or else (`further`) the
    one further down whose re-split bound ranks furthest ahead of the last row shown, if any does."""
    if not s.resplit or not s.best:
        return []
    todo = [i for i, b in enumerate(s.best[:shown]) if b[5] is not None and b[2].pp >= 2]
    if todo or not further:
        return todo
    last = rank(s.best[min(shown, len(s.best)) - 1])
    below = [(rank((b[5], b[1])), i) for i, b in enumerate(s.best) if b[5] is not None and b[2].pp >= 2]
    ahead = min(below, default=None)
    return [ahead[1]] if ahead and ahead[0] < last else []


def first_of_each(best: list) -> list:
    """`best` without later repeats of a (layout, micro-batch, knobs) candidate."""
    firsts: dict = {}
    # each knob set by the first equal one met, through its object: a DeepSeek-V3 plan's 541 entries hold 35 knob sets,
    # and hashing a knob set hashes every field of it
    first_knobs: dict = {}
    by_object: dict[int, int] = {}
    for b in best:
        if (same := by_object.get(id(b[4]))) is None:
            same = by_object[id(b[4])] = id(first_knobs.setdefault(b[4], b[4]))
        firsts.setdefault((b[2], b[3], same), b)
    return list(firsts.values())


def resplit_one(s: Search, lay: Layout, mbs: int, knobs: Knobs, efficiency_overrides: dict | None) -> Layout:
    """One candidate's layout at its best split (rebalance), outside the ranked list."""
    evaluate, fits, _ = _evaluator(s, mbs, knobs, efficiency_overrides)
    return rebalance(lay, s.spec.num_layers, s.spec.mtp_num_layers, evaluate, fits, evaluate(lay))[1]


def _resplit_entry(s: Search, i: int, found: dict, efficiency_overrides: dict | None) -> float:
    """Re-split candidate `i` of s.best in place (its re-split bound cleared: done), returning its new ranked step."""
    step, _, lay, mbs, knobs, _ = s.best[i]
    evaluate, fits, peak = _evaluator(s, mbs, knobs, efficiency_overrides)
    seed = found.get((lay, mbs))  # another knob set of a layout already re-split starts from that split
    seeded = evaluate(seed) if seed else None
    weight = float(cp_weight(lay.cp, s.wl.seq_length))  # `step` is ranked as the search ranked it (search_grid._time)
    begin, start = (seed, seeded) if seeded and seeded[0] * weight < step and fits(seed) else (lay, evaluate(lay))
    new_step, new_lay = rebalance(begin, s.spec.num_layers, s.spec.mtp_num_layers, evaluate, fits, start)
    new_step *= weight
    found.setdefault((lay, mbs), new_lay)
    tight = s.best[i][1][0] if new_lay == lay else peak(new_lay) > s.roomy_bytes
    rank = preference(new_lay, knobs, s.dispatcher(new_lay), s.wl.seq_length, tight)
    s.best[i] = (new_step, rank, new_lay, mbs, knobs, None)
    return new_step


def _evaluator(s: Search, mbs: int, knobs: Knobs, efficiency_overrides: dict | None):
    """(evaluate, fits, peak) for rebalance: a layout's (step seconds, seconds a micro-batch of each pipeline rank)
    by the scalar estimate, time only; whether it fits the search's memory budget, asked only of a move rebalance
    would take; and its memory estimate's peak bytes (what fits reads, beside the host peak: the re-split's peak).
    Each layout is estimated once a kind: rebalance asks fits of a layout it has just evaluated, and the re-split's
    peak of the one fits last passed."""
    wl = Workload(seq_length=s.wl.seq_length, micro_batch_size=mbs, global_batch_size=s.wl.global_batch_size)
    held: dict[Layout, tuple[int, int]] = {}
    priced = step_key(knobs, s.gpu, s.eff)  # knob sets priced alike share their steps (Search.step_estimates)
    # the knobs with a plan's "auto" CP exchange resolved (context_parallel.resolve_auto), by the layout fields it
    # reads (world size, TP, CP, EP, ETP, SP; never the pipeline split, all that rebalance moves): estimate given them
    # resolves them to themselves, so each re-split layout skips auto_choice
    resolved: dict[tuple, Knobs] = {}

    def timed(cand: Layout) -> tuple[Knobs, float, list[float], Knobs]:
        """The time-only estimate of `cand` (step_estimate: its resolved knobs, step and stage seconds) and the knob
        set it was made under (these knobs or others priced alike)."""
        shared = (cand, mbs, priced)
        if shared not in s.step_estimates:
            mesh = (cand.world_size, cand.tp, cand.cp, cand.ep, cand.etp, cand.sp)
            e = step_estimate(s.spec, s.gpu, cand, wl, resolved.get(mesh, knobs),
                              efficiency_overrides=efficiency_overrides, eff=s.eff)
            resolved.setdefault(mesh, e[0])
            s.step_estimates[shared] = *e, knobs
        return s.step_estimates[shared]

    def evaluate(cand: Layout) -> tuple | None:
        if not keeps_index_groups(s.spec, cand):  # a split DSA index sharing refuses: rebalance passes it over
            return None
        return timed(cand)[1:3]

    def memory(cand: Layout) -> tuple[int, int]:
        """(peak bytes, host peak bytes) of `cand`'s memory estimate."""
        if cand not in held:
            # the memory estimate resolves "auto" under the shipped constants (no efficiency_overrides), so the time
            # estimate's validated and resolved knobs serve it only where the user's constants are not in play, and
            # only where it was made under these knobs (a knob set priced alike may hold other buffers)
            made = timed(cand)
            held[cand] = memory_peaks(s.spec, cand, wl, made[0], s.user_overheads, arch=s.gpu.arch) \
                if (made[3] is knobs or made[3] == knobs) and not efficiency_overrides \
                else memory_estimate_peaks(s.spec, s.gpu, cand, wl, knobs, s.user_overheads)
        return held[cand]

    return evaluate, lambda cand: fits_memory(*memory(cand), s.gpu, s.gpu), lambda cand: memory(cand)[0]
