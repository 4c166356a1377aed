"""How much communication the overlap flags hide, window by window: EP all-to-all under
``overlap_moe_expert_parallel_comm`` (+ ``delay_wgrad_compute``) and the DP reduce-scatter / all-gather under
``overlap_grad_reduce`` / ``overlap_param_gather``. Each collective hides only under the compute that Megatron's
schedule runs beside it; step.py adds what is left exposed to the communication wall.
"""

import numpy as np

from moetune.layout.knobs import Knobs
from moetune.layout.pipeline import interleaved_warmup
from moetune.walls.compute import BWD_GEMM, passes


def ep_overlap_sides(compute: dict, bias_forward=0.0) -> tuple:
    """(attention-side forward, expert forward, expert backward, attention-side backward) seconds of a MoE layer:
    Megatron's EP-overlap schedule splits a layer into the pre-dispatch part (norms, attention, router, shared experts)
    and the routed experts (models/gpt/fine_grained_callables.py). Replays run in the backward; elementwise work splits
    as the rest. The fc2 bias pass of biased experts (compute["expert_bias"], compute.expert_bias_seconds) runs in the
    expert part at its own split, `bias_forward` its forward seconds (12 of its 28 bytes an element with BF16
    probabilities, 28 of 68 with FP32: compute.EXPERT_BIAS_BYTES), not its GEMMs' third."""
    routed, bias = compute.get("routed_experts", 0.0), compute.get("expert_bias", 0.0)
    experts = routed + bias
    rest = {k: v for k, v in compute.items() if k not in ("routed_experts", "expert_bias", "elementwise", "recompute")}
    matmul = experts + sum(rest.values())
    ew = compute.get("elementwise", 0.0)
    experts_ew = ew * experts / np.maximum(matmul, 1e-30)
    attn_f = sum(v / passes(k) for k, v in rest.items()) + (ew - experts_ew) / passes("elementwise")
    attn_b = sum(rest.values()) + (ew - experts_ew) + compute.get("recompute", 0.0) - attn_f
    gemm_f = (routed + experts_ew) / passes("routed_experts")
    return attn_f, gemm_f + bias_forward, (passes("routed_experts") - 1) * gemm_f + (bias - bias_forward), attn_b


def ep_overlap_exposed(a, compute: dict, hide: float, delay_wgrad: bool, bias_forward=0.0):
    """Exposed seconds of a MoE layer's four all-to-alls (`a` seconds each) under overlap_moe_expert_parallel_comm.
    Megatron pairs one micro-batch's layer forward with another's layer backward in three windows
    (models/common/model_chunk_schedule_plan.py, TransformerLayerSchedulePlan.run): the combine backward runs under
    the attention-side forward; the dispatch forward, then the dispatch backward, under the expert backward and
    forward; the combine forward under the attention-side backward. Each all-to-all hides only under its window's
    compute, of which `hide` is usable (the communication kernels share SMs and memory bandwidth). In the middle
    window the dispatch backward waits for the expert data gradient and the expert forward for the dispatched
    tokens: with delay_wgrad_compute the expert weight gradient runs after the data gradient, under the dispatch
    backward, and the window exposes max(2a - f - b, 0) (f: the expert forward, b: its backward, 2f for GEMMs alone);
    without it the dispatch backward waits for the whole expert backward: max(b, a) + max(f, a) - f - b.
    `bias_forward`: as ep_overlap_sides."""
    attn_f, experts_f, experts_b, attn_b = (hide * x for x in ep_overlap_sides(compute, bias_forward))
    both = experts_f + experts_b
    if delay_wgrad:
        middle = np.maximum(2 * a - both, 0.0)
    else:
        middle = np.maximum(experts_b, a) + np.maximum(experts_f, a) - both
    return np.maximum(a - attn_f, 0.0) + middle + np.maximum(a - attn_b, 0.0)


def ep_overlap_hide(eff: dict, nvlink_busy=1.0, eager=1.0):
    """The usable share of each overlap window's compute. The all-to-all's NVLink copies are SM loads and stores that
    contend with the compute beside them (`ep_overlap_hide` of it is usable while they run); its NIC transfers are
    the NIC's DMA at a tenth of the rate and take next to nothing from it, so only the `nvlink_busy` share of the
    all-to-all's duration costs (comms.nvlink_busy: 1 inside an NVLink domain). Where the combined-1F1B schedule's
    CPU work sets the pace (fast GPUs, efficiency.toml ep_overlap_hide_eager), the share is capped by the layer's
    launches a CUDA graph captures: `ep_overlap_hide_eager` with none captured (`eager` 1, the share of the layer's
    CPU work left eager: host.layer_cpu_share, efficiency.toml graph_capture_*), rising linearly to no cap with all
    of them captured."""
    share = 1 - (1 - eff["ep_overlap_hide"]) * nvlink_busy
    return np.minimum(share, eff["ep_overlap_hide_eager"] + (1 - eff["ep_overlap_hide_eager"]) * (1 - eager))


