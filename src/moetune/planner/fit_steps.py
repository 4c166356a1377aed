"""The seeds' Fit steps for a run that does not fit (seeds/000 Phase 1; seeds/002 Prefer selective recompute): the
smallest model parallelism that fits, then a ladder of moves applied one on top of another until it does."""

from dataclasses import replace

from moetune.errors import MoetuneError
from moetune.layout.cp_sizing import LONG_CONTEXT
from moetune.layout.knobs import Knobs
from moetune.layout.validate import Workload, validate_optimizer_copies
from moetune.planner.config_map import to_config
from moetune.planner.enumerate import enumerate_layouts
from moetune.planner.estimate import Estimate
from moetune.planner.moves import (
    GIB,
    apply_move,
    dispatcher_for,
    knobs_for,
    move_change,
    moves,
    tight,
)
from moetune.planner.ranking import cp_weight
from moetune.planner.rule_findings import rule_errors
from moetune.walls.batch_bytes import batch_memory
from moetune.walls.batch_layouts import build_batch
from moetune.walls.cp_legal import exchange_text
from moetune.walls.overheads import merged_overheads

# The seeds' order to make a run fit (seeds/000 Phase 1; seeds/002 Prefer selective recompute): a smaller micro-batch,
# then recompute steps applied cumulatively (the modules seeds/002 names before full recompute), offload last: where
# no layout fits the run's own knobs, only once no wider layout takes the recompute steps either. First, on an FP8
# recipe whose weights are BF16 with TE's FP8 copies beside them (Hopper's blockwise preset), FP8 weights: the seeds'
# memory wall lists FP8 among its fixes (seeds/000 Phase 3) and it costs no recompute; the ladder had kept the
# recipe's BF16 weights, and explain had reached that saving only through fp8_current_scaling, whose preset turns FP8
# weights on (Qwen3-30B-A3B on 16 H100 PP2 EP4: 79.3 GiB -> 71.4 with either, the recipe change leaving blockwise).
OFFLOAD = "optimizer_offload"
FIT_LADDER = ("fp8_weights", "smaller_micro_batch", "selective_recompute_moe_act", "selective_recompute_mla_up_proj",
              "selective_recompute_mlp", "selective_recompute_moe", "full_recompute", OFFLOAD)


def fit_steps(e: Estimate, broken: set | None = None) -> list[dict]:
    """For a run that does not fit: the smallest model parallelism that fits with these knobs, then the ladder
    applied one step after another until it fits. A step that saves no memory or that Megatron would refuse is left
    out (the graph scopes a recompute step cannot sit beside are dropped with it: retune_moves.toml graphs_keep).
    `broken`: the run's own rule errors where the caller has them."""
    steps, broken = [], set(rule_errors(e)) if broken is None else broken
    smallest = smallest_fitting_layout(e, broken)
    if smallest is not None:
        steps.append(_layout_step("smallest model parallelism that fits", smallest, "these knobs"))
    current, passed = e, [e]
    for move_id in _ladder(e):
        if move_id == OFFLOAD and smallest is None and (wider := _first_wider(passed, broken)):
            return _with_layout(steps, *wider)  # seeds/000: offload only when parallelism is still insufficient
        move = moves()[move_id]
        new = _legal_step(current, move, broken)
        if new is None:
            continue
        steps.append(_step(move_id, move_change(move, current, new), new, move["source"])
                     | ({"note": "EP overlap turned off: Megatron-Core refuses this recompute beside it"}
                        if current.knobs.ep_overlap and not new.knobs.ep_overlap else {}))
        current = new
        passed.append(new)
        if new.fits:
            break
    if smallest is None and not current.fits and current is not e and (wider := _first_wider(passed, broken)):
        return _with_layout(steps, *wider)  # nor the ladder on its own layout: the two together
    if current.fits and current.knobs.optimizer_offload_fraction > e.knobs.optimizer_offload_fraction:
        if lighter := _lighter_recompute(current, passed[:-2], broken):
            steps.append(_step("lighter_recompute_with_offload", _config_change(current, lighter), lighter,
                               "seeds/000 Phase 1: full recompute only when the run still does not fit"))
    return steps


