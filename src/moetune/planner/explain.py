"""The seeds' first answer (seeds/000 "First Answer Checklist") filled in with one configuration's numbers:
Fit, Scale, Profile, Retune, the two Parallel Folding meshes and the platform's default mappings.

Retune is measured, not asserted: each move the seeds list (data/retune_moves.toml) is applied to the
configuration, re-estimated, and kept when it still fits and predicts a gain.
"""

import tomllib
from dataclasses import replace
from functools import cache
from importlib import resources

from moetune.errors import MoetuneError
from moetune.layout.knobs import TUNED_FLEX_SMS
from moetune.layout.layout import Layout
from moetune.layout.ranks import groups_leaving_domain
from moetune.layout.validate import SHARD_TOKENS, Workload, shard_cp
from moetune.planner.config_map import PRECISION, cp_fields, layout_fields, to_config
from moetune.planner.defaults import default_dispatcher, platform_defaults, platform_of
from moetune.planner.enumerate import enumerate_layouts, splits_for
from moetune.planner.ep_first import ep_first, ep_first_note
from moetune.planner.estimate import Estimate
from moetune.planner.fp8_evidence import applies, caveat, evidence, same_config_in_bf16
from moetune.planner.pipeline_balance import even_out, move_note, ranks_note
from moetune.planner.track_record import track_record
from moetune.rules import derive, evaluate
from moetune.walls.batch import batch_memory
from moetune.walls.batch_layouts import build_batch
from moetune.walls.compute import rates, ring_slowdown
from moetune.walls.context_parallel import EXCHANGE_WORDS, exchange_text, resolve_auto, ring_ranks
from moetune.walls.memory import merged_overheads

GIB = 1 << 30


@cache
def _moves() -> dict:
    return tomllib.loads((resources.files("moetune") / "data" / "retune_moves.toml").read_text())


# Free memory below this share of the GPU is within the estimate's own error: the one published run with a measured
# peak and a complete configuration (Qwen3-30B-A3B on 16 H100, published_runs.csv R084/R103) is predicted 3.1% high.
TIGHT_SHARE = 0.03

# Where the seeds' long-context guidance starts (seeds/002: "well past the 4K-class regime"; rule longctx.cp_sizing)
LONG_CONTEXT = 16384


def _fit(e: Estimate) -> dict:
    worst = next(s for s in e.stages if s.stage == e.worst_stage)
    top = sorted(worst.items.items(), key=lambda kv: -kv[1])[:4]
    free = (e.gpu.capacity_bytes - e.peak_bytes) / GIB
    out = {"fits": e.fits, "peak_gib": e.peak_bytes / GIB, "capacity_gib": e.gpu.capacity_bytes / GIB,
           "worst_stage": e.worst_stage, "largest_items_gib": {k: v / GIB for k, v in top}}
    if e.fits and free < TIGHT_SHARE * e.gpu.capacity_bytes / GIB:
        out["note"] = (f"tight: {free:.1f} GiB free, within the memory estimate's few-% error; "
                       f"`moetune plan --headroom {TIGHT_SHARE * e.gpu.capacity_bytes / GIB:.0f}` keeps a margin")
    return out


