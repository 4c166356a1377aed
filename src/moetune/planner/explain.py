"""The seeds' first answer (seeds/000 "First Answer Checklist") filled in with one configuration's numbers:
Fit, Scale, Profile, Retune, the two Parallel Folding meshes and the platform's default mappings.

Retune is measured, not asserted: each move the seeds list (data/retune_moves.toml) is applied to the
configuration, re-estimated, and kept when it still fits and predicts a gain.
"""

from dataclasses import replace

from moetune.errors import MoetuneError
from moetune.layout.knobs import TUNED_FLEX_SMS, imbalance_source
from moetune.layout.ranks import groups_leaving_domain, members_in_domain
from moetune.layout.validate import LONG_CONTEXT, SEED_CP_GUESS, SHARD_TOKENS, shard_cp
from moetune.planner.defaults import platform_defaults, platform_of
from moetune.planner.ep_first import ep_first, ep_first_note
from moetune.planner.estimate import Estimate
from moetune.planner.fit_steps import fit_steps
from moetune.planner.fp8_evidence import applies, caveat, evidence, same_config_in_bf16
from moetune.planner.moves import (
    GIB,
    apply_move,
    cp_sizing,
    default_exchange,
    findings,
    knobs_for,
    margin_gib,
    move_change,
    moves,
    rule_errors,
    tight,
)
from moetune.planner.pipeline_balance import move_note, ranks_note
from moetune.planner.track_record import estimate_record
from moetune.walls.compute import rates, ring_slowdown
from moetune.walls.context_parallel import EXCHANGE_WORDS, exchange_text, refusal_at_cp, ring_ranks


def _fit(e: Estimate) -> dict:
    worst = next(s for s in e.stages if s.stage == e.worst_stage)
    top = sorted(worst.items.items(), key=lambda kv: -kv[1])[:4]
    free = (e.gpu.capacity_bytes - e.peak_bytes) / GIB
    out = {"fits": e.fits, "peak_gib": e.peak_bytes / GIB, "capacity_gib": e.gpu.capacity_bytes / GIB,
           "worst_stage": e.worst_stage, "largest_items_gib": {k: v / GIB for k, v in top}}
    if tight(e):
        out["note"] = (f"tight: {free:.1f} GiB free, within the memory estimate's few-% error; "
                       f"`moetune plan --headroom {margin_gib(e.gpu)}` keeps that margin")
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
    if note := _cp_sizing_note(e):
        notes.append(note)
    if lay.cp > 1:
        exposed = (e.time or {}).get("exposed_collectives", {}).get("cp")
        linear = " (with the Mamba/gated delta-net layers' own all-to-alls)" if e.model.mamba or e.model.gdn else ""
        notes.append(f"CP{lay.cp} exchanges attention inputs by cp_comm_type {exchange_text(e.knobs, lay.cp)}: "
                     f"{EXCHANGE_WORDS.get(e.knobs.cp_comm_type, e.knobs.cp_comm_type)}"
                     + (f"; {exposed:.2f} s a step left exposed{linear}" if exposed is not None else "")
                     + _ring_text(e)
                     + " (walls/context_parallel.py; `--cp-comm-type auto` picks the legal one that costs least)")
    if leaving.get("cp", 0) > 0 and (note := _cp_outside_note(e)):
        notes.append(note)
    if lay.pp > 1 and e.time:
        notes.append(ranks_note(e.model, e.layout, e.time))
        if move := move_note(e):
            notes.append(move)
    if lay.etp > 1 and not (lay.ep == 1 and e.knobs.routing == "dropless") and (note := ep_first_note(e)):
        notes.append(note)  # (dropless on EP 1: the routing note weighs the EP-first layout, with its imbalance)
    if note := _default_dispatcher_note(e):
        notes.append(note)
    if lay.dp == 1 and seq >= 32768:
        notes.append("DP is squeezed to 1: long-context scaling becomes brittle (seeds/002 § Keep DP alive if "
                     "possible, rule longctx.dp_squeezed)")
    return {"attention_mesh": f"TP{lay.tp} x CP{lay.cp} x DP{lay.dp} x PP{lay.pp}",
            "moe_mesh": f"ETP{lay.etp} x EP{lay.ep} x EDP{lay.edp} x PP{lay.pp}", "vpp": lay.vpp,
            "pipeline_split": lay.split_text() or "even",
            "groups_leaving_nvlink_domain": leaving, "notes": notes}


