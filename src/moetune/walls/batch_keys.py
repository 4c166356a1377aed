"""The knob keys of the walls' memos (walls/batch.py, walls/step.py) and of the planner's re-split: which knobs change a
layer's or a stage's time, so the knob sets of a search that differ in none of them share one computation. The
dispatcher and its SMs enter as their price (comms.dispatch_price), so DeepEP and HybridEP share where a platform
prices them alike."""

from dataclasses import fields

from moetune.layout.knobs import Knobs
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import LayerKind
from moetune.walls.comms import dispatch_price

# what dispatch_price stands for in step_key
_PRICED = ("dispatcher", "flex_num_sms")
_UNPRICED = tuple(f.name for f in fields(Knobs) if f.name not in _PRICED)


def time_key(knobs: Knobs, gpu: GpuSpec, eff: dict) -> tuple:
    """Knobs that change the per-stage time (the optimizer knobs only add per-iteration terms); the router's dtype
    sizes biased experts' fc2 bias pass (compute.expert_bias_seconds); a measured token_imbalance is charged whole at
    any EP, the default less below DROPLESS_IMBALANCE_EP (Knobs.imbalance_at), so it is part of it beside routing
    (Knobs.imbalance is a function of the two, so it adds nothing to the key); dropout adds
    masks the elementwise kernels touch (compute.layer_compute_seconds)."""
    return (*_without_routed_experts(knobs), *_routed_experts_only(knobs, gpu, eff))


def layer_time_key(kind: LayerKind, knobs: Knobs, gpu: GpuSpec, eff: dict) -> tuple:
    """The knobs one layer of `kind` reads of time_key: all of them for a layer with routed experts; the others read
    none of those that act on the routed experts alone, so their figures serve every knob set that differs in those
    (DeepSeek-V3's dense layers: one computation for several dispatcher and EP-overlap sets)."""
    return time_key(knobs, gpu, eff) if kind.mlp == "moe" else _without_routed_experts(knobs)


def step_key(knobs: Knobs, gpu: GpuSpec, eff: dict) -> tuple:
    """Every knob, the dispatcher and its SMs as their price: a whole step's time (walls/step.py) is the same for
    knob sets with one key (the optimizer knobs included: they add the per-iteration terms)."""
    return (dispatch_price(knobs.dispatcher, knobs.num_sms, gpu, eff), *(getattr(knobs, n) for n in _UNPRICED))


def _without_routed_experts(knobs: Knobs) -> tuple:
    """time_key less the knobs that act on the routed experts alone: the dispatcher and its SMs (the MoE branch of
    layer_comm.layer_comm), EP overlap and delay_wgrad (a layer without an EP all-to-all has nothing to overlap, so
    layer_time.layer_time's unpaired host time is its host time), the router's dtype (compute.expert_bias_seconds)."""
    return (knobs.precision, knobs.recompute, knobs.effective_modules, knobs.cuda_graph_scope, knobs.tp_comm_overlap,
            knobs.routing, knobs.token_imbalance, knobs.hidden_dropout > 0, knobs.offload_modules,
            knobs.fp8_output_proj, knobs.cp_comm_type, knobs.hcp_a2a_size)


def _routed_experts_only(knobs: Knobs, gpu: GpuSpec, eff: dict) -> tuple:
    """The knobs of time_key that act on the routed experts alone (_without_routed_experts says why each)."""
    return (dispatch_price(knobs.dispatcher, knobs.num_sms, gpu, eff), knobs.ep_overlap, knobs.delay_wgrad,
            knobs.moe_router_dtype)