def _scale(e: Estimate) -> dict:
    lay = e.layout
    leaving = groups_leaving_domain(lay, e.job_domain)
    notes = []
    if e.job_domain != e.gpu.nvlink_domain and lay.world_size > e.gpu.gpus_per_node:  # a job within one node: no split
        notes.append(f"{lay.world_size} GPUs in Slurm segments of {e.job_domain // e.gpu.gpus_per_node} nodes: "
                     f"{e.job_domain} consecutive ranks share an NVLink domain (Megatron Bridge's launcher, "
                     "scripts/performance/utils/executors.py)")
    if leaving.get("tp", 0) > 0:
        notes.append(f"TP{lay.tp} leaves the {e.job_domain}-GPU NVLink domain: keep TP inside it "
                     "(seeds/000 Phase 2)")
    if leaving.get("ep", 0) > 0:
        notes.append(f"{100 * leaving['ep']:.0f}% of EP{lay.ep} peers are outside the NVLink domain: the "
                     "all-to-all rides the NIC (seeds/000 Phase 2: hot communication inside the fast interconnect)")
    seq = e.workload.seq_length
    target = shard_cp(seq, lay.tp, lay.pp, lay.world_size)
    if seq >= LONG_CONTEXT and seq // (lay.cp * lay.tp) > 2 * SHARD_TOKENS and target > lay.cp:
        notes.append(f"long context: {seq // (lay.cp * lay.tp):,} tokens per TP x CP shard; start from a 4K shard, "
                     f"CP ~= seq/(4096 x TP), here CP{target} (the nearest legal power of two; seeds/002 § Start from "
                     "a 4K shard target, rule longctx.cp_sizing)" + _weighed_cp(e, target))
    if lay.cp > 1:
        exposed = (e.time or {}).get("exposed_collectives", {}).get("cp")
        linear = " (with the Mamba/gated delta-net layers' own all-to-alls)" if e.model.mamba or e.model.gdn else ""
        notes.append(f"CP{lay.cp} exchanges attention inputs by cp_comm_type {exchange_text(e.knobs, lay.cp)}: "
                     f"{EXCHANGE_WORDS.get(e.knobs.cp_comm_type, e.knobs.cp_comm_type)}"
                     + (f"; {exposed:.2f} s a step left exposed{linear}" if exposed is not None else "")
                     + _ring_text(e)
                     + " (walls/context_parallel.py; `--cp-comm-type auto` picks the legal one that costs least)")
    if lay.pp > 1 and e.time:
        notes.append(ranks_note(e.model, e.layout, e.time))
        if move := move_note(e):
            notes.append(move)
    if lay.etp > 1 and not (lay.ep == 1 and e.knobs.routing == "dropless") and (note := ep_first_note(e)):
        notes.append(note)  # (dropless on EP 1: the routing note weighs the EP-first layout, with its imbalance)
    if lay.dp == 1 and seq >= 32768:
        notes.append("DP is squeezed to 1: long-context scaling becomes brittle (seeds/002 § Keep DP alive if "
                     "possible, rule longctx.dp_squeezed)")
    return {"attention_mesh": f"TP{lay.tp} x CP{lay.cp} x DP{lay.dp} x PP{lay.pp}",
            "moe_mesh": f"ETP{lay.etp} x EP{lay.ep} x EDP{lay.edp} x PP{lay.pp}", "vpp": lay.vpp,
            "pipeline_split": lay.split_text() or "even",
            "groups_leaving_nvlink_domain": leaving, "notes": notes}


def _weighed_cp(e: Estimate, cp: int) -> str:
    """The seeds' first guess re-estimated against this run (a plan may pick less CP because it is faster and fits)."""
    if e.time is None:
        return ""
    try:
        alt = e.variant(layout=replace(e.layout, cp=cp),
                        knobs=replace(_knobs_for(e, e.layout.ep), cp_comm_type="auto", hcp_a2a_size=None))
    except MoetuneError as err:
        return f"; not legal here: {err}"
    fits = "fits" if alt.fits else f"does not fit ({alt.peak_bytes / GIB:.1f} GiB)"
    return (f"; moetune predicts CP{cp} at {alt.time['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, {fits}, against "
            f"{e.time['tokens_per_s_per_gpu']:,.0f} here")


def _ring_text(e: Estimate) -> str:
    """What a p2p ring's chunked attention calls cost (compute.ring_slowdown), or "" without a ring."""
    ring = int(ring_ranks(e.model, e.knobs.cp_comm_type, e.layout.cp, e.layout.tp, e.job_domain, e.knobs.hcp_a2a_size))
    if ring < 2:
        return ""
    slow = ring_slowdown(e.workload.seq_length, ring, rates(e.gpu, e.knobs.precision, e.efficiency))
    return (f"; its ring of {ring} runs the attention in calls of {e.workload.seq_length // (2 * ring):,}-token "
            f"chunks, {slow:.2f}x the time of one call over the sequence")


