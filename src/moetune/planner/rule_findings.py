"""An estimate's rule-table findings as `moetune check` reports them (data/rules.yaml), with the facts only an
estimate can give the rules (a CP sizing over the CPs that run, the host bytes an offload keeps, whether another
recompute, dispatcher or TP would fit), and a finding's fix re-estimated. planner/moves.py applies the Retune moves."""

from dataclasses import replace

from moetune.configio.release_context import target
from moetune.errors import MoetuneError
from moetune.layout.cp_sizing import attention_share, shard_cp, undersharded_cp
from moetune.layout.knobs import TUNED_FLEX_SMS
from moetune.planner.config_map import to_config
from moetune.planner.defaults import default_dispatcher
from moetune.planner.estimate import Estimate
from moetune.planner.from_config import from_config
from moetune.rules import evaluate
from moetune.rules.derive_layers import attention_facts
from moetune.rules.engine import vet_fixes
from moetune.walls.context_parallel import resolve_auto
from moetune.walls.cp_legal import cp_runs, exchange_text
from moetune.walls.flops import qkv_gathered


def findings(e: Estimate, *, weigh_selective: bool = True) -> list:
    """Rule-table findings of an estimate's config (data/rules.yaml), as `moetune check` reports them. The one fact
    that costs an estimate (whether selective recompute fits in place of full, read by the warning
    fit.selective_before_full) is left out with weigh_selective=False."""
    config = to_config(e) | (e.source_config or {})  # what a config states stands, as check reads it
    # the estimate's own facts only: evaluate derives the config's, and vet_fixes derives each fixed config's afresh
    # (facts derived here would pin the fixed configs to this one's: rules/derive.py derive lets `extra` win)
    derived = {**cp_sizing_facts(e), **host_facts(e), **model_facts(e),
               **({"target_release": release} if (release := target()) is not None else {})}
    if weigh_selective and e.knobs.recompute == "full" and e.stages:
        derived["fits_with_selective_recompute"] = _fits_with_selective(e)
    if weigh_selective and e.knobs.recompute == "none" and _offloads(e.knobs) and e.stages:
        derived["fits_with_selective_without_offload"] = fits_without_offload(e)
    if weigh_selective and e.stages:
        derived.update(costly_facts(e))
    found = evaluate(config, derived, context="explain")
    if e.layout.cp > 1 and default_exchange(e) == exchange_text(e.knobs, e.layout.cp):
        found = [f for f in found if f.rule != "cp.p2p_crosses_nvlink"]  # priced: the ring is the cheapest exchange
    # the findings shown: no fix that adds an error (rule_errors, which asks only the errors, skips this)
    return vet_fixes(config, found, derived, context="explain") if weigh_selective else found


def cp_sizing(e: Estimate) -> tuple[int, bool]:
    """(the 4K-shard CP, whether the run's CP is below it: rule longctx.cp_sizing) over the CPs this run would run at
    by estimate's own checks (cp_legal.cp_runs: the model's shapes, the sequence and batch rules, a CP exchange
    that runs), so the advice never names a CP that estimate refuses; the shard weighed by the model's attention
    share of its token mixers (cp_sizing.attention_share: a hybrid's Mamba and gated delta-net layers keep no keys
    and values per token)."""
    if "cp_sizing" not in e.memo:  # explain asks it three times (its rules, its Scale note, its memory facts)
        lay, seq, share = e.layout, e.workload.seq_length, attention_share(e.model.attention_mixers)
        target = shard_cp(seq, lay.tp, lay.pp, lay.world_size, cp_runs(e.model, lay, e.workload, e.gpu), sp=lay.sp,
                          share=share)
        e.memo["cp_sizing"] = (target, undersharded_cp(seq, lay.tp, lay.cp, target, share))
    return e.memo["cp_sizing"]


def cp_sizing_facts(e: Estimate) -> dict:
    """cp_sizing as the rule table's facts (derived.cp_shard_target, derived.cp_undersharded, with the attention
    mixers they weigh: derive_layers.attention_facts), which win over the config-only ones (rules/derive_layers.py
    _cp_sizing)."""
    target, under = cp_sizing(e)
    return {"cp_shard_target": target, "cp_undersharded": under, **attention_facts(e.model.attention_mixers)}


def model_facts(e: Estimate) -> dict:
    """The model's own facts the rules read: the MTP modules its checkpoint ships (derived.mtp_checkpoint_layers: rule
    model.mtp_beyond_checkpoint warns of trained ones past them), and Llama 4's attention chunk (0: none) with the
    share of the counted FLOPs its chunks skip (derived.attention_chunk, derived.chunk_skipped_pct: rule
    longctx.chunked_attention_bridge)."""
    skipped = {"chunk_skipped_pct": round(100 * e.time["counted_not_run"])} if e.time else {}
    return {"mtp_checkpoint_layers": e.model.mtp_checkpoint_layers, "attention_chunk": e.model.attention_chunk or 0,
            **skipped}


