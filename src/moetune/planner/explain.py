"""The seeds' first answer (seeds/000 "First Answer Checklist") filled in with one configuration's numbers:
Fit, Scale (planner/explain_scale.py), Profile, Retune (planner/explain_retune.py: each move the seeds list applied,
re-estimated, and kept when it still fits and predicts a gain), the two Parallel Folding meshes and the platform's
default mappings.
"""

from dataclasses import replace

from moetune.layout.knobs import TUNED_FLEX_SMS, imbalance_source
from moetune.planner.defaults import default_dispatcher_and_why, default_scope, mapping_fields, mapping_rules
from moetune.planner.ep_first import ep_first
from moetune.planner.estimate import Estimate
from moetune.planner.explain_retune import faster_fix, retune_rows, with_layout_moves
from moetune.planner.explain_scale import scale
from moetune.planner.fit_steps import fit_steps
from moetune.planner.fp8_evidence import applies, caveat, evidence, same_config_in_bf16
from moetune.planner.legal import knob_errors, legal_default_scope
from moetune.planner.moves import GIB, margin_gib, tight
from moetune.planner.nvfp4_evidence import caveat as nvfp4_caveat
from moetune.planner.rule_findings import default_exchange, findings, rule_errors
from moetune.planner.track_record import estimate_record
from moetune.specs.platform import platform_defaults, platform_of
from moetune.walls.compute import fp32_probs_source
from moetune.words import a_figure


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


def _profile(e: Estimate) -> dict:
    t = e.time
    walls = t["walls"]
    dominant = t["dominant_wall"] if e.fits else "memory"
    exposed = sorted(t["exposed_collectives"].items(), key=lambda kv: -kv[1])
    compute = sorted(((k, v) for k, v in t["compute_by_class"].items() if v > 0), key=lambda kv: -kv[1])
    lead = " and ".join(f"{k} {v:.2f} s" for k, v in compute[:2])
    step = f"{t['step_seconds']:.2f}"
    why = {
        "memory": f"peak {e.peak_bytes / GIB:.1f} GiB exceeds {e.gpu.capacity_bytes / GIB:.1f} GiB; of the time "
                  f"walls estimate names, {t['dominant_wall']} would dominate if it ran",
        "communication": f"exposed {exposed[0][0]} {exposed[0][1]:.2f} s of {a_figure(step)} s step",
        "compute": f"{lead} lead{'s' if len(compute) == 1 else ''} compute ({walls['compute']:.2f} s)",
        "bubble": f"pipeline bubble (PP{e.layout.pp}-1)/(VPP{e.layout.vpp} x m={t['num_microbatches']})",
        "host": _host_why(t),
    }[dominant]
    return {"dominant_wall": dominant, "why": why,
            "wall_shares": {k: v / t["step_seconds"] for k, v in walls.items()}, "routing": _routing(e),
            "expert_bias": _expert_bias(e)}


def _expert_bias(e: Estimate) -> dict | None:
    """The fc2 bias pass of biased experts (gpt-oss), where it runs: its seconds, its share of the compute wall, and
    whether its temporaries are FP32 and why (the router's dtype, or the dispatcher's cast: walls/compute.py
    fp32_probs_source)."""
    seconds = e.time["compute_by_class"].get("expert_bias")
    if not seconds:
        return None
    source = fp32_probs_source(e.knobs)
    return {"seconds": seconds, "share_of_compute": seconds / e.time["walls"]["compute"],
            "fp32_probs": source is not None, "fp32_probs_from": source,
            "moe_router_dtype": e.knobs.moe_router_dtype,
            "moe_router_dtype_defaulted": "moe_router_dtype" in e.defaulted}


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


def checks(e: Estimate, found: list | None = None) -> list[dict]:
    """The rule table's errors and warnings for one configuration (`estimate` prints them with its numbers; `found`:
    its findings where the caller has them)."""
    return _checks(findings(e) if found is None else found)


SEVERITY_ORDER = ("error", "warning", "info")


def _checks(found: list, levels: tuple[str, ...] = ("error", "warning")) -> list[dict]:
    """The findings this configuration itself raises at these levels, errors first, so an answer never hides a broken
    prerequisite (explain adds the seeds' info-level checklist items: rules.yaml `contexts: [explain]`)."""
    kept = sorted((f for f in found if f.severity in levels), key=lambda f: SEVERITY_ORDER.index(f.severity))
    return [{"rule": f.rule, "severity": f.severity, "message": f.message, "fix": f.fix,
             **({"fix_withdrawn": f.fix_withdrawn} if f.fix_withdrawn else {})} for f in kept]


def optimizer_note(e) -> str | None:
    """The optimizer where it is Muon (the tables show the searched knobs only): how it steps and what it costs."""
    if e.knobs.optimizer != "muon":
        return None
    how = "the layer-wise distributed optimizer (dist_muon)" if e.knobs.distributed_optimizer else "no sharding"
    return (f"Muon under {how}: one momentum a parameter, no optimizer offload; its step, Newton-Schulz GEMMs "
            f"included, is {e.time['compute_by_class']['optimizer_step']:.3f} s of the compute wall (walls/muon.py)")