def _first_wider(passed: list[Estimate], broken: set) -> tuple[int, Estimate] | None:
    """(its index, the layout) for the first of the ladder's states after the run's own with a layout that fits
    (smallest_fitting_layout), where none fits the run's own knobs."""
    for i, state in enumerate(passed[1:], start=1):
        if (wider := smallest_fitting_layout(state, broken)) is not None:
            return i, wider
    return None


def _with_layout(steps: list[dict], i: int, wider: Estimate) -> list[dict]:
    """The ladder's steps up to the i-th state, then the smallest model parallelism that fits with its knobs."""
    return steps[:i] + [_layout_step("then the smallest model parallelism that fits", wider, "the steps' knobs")]


def _layout_step(name: str, smallest: Estimate, knobs: str) -> dict:
    """A step to the layout smallest_fitting_layout found, its split, CP exchange and the run's global batch (kept:
    a re-estimate that leaves --gbs out takes MBS x DP x PP)."""
    lay = smallest.layout
    split = lay.split_text()
    return {"step": name,
            "layout": lay.describe() + (f", {split}" if split else "")
            + (f", cp_comm_type {exchange_text(smallest.knobs, lay.cp)}" if lay.cp > 1 else "")
            + f", GBS {smallest.workload.gbs(lay):,}",
            "peak_gib": smallest.peak_bytes / GIB, "tight": tight(smallest),
            "tokens_per_s_per_gpu": smallest.time["tokens_per_s_per_gpu"],
            "source": f"seeds/000 Phase 1; the fastest of that size with {knobs}: `moetune plan` weighs every layout "
                      "and knob set"}


def _step(name: str, change: dict, new: Estimate, source: str) -> dict:
    return {"step": name, "change": change, "peak_gib": new.peak_bytes / GIB, "fits": new.fits,
            "tokens_per_s_per_gpu": new.time["tokens_per_s_per_gpu"], "source": source, "tight": tight(new)}


def _config_change(old: Estimate, new: Estimate) -> dict:
    """The Bridge overrides that take `old`'s config to `new`'s (None: unset)."""
    before, after = to_config(old), to_config(new)
    return {k: after.get(k) for k in sorted(before.keys() | after.keys()) if before.get(k) != after.get(k)}


def _lighter_recompute(offloaded: Estimate, earlier: list[Estimate], broken: set):
    """Once offloading made the run fit, the lightest recompute of the ladder's earlier steps that still fits beside
    it (the offload may have made full recompute unnecessary): the step before the offload is the one the offload
    was added to, so only those before it are tried, lightest first."""
    for state in earlier:
        knobs = replace(state.knobs, optimizer_offload_fraction=offloaded.knobs.optimizer_offload_fraction,
                        fp8_param_gather=offloaded.knobs.fp8_param_gather,  # the weights the offload keeps
                        fp4_param_gather=offloaded.knobs.fp4_param_gather)
        alt = offloaded.variant(knobs=knobs, workload=state.workload)
        if alt.fits and not set(rule_errors(alt)) - broken and \
                alt.time["tokens_per_s_per_gpu"] > offloaded.time["tokens_per_s_per_gpu"]:
            return alt
    return None


def _ladder(e: Estimate):
    """FIT_LADDER for this run: the micro-batch halved as often as it goes (down to 1), MLA's step only for MLA."""
    for move_id in FIT_LADDER:
        if move_id == "smaller_micro_batch":
            yield from [move_id] * max(e.workload.micro_batch_size.bit_length() - 1, 0)
        elif move_id != "selective_recompute_mla_up_proj" or e.model.mla is not None:
            yield move_id


def _legal_step(current: Estimate, move: dict, broken: set):
    """The step applied, or None when it saves no memory or adds a rule error; a recompute Megatron refuses beside
    EP overlap (moe, full) is taken with the overlap off."""
    new = apply_move(current, move)
    if new is not None and set(rule_errors(new)) - broken:  # the rule table once per candidate
        if not current.knobs.ep_overlap:
            return None
        new = apply_move(current.variant(knobs=replace(current.knobs, ep_overlap=False, delay_wgrad=False)), move)
        if new is not None and set(rule_errors(new)) - broken:
            return None
    return None if new is None or new.peak_bytes >= current.peak_bytes else new


