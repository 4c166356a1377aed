"""One decoder layer's time per micro-batch: compute by class, each collective exposed and raw, and the host wait.

Host overhead: the CPU issues each layer's kernels (``host_us_per_layer`` per layer and micro-batch,
fitted, less the share of launches the CUDA-graph scopes capture) while the GPU runs earlier ones, so
only what exceeds the layer's GPU time (compute + exposed communication) leaves the GPU idle. The CPU
cost is per micro-batch and the GPU time grows with its tokens: small micro-batches of small models
become host-bound, as the seeds' "higher MBS, CUDA graphs" remedy implies. Plus one host sync per
MoE layer (token counts) unless a full-iteration graph removes it. walls/step.py adds the layers up into stages
and a step.
"""

from dataclasses import dataclass

import numpy as np

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import LayerKind, ModelSpec
from moetune.walls.compute import (
    Rates,
    expert_bias_seconds,
    layer_compute_seconds,
    passes,
    replayed_classes,
)
from moetune.walls.context_parallel import layer_cp
from moetune.walls.host import host_wait, layer_cpu_share
from moetune.walls.layer_comm import layer_comm


@dataclass(kw_only=True, slots=True)
class LayerTime:
    compute: dict  # seconds by class
    comm: dict  # exposed seconds by collective
    comm_raw: dict  # un-hidden seconds by collective
    host: float
    host_unpaired: float  # the host seconds with the EP all-to-all unhidden (a micro-batch EP overlap cannot pair)


def ring_attention(compute: dict, attn, slow, knobs: Knobs) -> dict:
    """`compute` with the attention a CP p2p ring runs in chunked calls charged `slow` x its one-call time
    (attention_rate.ring_slowdown), the forward replayed by core_attn or full recompute included."""
    if np.all(np.asarray(slow) == 1.0):
        return compute
    replayed = "core_attn" in replayed_classes(knobs.recompute, knobs.effective_modules, compute)
    extra = np.asarray(slow) - 1.0
    return {**compute, "core_attn": compute["core_attn"] * (1 + extra),
            "recompute": compute["recompute"] + (attn * extra if replayed else 0.0)}


def layer_time(spec: ModelSpec, kind: LayerKind, lay: Layout, ctx, gpu: GpuSpec, eff: dict, knobs: Knobs,
               r: Rates, compute: dict | None = None) -> LayerTime:
    """`compute` may be passed in when already known (the planner reuses it across communication knobs)."""
    if compute is None:
        compute = layer_compute_seconds(spec, kind, ctx, r, lay.ep, recompute=knobs.recompute,
                                        modules=knobs.effective_modules, eff=eff)
    attn = compute["core_attn"] / passes("core_attn")
    cp_raw, cp_exposed, slow, cp_replay = layer_cp(spec, kind, ctx, lay.cp, lay.tp, gpu, eff, knobs, r, attn)
    # the CP exchange runs inside core attention (Transformer Engine context_parallel.py AttnFuncWithCPAndKVP2P /
    # AttnFuncWithCPAndQKVOA2A), so a recompute that replays the attention replays its forward exchange too
    if "core_attn" in replayed_classes(knobs.recompute, knobs.effective_modules, compute):
        cp_raw, cp_exposed = cp_raw + cp_replay, cp_exposed + cp_replay
    compute = ring_attention(compute, attn, slow, knobs)
    fwd = 0.0  # the fc2 bias pass's forward seconds (none but under biased experts)
    # past the planner's compute memo (not keyed by the dispatcher and router dtype it reads); no memo of its own: a few
    # array operations (0.5% of a gpt-oss plan's time) in a layer_time both callers memoise whole by knobs (time_key)
    if spec.add_mlp_bias and kind.mlp == "moe":
        fwd, bwd = expert_bias_seconds(spec, ctx, r, knobs)
        # its replay is charged with the others' (class recompute), where the experts' forward runs again
        replays = "routed_experts" in replayed_classes(knobs.recompute, knobs.effective_modules, compute)
        compute = {**compute, "expert_bias": fwd + bwd, "recompute": compute["recompute"] + (fwd if replays else 0.0)}
    total = sum(compute.values())
    raw, exposed = layer_comm(spec, kind, lay, ctx, gpu, eff, knobs, compute, (cp_raw, cp_exposed), fwd)
    # The CPU's work to issue the layer (forward + backward) minus what CUDA graphs capture; the GPU idles
    # only for the part the layer's own GPU time does not cover (the CPU otherwise runs ahead). Counted per
    # layer, not per stage: each MoE layer makes the host wait for its token counts (TE GroupedLinear takes
    # m_splits as host integers; the alltoall dispatcher's split sizes too), so a lead does not carry over.
    cpu = eff["host_us_per_layer"] * 1e-6 * layer_cpu_share(kind, knobs.cuda_graph_scope, eff) * (
        eff["fp8_host_factor"] if knobs.fp8 else 1.0)
    # The wait itself, whatever the routing (force-balanced counts vary too: random router logits): every dispatcher
    # reads its token counts on the host (moe/token_dispatcher.py: alltoall before its EP all-to-all, HybridEP to size
    # its buffers, DeepEP's per-expert receive counts); only a full-iteration graph's sync-free path avoids it. Full
    # recompute runs the layer's forward, its dispatch included, a second time in the backward: two waits.
    sync = (eff["sync_us_per_moe_layer"] * 1e-6 * (2 if knobs.recompute == "full" else 1)
            if kind.mlp == "moe" and "full_iteration" not in knobs.cuda_graph_scope else 0.0)
    gpu_s = total + sum(exposed.values())
    host = host_wait(cpu, gpu_s, eff["host_norm"]) + sync
    unpaired = host_wait(cpu, gpu_s + raw["ep_alltoall"] - exposed["ep_alltoall"], eff["host_norm"]) + sync \
        if knobs.ep_overlap else host
    return LayerTime(compute=compute, comm=exposed, comm_raw=raw, host=host, host_unpaired=unpaired)
