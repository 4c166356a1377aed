"""Retune and Fit moves (data/retune_moves.toml) applied to an estimate, and the Bridge overrides that make each
one: what explain offers is re-estimated, and its overrides applied to the run give the numbers shown. The rule
findings those moves are vetted by are planner/rule_findings.py's."""

import math
from dataclasses import replace
from functools import cache

from moetune.configio.layout_map import LAYOUT_FIELDS, UNEVEN_SPLIT, layout_fields
from moetune.errors import MoetuneError
from moetune.files import shipped_toml
from moetune.layout.layout import Layout
from moetune.layout.param_gather import OFFLOAD_RECIPES, PARAM_RECIPES, offload_refuses_params
from moetune.layout.validate import Workload
from moetune.planner.config_map import cp_fields, to_config
from moetune.planner.defaults import default_dispatcher
from moetune.planner.enumerate import splits_for
from moetune.planner.estimate import Estimate
from moetune.planner.knob_fields import PRECISION
from moetune.planner.pipeline_balance import even_out
from moetune.specs.platform import platform_defaults
from moetune.units import GIB


@cache
def moves() -> dict:
    return shipped_toml("retune_moves.toml")


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
    if "mixed_precision" in out:  # the recipe's fields, as plans write them (knob_fields.PRECISION)
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
    return headroom_for(gpu.capacity_bytes)


def headroom_for(capacity_bytes: int) -> int:
    """margin_gib of a GPU of CAPACITY_BYTES (a saved result's memory.capacity_bytes)."""
    return math.ceil(TIGHT_SHARE * capacity_bytes / GIB)


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