def _default_dispatcher_note(e: Estimate) -> str | None:
    """Where a run uses another fused dispatcher than the platform's default and the default does not fit: the
    difference is the buffers moetune charges each (data/memory_overheads.toml, estimates, not measurements), so a
    tight margin should not decide it."""
    default = platform_defaults(e.gpu)["dispatcher"]
    if e.knobs.dispatcher == default or not e.model.num_moe_experts or e.layout.ep == 1 or not e.stages:
        return None
    alt = e.variant(knobs=replace(e.knobs, dispatcher=default))
    if alt.fits:
        return None
    over = (alt.peak_bytes - alt.gpu.capacity_bytes) / GIB
    return (f"the platform's {default} does not fit here by {over:.1f} GiB, where {e.knobs.dispatcher} does: the "
            f"difference is the communication buffers moetune charges each (data/memory_overheads.toml, estimates "
            f"from the seeds, not measurements); with so little between them, measure {default} too, or keep a "
            f"margin with `moetune plan --headroom {margin_gib(e.gpu)}`")


# How moetune applies seeds/002's first guess (quoted as the seed writes it: SEED_CP_GUESS)
SHARD_READING = (f"seeds/002 § Start from a 4K shard target: \"{SEED_CP_GUESS}\"; moetune counts the shard as "
                 "TP x CP, since sequence parallelism splits each CP rank's tokens over TP as well (the seed's own "
                 "Qwen3-235B 128K NVL72 recipe trades CP for TP at TP4 x CP4), so it aims at CP ~= seq_len / "
                 "(4096 x TP)")


def _cp_sizing_note(e: Estimate) -> str | None:
    """The long-context CP advice (rule longctx.cp_sizing): the 4K-shard CP among those estimate runs, weighed against
    this run; or, where the shard is past twice 4K and no larger CP runs, why the next one does not."""
    lay, seq = e.layout, e.workload.seq_length
    shard = seq // (lay.cp * lay.tp)
    target, under = cp_sizing(e)
    if under:
        return (f"long context: {shard:,} tokens per TP x CP shard; {SHARD_READING}: here CP{target}, the nearest "
                f"power of two estimate runs (rule longctx.cp_sizing)" + _weighed_cp(e, target))
    if lay.cp > 1 and shard < SHARD_TOKENS:  # past the 4K target the other way: the pick's own trade, weighed
        return (f"{'long context' if seq >= LONG_CONTEXT else 'CP'}: {shard:,} tokens per TP x CP shard, "
                f"1/{SHARD_TOKENS / shard:g} of the seeds' 4K target (seeds/002: \"{SEED_CP_GUESS}\", which moetune "
                f"reads per TP x CP shard as CP ~= seq_len / (4096 x TP): CP{target} here); CP{lay.cp} stands on "
                "moetune's prediction, not the seeds' guess" + (_weighed_cp(e, target) if target < lay.cp else ""))
    unrestricted = shard_cp(seq, lay.tp, lay.pp, lay.world_size, sp=lay.sp)  # the sequence and the world alone
    if seq >= LONG_CONTEXT and shard > 2 * SHARD_TOKENS and unrestricted > lay.cp:
        why = refusal_at_cp(e.model, lay, e.workload, e.gpu, 2 * lay.cp)
        return (f"long context: {shard:,} tokens per TP x CP shard, {shard / SHARD_TOKENS:g}x the seeds' 4K; "
                f"{SHARD_READING}, CP{unrestricted} here, but no CP above {lay.cp} runs on this layout: "
                f"CP{2 * lay.cp}: {why}")
    return None