def costly_facts(e: Estimate) -> dict:
    """The rule facts that cost an estimate each (another layout or dispatcher re-estimated): findings asks them where
    it weighs them, memory_facts always."""
    return kv_groups_tp_facts(e) | dispatcher_facts(e)


def dispatcher_facts(e: Estimate) -> dict:
    """Whether the run fits on the dispatcher a plan defaults to on this layout, where the run's differs and it is a
    fused one (its buffers: walls/memory.py): rule dispatcher.platform_default advises it only where it fits, and only
    from EP 8 (its condition: no estimate below that)."""
    default = default_dispatcher(e.gpu, e.layout)
    if e.layout.ep < 8 or default == e.knobs.dispatcher or default not in TUNED_FLEX_SMS:
        return {}
    return {"fits_with_default_dispatcher": e.variant(knobs=replace(e.knobs, dispatcher=default)).fits}


def host_facts(e: Estimate) -> dict:
    """The host bytes a GPU's optimizer offload keeps where the GPU's host memory is unknown (derived.host_unchecked_*:
    rule fit.host_memory_unchecked); nothing where none is kept or the estimate checked it."""
    unchecked = e.host_peak_bytes and e.gpu.host_capacity_bytes is None
    return {"host_unchecked_bytes": e.host_peak_bytes} if unchecked else {}


def default_exchange(e: Estimate) -> str | None:
    """The CP exchange moetune defaults to on this layout (what `auto` resolves to), whatever the config chose; None
    without CP, or where no exchange runs (attention sinks past a2a's head split: exchange_refusal)."""
    if e.layout.cp == 1:
        return None
    try:
        auto = resolve_auto(e.model, e.layout, e.workload, replace(e.knobs, cp_comm_type="auto", hcp_a2a_size=None),
                            e.gpu, e.efficiency)
    except MoetuneError:
        return None
    return exchange_text(auto, e.layout.cp)


def _offloads(knobs) -> bool:
    return knobs.optimizer_offload_fraction > 0 or bool(knobs.offload_modules)


def fits_without_offload(e: Estimate) -> bool:
    """Whether the seeds' first selective set fits with no offloading in its place (rule fit.offload_before_recompute:
    offloading only where recompute is not enough)."""
    knobs = replace(e.knobs, recompute="selective", recompute_modules=first_selective(e),
                    optimizer_offload_fraction=0.0, offload_modules=frozenset())
    return e.variant(knobs=knobs).fits


def _fits_with_selective(e: Estimate) -> bool:
    """Whether the seeds' first selective set (the rule's own fix) fits in place of full recompute; TE-scoped graphs
    stay (they pair with selective recompute)."""
    return e.variant(knobs=replace(e.knobs, recompute="selective", recompute_modules=first_selective(e))).fits


def kv_groups_tp_facts(e: Estimate) -> dict:
    """Whether the layout at TP = the model's KV groups, rule scale.tp_past_kv_groups's fix, fits (its DP grows as
    its TP shrinks); where it does not, the note the rule's message ends with. Empty within the groups, or where
    that layout is refused (then vet_fixes has the say)."""
    groups = e.model.kv_groups
    if not qkv_gathered(e.model, e.layout.tp):
        return {}
    try:
        fixed = e.variant(layout=replace(e.layout, tp=groups))  # what the fix writes: the TP alone
    except MoetuneError:
        return {}
    if fixed.fits:
        return {"fits_at_kv_groups_tp": True}
    need, have = (round(b / 2**30, 1) for b in (fixed.peak_bytes, e.gpu.capacity_bytes))
    return {"fits_at_kv_groups_tp": False,
            "kv_groups_tp_note": f"; but at TP {groups} this config would need {need} GiB per rank of the {have} GiB, "
                                 "so no fix is offered: lower TP only once memory is freed elsewhere"}


def first_selective(e: Estimate) -> frozenset[str]:
    """The first selective set, as the fit rules' fixes write it (rules/derive.py first_selective_modules): moe_act
    with layernorm for a MoE model, else mlp with it (core_attn frees nothing under fused attention: rule
    fit.core_attn_fused_attention)."""
    return frozenset({"layernorm", "moe_act" if e.model.num_moe_experts else "mlp"})


def with_fix(e: Estimate, fix: dict) -> Estimate | None:
    """The estimate with a rule finding's fix (Bridge overrides) applied to its config, or None where the fixed config
    does not run as-is on this job (a layout Megatron refuses, a batch the new DP does not divide)."""
    if not fix or any(isinstance(v, str) and v.startswith("=") for v in fix.values()):
        return None  # an unresolved derived value: nothing concrete to weigh
    try:
        layout, workload, knobs = from_config({**to_config(e), **fix}, e.model)
        return e.variant(layout=layout, workload=workload, knobs=knobs)
    except (MoetuneError, ValueError, TypeError):
        return None


def rule_errors(e: Estimate, found: list | None = None) -> list[str]:
    """Rule-table errors of an estimate's config (a move that breaks a prerequisite is not offered)."""
    found = findings(e, weigh_selective=False) if found is None else found  # no error rule reads that fact
    return [f.rule for f in found if f.severity == "error"]