def _profile(e: Estimate) -> dict:
    t = e.time
    walls = t["walls"]
    dominant = t["dominant_wall"] if e.fits else "memory"
    exposed = sorted(t["exposed_collectives"].items(), key=lambda kv: -kv[1])
    compute = sorted(((k, v) for k, v in t["compute_by_class"].items() if v > 0), key=lambda kv: -kv[1])
    lead = " and ".join(f"{k} {v:.2f} s" for k, v in compute[:2])
    why = {
        "memory": f"peak {e.peak_bytes / GIB:.1f} GiB exceeds {e.gpu.capacity_bytes / GIB:.1f} GiB",
        "communication": f"exposed {exposed[0][0]} {exposed[0][1]:.2f} s of a {t['step_seconds']:.2f} s step",
        "compute": f"{lead} lead{'s' if len(compute) == 1 else ''} compute ({walls['compute']:.2f} s)",
        "bubble": f"pipeline bubble (PP{e.layout.pp}-1)/(VPP{e.layout.vpp} x m={t['num_microbatches']})",
        "host": f"GPU idle while the host CPU issues kernels (Python, launches, syncs) {walls['host']:.2f} s",
    }[dominant]
    return {"dominant_wall": dominant, "why": why,
            "wall_shares": {k: v / t["step_seconds"] for k, v in walls.items()}, "routing": _routing(e)}


def _routing(e: Estimate) -> dict | None:
    """What dropless routing costs this run: the busiest expert rank's factor moetune charged, where it came from,
    and the same run force-balanced (the load factor is the least certain input of a dropless estimate)."""
    if e.knobs.routing != "dropless" or not e.model.num_moe_experts:
        return None
    if e.layout.ep == 1:
        return _expert_tp_routing(e) if e.layout.etp > 1 else None
    balanced = e.variant(knobs=replace(e.knobs, routing="force-balance", token_imbalance=None))
    source = ("--token-imbalance" if e.knobs.token_imbalance is not None else
              "default: layout/knobs.py DROPLESS_IMBALANCE, set from the force-balance/dropless pairs R151-R158")
    return {"token_imbalance": e.knobs.imbalance_at(e.layout.ep), "source": source,
            "force_balanced_tokens_per_s_per_gpu": balanced.time["tokens_per_s_per_gpu"],
            "cost": 1 - e.time["tokens_per_s_per_gpu"] / balanced.time["tokens_per_s_per_gpu"]}


def _expert_tp_routing(e: Estimate) -> dict | None:
    """Dropless on EP 1 with ETP > 1: every rank holds a slice of every expert, so no expert rank is busier than the
    mean and no imbalance is charged; the seeds' EP-first layout over the same ranks (rule scale.prefer_ep_over_etp)
    is charged it. Both figures, so a pick that keeps ETP says why."""
    alt = ep_first(e)
    if alt is None:
        return None
    return {"token_imbalance": 1.0, "source": "each rank holds a slice of every expert, none is busier",
            "ep_first_layout": alt.layout.short(),
            "ep_first_token_imbalance": alt.knobs.imbalance_at(alt.layout.ep),
            "ep_first_tokens_per_s_per_gpu": alt.time["tokens_per_s_per_gpu"], "ep_first_fits": alt.fits}


def _apply(e: Estimate, move: dict):
    """The estimate with one move applied, or None when the move does not apply or is illegal."""
    knobs, layout = e.knobs, e.layout
    changes = _knob_changes(e, move)
    if all(getattr(knobs, k) == v for k, v in changes.items()) and not move.get("layout") and not move.get("mbs"):
        return None
    mbs = e.workload.micro_batch_size * move.get("mbs", 1)
    if mbs < 1 or mbs != int(mbs):
        return None
    try:
        for key, factor in move.get("layout", {}).items():
            layout = _scaled(e.model, layout, key, getattr(layout, key) * factor)
        wl = Workload(seq_length=e.workload.seq_length, micro_batch_size=int(mbs),
                      global_batch_size=e.workload.gbs(e.layout))
        new = e.variant(layout=layout, workload=wl, knobs=replace(knobs, **changes))
        return even_out(new) if "vpp" in move.get("layout", {}) else new
    except (MoetuneError, ValueError, TypeError):
        return None