def _cp_outside_note(e: Estimate) -> str | None:
    """How many CP peers sit outside the job's NVLink domain, what the exchange costs, and why the layout may still
    win: the layouts that keep this CP group inside the domain (less TP, or less CP at this TP), re-estimated."""
    lay, domain, t = e.layout, e.job_domain, e.time
    outside = lay.cp - int(members_in_domain(lay.cp, lay.tp, domain))
    if outside < 1 or t is None:
        return None
    peers = (f"CP{lay.cp}'s one peer sits" if lay.cp == 2 else f"all {outside} of CP{lay.cp}'s peers sit"
             if outside == lay.cp - 1 else f"{outside} of CP{lay.cp}'s {lay.cp - 1} peers sit")
    where = (f"CP{lay.cp} alone is wider than the job's {domain}-GPU NVLink domain" if lay.cp > domain else
             f"TP{lay.tp} x CP{lay.cp} spans {lay.tp * lay.cp} ranks, the job's NVLink domain {domain}")
    total, exposed = t["collectives"].get("cp", 0.0), t["exposed_collectives"].get("cp", 0.0)
    tp_inside = next((lay.tp >> i for i in range(1, lay.tp.bit_length()) if (lay.tp >> i) * lay.cp <= domain), None)
    cp_inside = domain // lay.tp if lay.tp <= domain and 1 <= domain // lay.tp < lay.cp else None
    weighed = "; ".join(w for w in (_weighed_layout(e, tp=tp_inside) if tp_inside else "",
                                    _weighed_layout(e, cp=cp_inside) if cp_inside else "") if w)
    return (f"{peers} outside the NVLink domain ({where}): the cp_comm_type {exchange_text(e.knobs, lay.cp)} "
            f"exchange crosses the NIC, {total:.2f} s a step of which {exposed:.2f} s is exposed "
            f"({exposed / t['step_seconds']:.0%} of the step), counted in the {t['tokens_per_s_per_gpu']:,.0f} "
            "tokens/s/GPU moetune predicts here" + (f"; keeping CP inside the domain, {weighed}" if weighed else ""))


def _weighed_layout(e: Estimate, **change) -> str:
    """This run on another TP or CP, re-estimated: its tokens/s/GPU and whether it fits ("" where it does not run)."""
    try:
        layout = replace(e.layout, **change)
        alt = e.variant(layout=layout, knobs=knobs_for(e, layout))
    except MoetuneError:
        return ""
    fits = "fits" if alt.fits else f"does not fit ({alt.peak_bytes / GIB:.1f} GiB)"
    return f"TP{layout.tp} x CP{layout.cp} predicts {alt.time['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, {fits}"


def _weighed_cp(e: Estimate, cp: int) -> str:
    """The seeds' first guess re-estimated against this run (a plan may pick less CP because it is faster and fits)."""
    if e.time is None:
        return ""
    try:
        layout = replace(e.layout, cp=cp)
        alt = e.variant(layout=layout, knobs=knobs_for(e, layout))
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
        "host": _host_why(t),
    }[dominant]
    return {"dominant_wall": dominant, "why": why,
            "wall_shares": {k: v / t["step_seconds"] for k, v in walls.items()}, "routing": _routing(e)}


def _host_why(t: dict) -> str:
    """The host wall's parts: the optimizer's CPU-offloaded step, and the kernel issue (Python, launches, syncs)."""
    parts = t.get("host_by_class", {})
    if parts.get("optimizer_offload", 0.0) > parts.get("kernel_issue", 0.0):
        return (f"GPU idle while the host CPU steps the offloaded optimizer share {parts['optimizer_offload']:.2f} s "
                f"(and issues kernels {parts['kernel_issue']:.2f} s)")
    return f"GPU idle while the host CPU issues kernels (Python, launches, syncs) {t['walls']['host']:.2f} s"


def _routing(e: Estimate) -> dict | None:
    """What dropless routing costs this run: the busiest expert rank's factor moetune charged, where it came from,
    and the same run force-balanced (the load factor is the least certain input of a dropless estimate)."""
    if e.knobs.routing != "dropless" or not e.model.num_moe_experts:
        return None
    if e.layout.ep == 1:
        return _expert_tp_routing(e) if e.layout.etp > 1 else None
    balanced = e.variant(knobs=replace(e.knobs, routing="force-balance", token_imbalance=None))
    source = imbalance_source(e.knobs)
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


def checks(e: Estimate) -> list[dict]:
    """The rule table's errors and warnings for one configuration (`estimate` prints them with its numbers)."""
    return _checks(findings(e))


SEVERITY_ORDER = ("error", "warning", "info")


def _checks(found: list, levels: tuple[str, ...] = ("error", "warning")) -> list[dict]:
    """The findings this configuration itself raises at these levels, errors first, so an answer never hides a broken
    prerequisite (explain adds the seeds' info-level checklist items: rules.yaml `contexts: [explain]`)."""
    kept = sorted((f for f in found if f.severity in levels), key=lambda f: SEVERITY_ORDER.index(f.severity))
    return [{"rule": f.rule, "severity": f.severity, "message": f.message, "fix": f.fix} for f in kept]