def smallest_fitting_layout(e: Estimate, broken: set | None = None):
    """The layout with the least model parallelism (TP x CP x PP) that fits with these knobs and micro-batch and adds
    no rule error to `broken` (the run's own, computed here when not given)."""
    gbs = e.workload.gbs(e.layout)
    wl = Workload(seq_length=e.workload.seq_length, global_batch_size=gbs)
    mbs = e.workload.micro_batch_size
    cands = [(lay, mbs) for lay in enumerate_layouts(e.model, e.gpu, e.layout.world_size, wl, {})
             if gbs % (mbs * lay.dp) == 0 and _copies_split(e, lay)]
    if not cands:
        return None
    # one batch per dispatcher the candidates run (a defaulted one follows EP and where its group sits: alltoall at
    # EP 1 and past an NVL72 rack, HybridEP inside it), whose buffers differ; it depends on the expert mesh alone, so
    # it is asked once a mesh, of its first layout
    mesh_knobs: dict[tuple[int, int], Knobs] = {}
    by_dispatcher: dict[str, tuple] = {}
    for lay, m in cands:
        if (mesh := (lay.ep, lay.etp)) not in mesh_knobs:
            mesh_knobs[mesh] = dispatcher_for(e, lay)
        by_dispatcher.setdefault(mesh_knobs[mesh].dispatcher, (mesh_knobs[mesh], []))[1].append((lay, m))
    fitting = []
    for knobs, group in by_dispatcher.values():
        peak = batch_memory(e.model, build_batch(e.model, group), wl.seq_length, gbs, knobs,
                            merged_overheads(e.overheads), arch=e.gpu.arch)
        fitting += [lay for (lay, _), p in zip(group, peak) if p <= e.gpu.capacity_bytes]
    if not fitting:
        return None
    # CP is for long context (seeds/000 Phase 2): below it, less CP comes first among layouts of the same size
    short = e.workload.seq_length < LONG_CONTEXT
    broken = set(rule_errors(e)) if broken is None else broken
    size = min(lay.tp * lay.cp * lay.pp for lay in fitting)
    smallest = sorted((lay for lay in fitting if lay.tp * lay.cp * lay.pp == size),
                      key=lambda lay: (lay.cp if short else 0, lay.tp, lay.pp, -lay.ep, lay.etp))
    found = []
    for lay in smallest[:SMALLEST_TRIES]:
        try:
            alt = e.variant(layout=lay, workload=Workload(seq_length=wl.seq_length, micro_batch_size=mbs,
                                                          global_batch_size=gbs), knobs=knobs_for(e, lay))
        except MoetuneError:
            continue
        if not set(rule_errors(alt)) - broken:  # a layout the rules refuse (HybridEP past its domain) is no answer
            found.append(alt)
    # of that size, the fastest (seeds/000 Phase 2 then weighs DP, the NVLink domain and EP over expert TP, which the
    # step time prices), CP > 1 at short sequences ranked as plan ranks it (ranking.cp_weight); the first in the
    # order above on a tie
    return max(found, key=lambda a: a.time["tokens_per_s_per_gpu"] / float(cp_weight(a.layout.cp,
                                                                                    a.workload.seq_length)),
               default=None)


def _copies_split(e: Estimate, layout) -> bool:
    """Whether the run's hybrid-sharded optimizer copies (num_distributed_optimizer_instances) split `layout`'s DP x CP
    and EDP evenly, as Megatron asserts; on a layout they do not, the memory wall would shard over none of its ranks
    (a division by zero that sized its weights at nothing)."""
    try:
        validate_optimizer_copies(layout, e.knobs)
    except MoetuneError:
        return False
    return True


# Fitting layouts of the least model parallelism weighed (each costs an estimate and the rule table)
SMALLEST_TRIES = 24