def _knob_changes(e: Estimate, move: dict) -> dict:
    """The move's knob values as the run takes them: TOML lists as the knob's own collection type, selective
    recompute modules added to those already recomputed, graph scopes Megatron refuses beside the move dropped."""
    knobs = e.knobs
    changes = {k: type(getattr(knobs, k))(v) if isinstance(v, list) else v for k, v in move.get("knobs", {}).items()}
    if changes.get("precision") == "platform_fp8":
        changes["precision"] = platform_defaults(e.gpu)["precision"]
    if changes.get("recompute") == "selective" and knobs.recompute == "selective":
        changes["recompute_modules"] = changes["recompute_modules"] | knobs.effective_modules
    if "graphs_keep" in move:
        changes["cuda_graph_scope"] = tuple(x for x in knobs.cuda_graph_scope if x in move["graphs_keep"])
    return changes


def _scaled(spec, layout: Layout, key: str, value: int) -> Layout:
    """`layout` with one size changed; a new VPP re-splits the layers the way the planner would (a layout string
    or uneven stages written for the old VPP no longer apply)."""
    if key != "vpp":
        return replace(layout, **{key: value})
    split = splits_for(spec, layout.pp, value)
    if not split:
        raise MoetuneError(f"no split of {spec.num_layers} layers over PP{layout.pp} x VPP{value}")
    cleared = {"pipeline_layout": None, "first_stage_layers": None, "last_stage_layers": None,
               "account_for_embedding": False, "account_for_loss": False}
    return replace(layout, vpp=value, **{**cleared, **split[0]})


def findings(e: Estimate) -> list:
    """Rule-table findings of an estimate's config (data/rules.yaml), as `moetune check` reports them."""
    config = to_config(e)
    derived = derive(config)
    if e.knobs.recompute == "full" and e.stages:  # fit.selective_before_full asks whether selective would do
        derived["fits_with_selective_recompute"] = _fits_with_selective(e)
    return evaluate(config, derived, context="explain")


def _fits_with_selective(e: Estimate) -> bool:
    """Whether the seeds' first selective set (the rule's own fix) fits in place of full recompute; TE-scoped graphs
    stay (they pair with selective recompute)."""
    modules = frozenset({"layernorm", "moe_act"} if e.model.num_moe_experts else {"layernorm", "core_attn"})
    return e.variant(knobs=replace(e.knobs, recompute="selective", recompute_modules=modules)).fits


def rule_errors(e: Estimate, found: list | None = None) -> list[str]:
    """Rule-table errors of an estimate's config (a move that breaks a prerequisite is not offered)."""
    return [f.rule for f in (findings(e) if found is None else found) if f.severity == "error"]


def checks(e: Estimate) -> list[dict]:
    """The rule table's errors and warnings for one configuration (`estimate` prints them with its numbers)."""
    return _checks(findings(e))


SEVERITY_ORDER = ("error", "warning", "info")


def _checks(found: list, levels: tuple[str, ...] = ("error", "warning")) -> list[dict]:
    """The findings this configuration itself raises at these levels, errors first, so an answer never hides a broken
    prerequisite (explain adds the seeds' info-level checklist items: rules.yaml `contexts: [explain]`)."""
    kept = sorted((f for f in found if f.severity in levels), key=lambda f: SEVERITY_ORDER.index(f.severity))
    return [{"rule": f.rule, "severity": f.severity, "message": f.message, "fix": f.fix} for f in kept]


