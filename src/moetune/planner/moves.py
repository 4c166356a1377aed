"""Retune and Fit moves (data/retune_moves.toml) applied to an estimate, and the Bridge overrides that make each
one: what explain offers is re-estimated, and its overrides applied to the run give the numbers shown."""

import math
import tomllib
from dataclasses import replace
from functools import cache
from importlib import resources

from moetune.configio.layout_map import LAYOUT_FIELDS, UNEVEN_SPLIT, layout_fields
from moetune.errors import MoetuneError
from moetune.layout.knobs import TUNED_FLEX_SMS
from moetune.layout.layout import Layout
from moetune.layout.param_gather import OFFLOAD_RECIPES, PARAM_RECIPES, offload_refuses_params
from moetune.layout.validate import Workload, shard_cp, undersharded_cp
from moetune.planner.config_map import PRECISION, cp_fields, to_config
from moetune.planner.defaults import default_dispatcher
from moetune.planner.enumerate import splits_for
from moetune.planner.estimate import Estimate
from moetune.planner.from_config import from_config
from moetune.planner.pipeline_balance import even_out
from moetune.rules import evaluate
from moetune.rules.engine import vet_fixes
from moetune.specs.platform import platform_defaults
from moetune.walls.context_parallel import resolve_auto
from moetune.walls.cp_legal import cp_runs, exchange_text
from moetune.walls.flops import qkv_gathered

GIB = 1 << 30

@cache
def moves() -> dict:
    return tomllib.loads((resources.files("moetune") / "data" / "retune_moves.toml").read_text())


# Free memory below this share of the GPU is within the estimate's own error: the one published run with a measured
# peak and a complete configuration (Qwen3-30B-A3B on 16 H100, published_runs.csv R084/R103) is predicted 3.1% high;
# Nemotron-3 Nano's R082, whose gradient precision is not stated, 4% high with BF16 grads (docs/memory.md).
TIGHT_SHARE = 0.03



def apply_move(e: Estimate, move: dict):
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
        new = even_out(new) if "vpp" in move.get("layout", {}) else new
    except (MoetuneError, ValueError, TypeError):
        return None
    # a move that changes nothing moetune counts (the dense-MLP recompute of a model with no dense layer) is no move
    same = new.time == e.time and [s.total for s in new.stages] == [s.total for s in e.stages]
    return None if same else new


def _knob_changes(e: Estimate, move: dict) -> dict:
    """The move's knob values as the run takes them: TOML lists as the knob's own collection type, selective
    recompute modules added to those already recomputed, graph scopes Megatron refuses beside the move dropped, FP8
    and NVFP4 weights a run states turned off beside an optimizer offload that cannot step them
    (offload_refuses_params)."""
    knobs = e.knobs
    changes = {k: type(getattr(knobs, k))(v) if isinstance(v, list) else v for k, v in move.get("knobs", {}).items()}
    if changes.get("precision") == "platform_fp8":
        changes["precision"] = platform_defaults(e.gpu)["precision"]
    if changes.get("recompute") == "selective" and knobs.recompute == "selective":
        changes["recompute_modules"] = changes["recompute_modules"] | knobs.effective_modules
    if "graphs_keep" in move:
        changes["cuda_graph_scope"] = tuple(x for x in knobs.cuda_graph_scope if x in move["graphs_keep"])
    offloads = changes.get("optimizer_offload_fraction")
    for switch in OFFLOAD_RECIPES if offloads else ():
        if offload_refuses_params(switch, getattr(knobs, switch), PARAM_RECIPES.get(knobs.precision)):
            changes[switch] = False  # BF16 weights, which the offload steps (a Bridge MXFP8 config states it so)
    return changes


def _scaled(spec, layout: Layout, key: str, value: int) -> Layout:
    """`layout` with one size changed; a new VPP re-splits the layers the way the planner would (a layout string
    or uneven stages written for the old VPP no longer apply)."""
    if key != "vpp":
        return replace(layout, **{key: value})
    split = splits_for(spec, layout.pp, value, balanced=True)  # one estimate: any VPP a balanced string places
    if not split:
        raise MoetuneError(f"no split of {spec.num_layers} layers over PP{layout.pp} x VPP{value}")
    cleared = {"pipeline_layout": None, "first_stage_layers": None, "last_stage_layers": None,
               "account_for_embedding": False, "account_for_loss": False}
    return replace(layout, vpp=value, **{**cleared, **split[0]})