def ep_overlap_unpaired(lay, microbatches) -> float:
    """Micro-batches whose EP all-to-all has no partner to hide behind under overlap_moe_expert_parallel_comm: the
    overlap pairs one micro-batch's forward with another's backward, so the warm-up forwards and cool-down backwards
    run alone. PP=1: the first forward and the last backward, one micro-batch in all. Interleaved PP: the first
    stage warms up with 2(PP-1) + (VPP-1)PP forward chunks (Megatron-Core pipeline_parallel/schedules.py), VPP
    chunks per micro-batch. The first stage's count is taken whatever stage is slowest: its warm-up opens the
    pipeline's critical path (every later stage waits on it), while a later stage's shorter warm-up overlaps it.
    At most every micro-batch: with fewer micro-batches than the warm-up, Megatron runs all of them unpaired."""
    pp, vpp = lay.pp, lay.vpp
    return np.minimum(np.where(pp > 1, interleaved_warmup(pp, vpp) / vpp, 1.0), microbatches)


def dp_exposed_seconds(rs, ag, stage_compute, eff: dict, knobs: Knobs, stage_host=0.0, microbatches=1, step_rs=0.0,
                       step_ag=0.0):
    """DP traffic left exposed: gradients accumulate over the micro-batches, so the reduce-scatter can only run
    under the last micro-batch's backward (overlap_grad_reduce), and the parameter all-gather under the first
    one's forward (overlap_param_gather) (Megatron-Core distributed/param_and_grad_buffer.py: buckets launch when
    their last gradient is ready / before their first use). `dp_overlap_hide` of each window's time is usable: its
    compute, and the gaps where the GPU waits for the host (`stage_host`), in which the NCCL kernels run all the same
    (without them a host-bound step got faster as its compute grew); with an overlap flag off, that collective runs
    after (before) the pipeline, all exposed. An FSDP that shards the weights or gradients runs those collectives in
    every one of the `microbatches`, always beside compute (torch FSDP2's fully_shard and Megatron FSDP's pipelines
    prefetch the next layer's gather and reduce-scatter on their own streams, whatever the DDP overlap flags; Megatron
    FSDP forces both flags on for them): a gather under the forward, a gather (none where the forward's weights stay
    gathered: Knobs.microbatch_gathers) and the reduce-scatter under the backward (iteration.fsdp2_traffic,
    layout/dp_sharding.py). Megatron FSDP's once-a-step collectives (iteration.DpTraffic) share a window with them:
    `step_ag` the first micro-batch's forward, `step_rs` the last one's backward."""
    window = stage_compute + stage_host
    backward = window * BWD_GEMM / (1 + BWD_GEMM)
    hide = eff["dp_overlap_hide"]
    gathers, rs_each = knobs.microbatch_gathers, knobs.microbatch_reduce_scatters
    # every micro-batch's forward and backward carry the FSDP's own collectives (none under DDP), which always have
    # compute beside them; the first forward also carries the once-a-step all-gather and the last backward the
    # once-a-step reduce-scatter, which hide only under their overlap flag (an FSDP that shards the weights shards the
    # gradients too: a micro-batch that gathers reduce-scatters)
    forward_room = hide * (window - backward) if gathers or knobs.overlap_param_gather else 0.0
    backward_room = hide * backward if rs_each or knobs.overlap_grad_reduce else 0.0
    forward_each = ag if gathers else 0.0
    backward_each = ((gathers - 1) * ag if gathers else 0.0) + (rs if rs_each else 0.0)
    first = np.maximum(ag + step_ag - forward_room, 0.0)
    last = np.maximum(backward_each + (0.0 if rs_each else rs) + step_rs - backward_room, 0.0)
    if not (gathers or rs_each):  # the planner's usual case: skip the others' arrays of zeros
        return first + last
    each = np.maximum(forward_each - forward_room, 0.0) + np.maximum(backward_each - backward_room, 0.0)
    return first + last + (microbatches - 1) * each