def _change(move: dict, old: Estimate, new: Estimate) -> dict:
    """The move's overrides as they apply: each "<...>" placeholder of retune_moves.toml replaced by the moved
    estimate's value (a new VPP with the pipeline split that goes with it, the micro-batch, the precision recipe), and
    the CP exchange a plan's "auto" picked written out."""
    out = dict(move["overrides"])
    if "model.virtual_pipeline_model_parallel_size" in out:
        split = ("model.virtual_pipeline_model_parallel_size", "model.num_layers_in_first_pipeline_stage",
                 "model.num_layers_in_last_pipeline_stage", "model.pipeline_model_parallel_layout",
                 "model.account_for_embedding_in_pipeline_split", "model.account_for_loss_in_pipeline_split")
        out.update({k: v for k, v in layout_fields(new.layout).items() if k in split})
    if "train.micro_batch_size" in out:
        out["train.micro_batch_size"] = new.workload.micro_batch_size
    if "model.recompute_modules" in out:  # the modules the run already recomputed stay
        out["model.recompute_modules"] = sorted(new.knobs.recompute_modules)
    if "graphs_keep" in move and new.knobs.cuda_graph_scope != old.knobs.cuda_graph_scope:
        graphs = to_config(new)
        out.update({k: graphs[k] for k in ("model.cuda_graph_impl", "model.cuda_graph_scope")})
    if "mixed_precision" in out:  # the recipe's fields, as plans write them (config_map.PRECISION)
        del out["mixed_precision"]
        out.update(PRECISION[new.knobs.precision])
    if "model.cp_comm_type" in out:
        out.update({"model.cp_comm_type": new.knobs.cp_comm_type, **cp_fields(new)})
    before, after = to_config(old), to_config(new)
    out.update({k: after.get(k) for k in COMPANIONS if k not in out and before.get(k) != after.get(k)})
    return {k: None if v == "null" else v for k, v in out.items()}


# Fields a move changes besides the ones it names, written with it so that its overrides applied to the run give the
# numbers shown: precision fields (leaving FP8: the fp8 fields unset, an MXFP8-only LM head off), full recompute's
# method fields (cleared for selective recompute, as Megatron-Core requires), graph scopes dropped beside recompute,
# EP overlap turned off for a recompute it refuses
COMPANIONS = ("mixed_precision.fp8", "mixed_precision.fp8_recipe", "mixed_precision.fp4", "mixed_precision.fp4_recipe",
              "model.fp8_output_proj", "model.recompute_method", "model.recompute_num_layers",
              "model.cuda_graph_impl", "model.cuda_graph_scope", "comm_overlap.overlap_moe_expert_parallel_comm",
              "comm_overlap.delay_wgrad_compute")


def _retune(e: Estimate, found: list) -> list[dict]:
    base = e.time["tokens_per_s_per_gpu"]
    broken = set(rule_errors(e, found))  # a move is refused for the errors it adds, not for those it inherits
    out = []
    for move_id, move in _moves().items():
        if move.get("platform") and platform_of(e.gpu) not in move["platform"]:
            continue
        if move.get("when_not_fit") is not None and move["when_not_fit"] == e.fits:
            continue
        new = _apply(e, move)
        if new is None or not new.fits:
            continue
        errors = set(rule_errors(new))
        if errors - broken or (broken and errors == broken):  # on a refused run, only a move that clears an error
            continue
        gain = new.time["tokens_per_s_per_gpu"] / base - 1
        if gain > 0.005 or not e.fits:
            out.append({"rule": move_id, "change": _change(move, e, new), "predicted_gain": gain,
                        "new_tokens_per_s_per_gpu": new.time["tokens_per_s_per_gpu"],
                        "new_peak_gib": new.peak_bytes / GIB, "why": move["why"], "source": move["source"],
                        "tight": _tight(new),
                        # a move onto FP8 for a narrow model: its gain is moetune's, the published pairs measured none
                        "unconfirmed": not applies(e.model, e.knobs) and applies(new.model, new.knobs)})
    return _without_borrowed_gains(sorted(out, key=lambda r: -r["predicted_gain"]))


# Moves that change a second thing on top of another move: kept only where they beat that move alone, so a row
# never shows the other move's gain as its own (EP overlap with VPP against more virtual stages alone).
COMPOUND = {"ep_overlap_with_vpp": "more_virtual_stages", "ep_overlap_delay_wgrad": "ep_overlap"}