def _retune(e: Estimate, found: list, blocked: list | None = None) -> list[dict]:
    """The single moves that predict a gain and fit, best first; those that would gain but do not fit go to
    `blocked` (each with the memory it needs), so an empty Retune can say what memory stops."""
    base = e.time["tokens_per_s_per_gpu"]
    broken = set(rule_errors(e, found))  # a move is refused for the errors it adds, not for those it inherits
    out = []
    for move_id, move in moves().items():
        if move.get("platform") and platform_of(e.gpu) not in move["platform"]:
            continue
        if move.get("from_precision") and e.knobs.precision not in move["from_precision"]:
            continue
        if move.get("when_not_fit") is not None and move["when_not_fit"] == e.fits and not broken:
            continue  # a refused run takes any move that clears its error, a memory move included
        new = apply_move(e, move)
        if new is not None and not new.fits and e.fits and blocked is not None and not set(rule_errors(new)) - broken \
                and (gain := new.time["tokens_per_s_per_gpu"] / base - 1) > 0.005:
            blocked.append({"rule": move_id, "predicted_gain": gain, "new_peak_gib": new.peak_bytes / GIB})
        if new is None or not new.fits:
            continue
        errors = set(rule_errors(new))
        if errors - broken or (broken and errors == broken):  # on a refused run, only a move that clears an error
            continue
        gain = new.time["tokens_per_s_per_gpu"] / base - 1
        if gain > 0.005 or not e.fits or broken:
            out.append({"rule": move_id, "change": move_change(move, e, new), "predicted_gain": gain,
                        "new_tokens_per_s_per_gpu": new.time["tokens_per_s_per_gpu"],
                        "new_peak_gib": new.peak_bytes / GIB, "why": move["why"], "source": move["source"],
                        "tight": tight(new),
                        # a move onto FP8 for a narrow model: its gain is moetune's, the published pairs measured none
                        "unconfirmed": not applies(e.model, e.knobs) and applies(new.model, new.knobs)})
    # on a run that does not fit, offloading comes after every other fix whatever it costs (seeds/000 Phase 1: add
    # offloading only when recompute and parallelism are still insufficient)
    last = (lambda r: "offload" in r["rule"]) if not e.fits else (lambda r: False)
    return _without_borrowed_gains(sorted(out, key=lambda r: (last(r), -r["predicted_gain"])))


# Moves that change a second thing on top of another move: kept only where they beat that move alone, so a row
# never shows the other move's gain as its own (EP overlap with VPP against more virtual stages alone).
COMPOUND = {"ep_overlap_with_vpp": "more_virtual_stages", "ep_overlap_delay_wgrad": "ep_overlap"}


def _without_borrowed_gains(rows: list[dict]) -> list[dict]:
    gain = {r["rule"]: r["predicted_gain"] for r in rows}
    return [r for r in rows if r["rule"] not in COMPOUND or gain[r["rule"]] > gain.get(COMPOUND[r["rule"]], -1.0)]


def _faster_fix(steps: list[dict], retune: list[dict]) -> dict | None:
    """The fastest single Retune move that makes a run fit without offloading (each is re-estimated and fits), where
    it beats where the seeds' ladder ends: the memory wall's fixes include a better PP layout (seeds/000 Three Walls
    table), which can cost nothing where recompute costs a fifth."""
    fixes = [r for r in retune if "offload" not in r["rule"]]
    fitted = next((s for s in steps if s.get("fits") and "change" in s), None)
    if fixes and (fitted is None or fixes[0]["new_tokens_per_s_per_gpu"] > fitted["tokens_per_s_per_gpu"]):
        return fixes[0]
    return None


def explain(e: Estimate) -> dict:
    defaults = platform_defaults(e.gpu)
    fit = _fit(e)
    if not e.fits:
        fit["steps"] = fit_steps(e)
    found = findings(e)  # the rule table is evaluated once for this configuration
    fp8 = caveat(e, same_config_in_bf16(e), "the same configuration in BF16") if applies(e.model, e.knobs) else None
    blocked: list[dict] = []
    retune = _retune(e, found, blocked)
    if not e.fits and (faster := _faster_fix(fit["steps"], retune)):
        fit["fastest_fix"] = faster
    return {
        "fp8_caveat": fp8, "fp8_evidence": evidence(),
        "track_record": estimate_record(e), **e.user_files,
        "fit": fit, "scale": _scale(e), "profile": _profile(e), "retune": retune,
        "retune_blocked_by_memory": sorted(blocked, key=lambda r: -r["predicted_gain"])[:3],
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
                             "cp_comm_type": default_exchange(e),
                             "cp_comm_type_source": "walls/context_parallel.py auto_choice; Megatron-Bridge "
                                                    "docs/training/hierarchical-context-parallel.md"},
    }