def gbs_default_text(e: Estimate) -> str:
    """The global batch a run left out, and what it sets: MBS x DP x PP (Workload.gbs), whose micro-batches the
    pipeline bubble is shared over ((PP-1)/(VPP x m) of the useful time for interleaved 1F1B: Narayanan et al.
    2021, "Efficient Large-Scale Language Model Training on GPU Clusters", Sec. 2.2). Megatron-LM's own default is
    MBS x DP (megatron/training/arguments.py), one micro-batch a step, whose bubble a PP > 1 run would mostly be:
    said where the two differ."""
    m = e.time["num_microbatches"]
    own = e.workload.micro_batch_size * e.layout.dp
    mlm = f"; Megatron-LM's own default, MBS x DP = {own:,}, runs one micro-batch a step" if e.layout.pp > 1 else ""
    return (f"MBS x DP x PP = {e.workload.gbs(e.layout):,} ({m} micro-batch{'es' if m != 1 else ''} a step; the "
            f"bubble is (PP-1)/(VPP x {m}) of the useful time{mlm})")


def workload_of(e: Estimate) -> dict:
    """The batch priced, and which of it was left to moetune's defaults."""
    return {**e.workload_json(), "dp": e.layout.dp,
            "defaulted": [k for k in ("seq_length", "global_batch_size") if k in e.defaulted]}


def explain(e: Estimate) -> dict:
    defaults = platform_defaults(e.gpu)
    fit = _fit(e)
    found = findings(e)  # the rule table is evaluated once for this configuration
    if not e.fits:
        fit["steps"] = fit_steps(e, set(rule_errors(e, found)))
    fp8 = caveat(e, same_config_in_bf16(e), "the same configuration in BF16") if applies(e.model, e.knobs) else None
    blocked: list[dict] = []
    retune = retune_rows(e, found, blocked)
    if e.fits:
        retune = with_layout_moves(e, found, retune)
    if not e.fits and (faster := faster_fix(fit["steps"], retune)):
        fit["fastest_fix"] = faster
    dispatcher, dispatcher_note = default_dispatcher_and_why(e.gpu, e.layout)
    scope, narrowed = _default_scope(e)
    return {
        "fp8_caveat": fp8, "fp8_evidence": evidence(), "nvfp4_caveat": nvfp4_caveat(e), "optimizer": e.knobs.optimizer,
        "optimizer_note": optimizer_note(e),
        "gbs_defaulted": gbs_default_text(e) if "global_batch_size" in e.defaulted else None,
        "track_record": estimate_record(e), **e.user_files, **{k: e.time[k] for k in ("uncalibrated",) if k in e.time},
        "workload": workload_of(e), "fit": fit, "scale": scale(e, found), "profile": _profile(e), "retune": retune,
        "retune_blocked_by_memory": sorted(blocked, key=lambda r: -r["predicted_gain"])[:3],
        "checks": _checks(found, SEVERITY_ORDER),
        "meshes": {"attention": "TP x CP x DP x PP", "moe": "ETP x EP x EDP x PP", "layout": e.layout.describe()},
        # this model on this layout: EP 1 takes alltoall (no all-to-all to accelerate), a hybrid graphs its Mamba mixers
        "default_mappings": {"platform": platform_of(e.gpu), "dispatcher": dispatcher,
                             "fp8_recipe": defaults["precision"],
                             "cuda_graph_scope": list(scope),
                             "source": defaults["source"],
                             "rules": mapping_rules(defaults, e.model.mamba is not None and "mamba" in scope,
                                                    narrowed),
                             "bridge_fields": mapping_fields(dispatcher, defaults["precision"], scope),
                             "dispatcher_note": dispatcher_note,
                             "flex_num_sms": TUNED_FLEX_SMS.get(dispatcher),
                             "flex_num_sms_source": "seeds/004 Tuning Parameters: HybridEP 32 in the performance "
                                                    "harness, DeepEP 20 by default",
                             # with CP: the legal exchange that costs least (Megatron's own default is p2p; Bridge's
                             # gpt-oss and Qwen3 H100 recipes set a2a)
                             "cp_comm_type": default_exchange(e),
                             "cp_comm_type_source": "walls/context_parallel.py auto_choice; Megatron-Bridge "
                                                    "docs/training/hierarchical-context-parallel.md"},
    }


def _default_scope(e: Estimate) -> tuple[tuple[str, ...], list[str]]:
    """The platform's graph scope for this model, narrowed as estimate narrows a defaulted one (legal_default_scope;
    the model's own refusals, the user's recompute set aside), and the cudagraph rules that narrowed it."""
    base = replace(e.knobs, recompute="none", recompute_modules=frozenset(),
                   cuda_graph_scope=default_scope(e.model, e.gpu))
    seq = e.workload.seq_length
    scope = legal_default_scope(e.model, e.gpu, base, seq).cuda_graph_scope
    if scope == base.cuda_graph_scope:
        return scope, []
    return scope, [r for r in knob_errors(e.model, e.gpu, base, seq) if r.startswith("cudagraph.")]