def _without_borrowed_gains(rows: list[dict]) -> list[dict]:
    gain = {r["rule"]: r["predicted_gain"] for r in rows}
    return [r for r in rows if r["rule"] not in COMPOUND or gain[r["rule"]] > gain.get(COMPOUND[r["rule"]], -1.0)]


# The seeds' order to make a run fit (seeds/000 Phase 1; seeds/002 Prefer selective recompute): a smaller micro-batch,
# then recompute steps applied cumulatively (the modules seeds/002 names before full recompute), offload last.
FIT_LADDER = ("smaller_micro_batch", "selective_recompute_moe_act", "selective_recompute_mla_up_proj",
              "selective_recompute_mlp", "selective_recompute_moe", "full_recompute", "optimizer_offload")


def _fit_steps(e: Estimate) -> list[dict]:
    """For a run that does not fit: the smallest model parallelism that fits with these knobs, then the ladder
    applied one step after another until it fits. A step that saves no memory or that Megatron would refuse is left
    out (the graph scopes a recompute step cannot sit beside are dropped with it: retune_moves.toml graphs_keep)."""
    steps = []
    smallest = smallest_fitting_layout(e)
    if smallest is not None:
        split = smallest.layout.split_text()
        steps.append({"step": "smallest model parallelism that fits",
                      "layout": smallest.layout.describe() + (f", {split}" if split else "")
                      + (f", cp_comm_type {exchange_text(smallest.knobs, smallest.layout.cp)}"
                         if smallest.layout.cp > 1 else ""),
                      "peak_gib": smallest.peak_bytes / GIB, "tight": _tight(smallest),
                      "tokens_per_s_per_gpu": smallest.time["tokens_per_s_per_gpu"], "source": "seeds/000 Phase 1"})
    current, broken = e, set(rule_errors(e))
    for move_id in _ladder(e):
        move = _moves()[move_id]
        new = _legal_step(current, move, broken)
        if new is None:
            continue
        steps.append({"step": move_id, "change": _change(move, current, new), "peak_gib": new.peak_bytes / GIB,
                      "fits": new.fits, "tokens_per_s_per_gpu": new.time["tokens_per_s_per_gpu"],
                      "source": move["source"], "tight": _tight(new)}
                     | ({"note": "EP overlap turned off: Megatron-Core refuses this recompute beside it"}
                        if current.knobs.ep_overlap and not new.knobs.ep_overlap else {}))
        current = new
        if new.fits:
            break
    return steps


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
    new = _apply(current, move)
    if new is not None and set(rule_errors(new)) - broken and current.knobs.ep_overlap:
        new = _apply(current.variant(knobs=replace(current.knobs, ep_overlap=False, delay_wgrad=False)), move)
    if new is None or new.peak_bytes >= current.peak_bytes or set(rule_errors(new)) - broken:
        return None
    return new


def _tight(e: Estimate) -> bool:
    """Fits, but within the memory estimate's own error of the GPU's memory."""
    return e.fits and (e.gpu.capacity_bytes - e.peak_bytes) < TIGHT_SHARE * e.gpu.capacity_bytes


def smallest_fitting_layout(e: Estimate):
    """The layout with the least model parallelism (TP x CP x PP) that fits with these knobs and micro-batch."""
    gbs = e.workload.gbs(e.layout)
    wl = Workload(seq_length=e.workload.seq_length, global_batch_size=gbs)
    mbs = e.workload.micro_batch_size
    cands = [(lay, mbs) for lay in enumerate_layouts(e.model, e.gpu, e.layout.world_size, wl, {})
             if gbs % (mbs * lay.dp) == 0]
    if not cands:
        return None
    fitting = []
    for spread in (False, True):  # experts on one rank, or over EP ranks: a defaulted dispatcher differs
        group = [c for c in cands if (c[0].ep > 1) == spread]
        if group:
            peak = batch_memory(e.model, build_batch(e.model, group), wl.seq_length, gbs,
                                _knobs_for(e, group[0][0].ep), merged_overheads(e.overheads))
            fitting += [lay for (lay, _), p in zip(group, peak) if p <= e.gpu.capacity_bytes]
    if not fitting:
        return None
    # CP is for long context (seeds/000 Phase 2): below it, TP or PP of the same size come first
    short = e.workload.seq_length < LONG_CONTEXT
    broken = set(rule_errors(e))
    for lay in sorted(fitting, key=lambda lay: (lay.tp * lay.cp * lay.pp, short and lay.cp > 1, lay.tp, lay.pp,
                                                -lay.ep, lay.etp))[:SMALLEST_TRIES]:
        knobs = _knobs_for(e, lay.ep)
        if (lay.cp, lay.tp) != (e.layout.cp, e.layout.tp):  # another CP group: its exchange is chosen for it
            knobs = replace(knobs, cp_comm_type="auto", hcp_a2a_size=None)
        try:
            alt = e.variant(layout=lay, workload=Workload(seq_length=wl.seq_length, micro_batch_size=mbs,
                                                          global_batch_size=gbs), knobs=knobs)
        except MoetuneError:
            continue
        if not set(rule_errors(alt)) - broken:  # a layout the rules refuse (HybridEP past its domain) is no answer
            return alt
    return None