def findings(e: Estimate, *, weigh_selective: bool = True) -> list:
    """Rule-table findings of an estimate's config (data/rules.yaml), as `moetune check` reports them. The one fact
    that costs an estimate (whether selective recompute fits in place of full, read by the warning
    fit.selective_before_full) is left out with weigh_selective=False."""
    config = to_config(e) | (e.source_config or {})  # what a config states stands, as check reads it
    # the estimate's own facts only: evaluate derives the config's, and vet_fixes derives each fixed config's afresh
    # (facts derived here would pin the fixed configs to this one's: rules/derive.py derive lets `extra` win)
    derived = {**cp_sizing_facts(e), **host_facts(e), **model_facts(e)}
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
    that runs), so the advice never names a CP that estimate refuses."""
    if "cp_sizing" not in e.memo:  # explain asks it three times (its rules, its Scale note, its memory facts)
        lay, seq = e.layout, e.workload.seq_length
        target = shard_cp(seq, lay.tp, lay.pp, lay.world_size, cp_runs(e.model, lay, e.workload, e.gpu), sp=lay.sp)
        e.memo["cp_sizing"] = (target, undersharded_cp(seq, lay.tp, lay.cp, target))
    return e.memo["cp_sizing"]


def cp_sizing_facts(e: Estimate) -> dict:
    """cp_sizing as the rule table's facts (derived.cp_shard_target, derived.cp_undersharded), which win over the
    config-only ones (rules/derive.py _cp_sizing)."""
    target, under = cp_sizing(e)
    return {"cp_shard_target": target, "cp_undersharded": under}


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


def move_change(move: dict, old: Estimate, new: Estimate) -> dict:
    """The move's overrides as they apply: each "<...>" placeholder of retune_moves.toml replaced by the moved
    estimate's value (a new VPP with the pipeline split that goes with it, the micro-batch, the precision recipe), and
    the CP exchange a plan's "auto" picked written out."""
    out = dict(move["overrides"])
    if "model.virtual_pipeline_model_parallel_size" in out:
        split = {LAYOUT_FIELDS[attr] for attr in ("vpp", "pipeline_layout", *UNEVEN_SPLIT)}
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
# numbers shown: precision fields (leaving FP8: the fp8 fields unset, an MXFP8-only LM head off), FP8 weights (the
# recipe preset's give way to BF16 beside a non-delayed optimizer offload and return without it: Knobs.fp8_params;
# NVFP4 weights leave with NVFP4 and give way beside any optimizer offload: Knobs.fp4_params),
# full recompute's method fields (cleared for selective recompute, as Megatron-Core requires), graph scopes dropped
# beside recompute, EP overlap turned off for a recompute it refuses
COMPANIONS = ("mixed_precision.fp8", "mixed_precision.fp8_recipe", "mixed_precision.fp4", "mixed_precision.fp4_recipe",
              "mixed_precision.fp8_param_gather", "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag",
              "mixed_precision.fp4_param_gather", "model.fp8_output_proj", "model.recompute_method",
              "model.recompute_num_layers", "model.cuda_graph_impl", "model.cuda_graph_scope",
              "comm_overlap.overlap_moe_expert_parallel_comm", "comm_overlap.delay_wgrad_compute")


def margin_gib(gpu) -> int:
    """Whole GiB of --headroom that keep a plan's picks out of `tight`: TIGHT_SHARE of the GPU's memory, rounded up."""
    return math.ceil(TIGHT_SHARE * gpu.capacity_bytes / GIB)


def tight(e: Estimate) -> bool:
    """Fits, but within the memory estimate's own error of the GPU's memory."""
    return e.fits and (e.gpu.capacity_bytes - e.peak_bytes) < TIGHT_SHARE * e.gpu.capacity_bytes


def knobs_for(e: Estimate, layout: Layout):
    """The run's knobs on another layout: a dispatcher the user left to the defaults is defaulted for that layout
    (planner/defaults.py: alltoall at EP 1 and where no flex backend spans the EP group), not the one defaulted for
    the run's own; another CP group
    (CP or TP changed) gets the exchange `auto` chooses for it."""
    knobs = dispatcher_for(e, layout)
    if (layout.cp, layout.tp) != (e.layout.cp, e.layout.tp):
        knobs = replace(knobs, cp_comm_type="auto", hcp_a2a_size=None)
    return knobs


def dispatcher_for(e: Estimate, layout: Layout):
    """The run's knobs on another layout, a defaulted dispatcher re-defaulted for its expert mesh (knobs_for): the
    default follows EP and where the group sits, and a user's own choice stays."""
    if "dispatcher" not in e.defaulted:
        return e.knobs
    return replace(e.knobs, dispatcher=default_dispatcher(e.gpu, layout))