# Fitting layouts tried in order for one Megatron and the seeds accept (each costs an estimate and the rule table)
SMALLEST_TRIES = 24


def _knobs_for(e: Estimate, ep: int):
    """The run's knobs on a layout of `ep`: a dispatcher the user left to the defaults is the platform's for EP > 1
    and alltoall at EP 1 (as estimate defaults it), not the one defaulted for the run's own EP."""
    if "dispatcher" not in e.defaulted:
        return e.knobs
    return replace(e.knobs, dispatcher=default_dispatcher(e.gpu, ep))


def _default_exchange(e: Estimate) -> str | None:
    """The CP exchange moetune defaults to on this layout (what `auto` resolves to), whatever the config chose."""
    if e.layout.cp == 1:
        return None
    auto = resolve_auto(e.model, e.layout, e.workload, replace(e.knobs, cp_comm_type="auto", hcp_a2a_size=None),
                        e.gpu, e.efficiency)
    return exchange_text(auto, e.layout.cp)


def explain(e: Estimate) -> dict:
    defaults = platform_defaults(e.gpu)
    fit = _fit(e)
    if not e.fits:
        fit["steps"] = _fit_steps(e)
    found = findings(e)  # the rule table is evaluated once for this configuration
    if e.layout.cp > 1 and _default_exchange(e) == exchange_text(e.knobs, e.layout.cp):
        found = [f for f in found if f.rule != "cp.p2p_crosses_nvlink"]  # priced: the ring is the cheapest exchange
    fp8 = caveat(e, same_config_in_bf16(e), "the same configuration in BF16") if applies(e.model, e.knobs) else None
    return {
        "fp8_caveat": fp8, "fp8_evidence": evidence(),
        "track_record": track_record(e.model.name, e.gpu.key, e.efficiency),
        "fit": fit, "scale": _scale(e), "profile": _profile(e), "retune": _retune(e, found),
        "checks": _checks(found, SEVERITY_ORDER),
        "meshes": {"attention": "TP x CP x DP x PP", "moe": "ETP x EP x EDP x PP", "layout": e.layout.describe()},
        "default_mappings": {"platform": platform_of(e.gpu), "dispatcher": defaults["dispatcher"],
                             "fp8_recipe": defaults["precision"], "cuda_graph_scope": defaults["cuda_graph_scope"],
                             "source": defaults["source"],
                             "flex_num_sms": TUNED_FLEX_SMS.get(defaults["dispatcher"]),
                             "flex_num_sms_source": "seeds/004 Tuning Parameters (HybridEP: the performance harness "
                                                    "uses 32; DeepEP: default 20)",
                             # with CP: the legal exchange that costs least (Megatron's own default is p2p; Bridge's
                             # gpt-oss and Qwen3 H100 recipes set a2a)
                             "cp_comm_type": _default_exchange(e),
                             "cp_comm_type_source": "walls/context_parallel.py auto_choice; Megatron-Bridge "
                                                    "docs/training/hierarchical-context-parallel.md"},
    }
