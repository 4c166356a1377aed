"""Step time = compute + exposed communication + pipeline bubble + host overhead, per wall.

Per micro-batch, the slowest pipeline stage's layers set the pace: an iteration of ``m`` micro-batches
takes ``(m + (PP-1)/VPP) * t_stage`` (the bubble is ``(PP-1)/(VPP*m)`` of the useful time), plus the
data-parallel gradient reduce-scatter / parameter all-gather left exposed and the optimizer step.
Each layer's compute, exposed communication and host time: walls/layer_time.py.
"""

from typing import NamedTuple

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.ranks import job_gpu
from moetune.layout.validate import Workload, tokens_per_gpu
from moetune.memo import remembered_stages
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import ModelSpec
from moetune.walls.activations import ActivationContext
from moetune.walls.attention_rate import chunked_attention_flops
from moetune.walls.batch_keys import step_key
from moetune.walls.comms import p2p_bandwidth, p2p_seconds
from moetune.walls.compute import (
    Rates,
    heads_seconds,
    rates,
)
from moetune.walls.dsa import UNCALIBRATED
from moetune.walls.iteration import dp_raw_seconds, stage_iteration_terms
from moetune.walls.layer_time import layer_time
from moetune.walls.memory import activation_context
from moetune.walls.model_flops import megatron_model_flops, tflops_per_gpu
from moetune.walls.overlap import dp_exposed_seconds, ep_overlap_unpaired
from moetune.walls.rank_params import held_kinds, model_padded_vocab, stage_params, stage_structures


def _add(acc: dict, new: dict, times: float = 1.0) -> None:
    for k, v in new.items():
        acc[k] = acc.get(k, 0.0) + v * times


# Layer times by (model, the layout's sizes, micro-batch shape, knobs, GPU, constants), then by layer kind: a layer's
# time does not depend on which pipeline stage holds it, so the planner's re-split, which moves layers between the
# ranks of one layout, reuses them (moetune/memo.py; read only: _stage_time adds them up into new dicts). Beside them,
# a stage's times by what it holds (rank_params.StageStructure.held) and the pipeline's depth (its send/recv): a
# layout's middle ranks hold the same, and a re-split asks again for every rank a move left alone. The knobs are keyed
# as batch_keys.step_key prices them (DeepEP's layer times serve HybridEP where a platform prices them alike). The
# outer key, whose knobs, GPU and constants take a while to hash, is hashed once a call, not once a stage and kind.
_LAYER_TIMES: dict = {}


class _StageMemo(NamedTuple):
    """A _LAYER_TIMES entry (_memo)."""

    by_kind: dict  # LayerTime by layer kind
    by_stage: dict  # a stage's times by (what it holds, PP)
    by_pp: dict  # _stage_parts by PP
    terms: dict  # _step's iteration terms by PP, VPP, micro-batches and the largest stage's parameters


def stage_times(spec: ModelSpec, lay: Layout, wl: Workload, knobs: Knobs, gpu: GpuSpec, eff: dict,
                copies: bool = True) -> list[dict]:
    """Per stage: seconds per micro-batch by wall and by class (each stage its own dict; the dicts inside are shared
    with the memo: read only; copies=False: the stage dicts too, for a caller that only reads them)."""
    return _stage_times(spec, lay, wl, knobs, gpu, eff, _memo(spec, lay, wl, knobs, gpu, eff), copies)


def _memo(spec: ModelSpec, lay: Layout, wl: Workload, knobs: Knobs, gpu: GpuSpec, eff: dict) -> _StageMemo:
    """The _LAYER_TIMES entry of this layout's sizes, knobs, GPU and constants: (layer times by kind, stage times by
    what a stage holds and PP, _stage_parts by PP, _step's iteration terms by PP, VPP, micro-batches and the largest
    stage's parameters). The _stage_parts are alike for every split of a depth and every knob set of the key but for
    the layout and knobs themselves, which a call puts in its own; iteration.py's terms read nothing else of them."""
    shape = (spec, lay.world_size, lay.tp, lay.cp, lay.ep, lay.etp, lay.sp, wl.seq_length, wl.micro_batch_size,
             step_key(knobs, gpu, eff), gpu, tuple(eff.items()))  # a dict's items in its order: equal ones, one key
    return remembered_stages(_LAYER_TIMES, shape, lambda: _StageMemo({}, {}, {}, {}), 1024)


def _stage_times(spec: ModelSpec, lay: Layout, wl: Workload, knobs: Knobs, gpu: GpuSpec, eff: dict,
                 memo: _StageMemo, copies: bool) -> list[dict]:
    by_kind, by_stage, by_pp = memo.by_kind, memo.by_stage, memo.by_pp
    parts = None  # worked out once a call
    out = []
    for st in stage_structures(spec, lay):  # each stage's layers by kind, counted once a layout (rank_params.py)
        held = (st.held, lay.pp)
        if held not in by_stage:
            if parts is None:
                if lay.pp not in by_pp:
                    by_pp[lay.pp] = _stage_parts(spec, lay, wl, knobs, gpu, eff)
                parts = by_pp[lay.pp]._replace(lay=lay, knobs=knobs)
            by_stage[held] = _stage_time(spec, st, parts, by_kind)
        out.append(dict(by_stage[held]) if copies else by_stage[held])
    return out


class _StageParts(NamedTuple):
    """What stage_times works a stage's time out of, alike for every stage of a layout."""

    lay: Layout
    knobs: Knobs
    gpu: GpuSpec
    eff: dict
    ctx: ActivationContext
    r: Rates
    vocab: int
    p2p: float  # the stage-boundary send/recv: PP and the link are the layout's


def _stage_parts(spec: ModelSpec, lay: Layout, wl: Workload, knobs: Knobs, gpu: GpuSpec, eff: dict) -> _StageParts:
    ctx = activation_context(lay, wl, knobs)
    return _StageParts(lay, knobs, gpu, eff, ctx, rates(gpu, knobs.precision, eff, fp8_head=knobs.fp8_output_proj),
                       model_padded_vocab(spec, lay.tp),
                       p2p_seconds(spec, ctx, lay.pp, p2p_bandwidth(lay.pp, lay.world_size, gpu, eff)))


def _stage_time(spec: ModelSpec, st, parts: _StageParts, by_kind: dict) -> dict:
    """One stage's seconds a micro-batch (stage_times), its layer times taken from, or added to, `by_kind`."""
    compute, comm, raw, host, host_unpaired = {}, {}, {}, 0.0, 0.0
    for kind, n in held_kinds(spec, st).items():
        if kind not in by_kind:
            by_kind[kind] = layer_time(spec, kind, parts.lay, parts.ctx, parts.gpu, parts.eff, parts.knobs, parts.r)
        t = by_kind[kind]
        _add(compute, t.compute, n), _add(comm, t.comm, n), _add(raw, t.comm_raw, n)
        host, host_unpaired = host + t.host * n, host_unpaired + t.host_unpaired * n
    heads = st.outputs + st.mtp_layers
    compute["logits"] = heads_seconds(spec, parts.ctx.tokens, heads, parts.lay.tp, parts.vocab, parts.r)
    raw["pp_p2p"] = parts.p2p
    comm["pp_p2p"] = raw["pp_p2p"] * parts.eff["p2p_exposed"]
    return {"compute": compute, "comm": comm, "comm_raw": raw, "host": host, "host_unpaired": host_unpaired,
            "total": sum(compute.values()) + sum(comm.values()) + host}


def step_walls(m, compute, comm, host, total, *, hidden, regain, unpaired_runs, bubble_factor, dp_exposed, optimizer,
               offload) -> dict:
    """The four walls of a step from its slowest pipeline rank's seconds a micro-batch (compute, exposed comm, host,
    total), scalars or one per candidate (walls/batch.py): M micro-batches, plus the step's own terms. Under EP overlap
    `hidden` (the all-to-all it hides) and `regain` (the host wait an unpaired micro-batch's longer GPU work covers)
    come back whole in the `unpaired_runs` micro-batches the combined 1F1B does not pair, and in the bubble, which
    waits through the warm-up and cool-down chunks (step_time); 0 without it. `bubble_factor`: (PP - 1) / VPP."""
    return {
        "compute": m * compute + optimizer,
        "communication": m * comm + dp_exposed + unpaired_runs * hidden,
        "bubble": bubble_factor * (total + hidden + regain),
        # the optimizer's offloaded share steps on the host CPU while the GPU waits (HybridDeviceOptimizer)
        "host": m * host + unpaired_runs * regain + offload,
    }


class _Step(NamedTuple):
    """What step_time reads past the step's walls: its stages, the slowest, and the terms that split the walls."""

    walls: dict
    stages: list
    slow: dict
    m: int
    dp_raw: float
    dp_exposed: float
    unpaired: float  # the EP all-to-all seconds the unpaired micro-batches leave exposed
    u: float  # those micro-batches (overlap.ep_overlap_unpaired)
    regain: float
    optimizer: float
    offload: float


def step_seconds(spec: ModelSpec, lay: Layout, wl: Workload, knobs: Knobs, gpu: GpuSpec, eff: dict) -> tuple:
    """(step seconds, seconds a micro-batch of each pipeline rank): step_time's "step_seconds" and "stage_seconds"
    alone, for the re-split (planner/resplit.py), which weighs nothing else of the thousands of splits it tries."""
    st = _step(spec, lay, wl, knobs, gpu, eff, copies=False)
    return sum(st.walls.values()), [float(s["total"]) for s in st.stages]


def _step(spec: ModelSpec, lay: Layout, wl: Workload, knobs: Knobs, gpu: GpuSpec, eff: dict, copies=True) -> _Step:
    gpu = job_gpu(gpu, lay.world_size)  # collectives see the job's NVLink domain
    memo = _memo(spec, lay, wl, knobs, gpu, eff)
    stages = _stage_times(spec, lay, wl, knobs, gpu, eff, memo, copies)
    slow = max(stages, key=lambda s: s["total"])
    m = wl.num_microbatches(lay)
    big = max(stage_params(spec, lay), key=lambda s: s.total)
    terms = (lay.pp, lay.vpp, m, big.dense, big.expert, big.vocab, big.nonmatrix, big.expert_nonmatrix, big.quantized)
    if terms not in memo.terms:  # a re-split's splits mostly keep the largest stage's parameters
        memo.terms[terms] = stage_iteration_terms(spec, big, lay, knobs, gpu, eff, m)
    dp, optimizer, offload = memo.terms[terms]
    dp_raw = float(dp_raw_seconds(dp.rs, dp.ag, knobs, m, dp.step_rs, dp.step_ag))
    dp_exposed = float(dp_exposed_seconds(dp.rs, dp.ag, sum(slow["compute"].values()), eff, knobs, slow["host"], m,
                                          dp.step_rs, dp.step_ag))
    # EP overlap hides a micro-batch's all-to-all only beside another's compute; the warm-up and cool-down chunks run
    # unpaired, and they are what the other stages wait through (the bubble), so both take the all-to-all whole
    # (Megatron-Core pipeline_parallel/schedules.py: the combined 1F1B pairs a forward with a backward only in the
    # steady phase; overlap.ep_overlap_unpaired counts the rest)
    hidden = ((slow["comm_raw"].get("ep_alltoall", 0.0) - slow["comm"].get("ep_alltoall", 0.0)) if knobs.ep_overlap
              else 0.0)
    # an unpaired micro-batch's GPU work is longer, so less of it waits for the host (layer_time's host_unpaired)
    regain = slow["host_unpaired"] - slow["host"] if knobs.ep_overlap else 0.0
    u = float(ep_overlap_unpaired(lay, m)) if knobs.ep_overlap else 0.0
    walls = step_walls(m, sum(slow["compute"].values()), sum(slow["comm"].values()), slow["host"], slow["total"],
                       hidden=hidden, regain=regain, unpaired_runs=u, bubble_factor=(lay.pp - 1) / lay.vpp,
                       dp_exposed=dp_exposed, optimizer=optimizer, offload=offload)
    return _Step({k: float(v) for k, v in walls.items()}, stages, slow, m, dp_raw, dp_exposed, u * hidden, u, regain,
                 optimizer, offload)


def step_time(spec: ModelSpec, lay: Layout, wl: Workload, knobs: Knobs, gpu: GpuSpec, eff: dict) -> dict:
    """The `time` object of estimate's JSON (seconds)."""
    walls, stages, slow, m, dp_raw, dp_exposed, unpaired, u, regain, optimizer, offload = _step(
        spec, lay, wl, knobs, gpu, eff)
    step = sum(walls.values())
    tokens = wl.gbs(lay) * wl.seq_length
    flops = megatron_model_flops(spec, wl.seq_length, wl.gbs(lay), tp=lay.tp, convention=spec.flops_convention)
    tflops = tflops_per_gpu(flops, step, lay.world_size)
    collectives = {k: float(m * v) for k, v in slow["comm_raw"].items()}
    collectives["dp_grad_reduce_param_gather"] = dp_raw
    exposed = {k: float(m * v) for k, v in slow["comm"].items()}
    exposed["dp_grad_reduce_param_gather"] = float(dp_exposed)
    exposed["ep_alltoall"] = exposed.get("ep_alltoall", 0.0) + unpaired
    return {
        "step_seconds": step,
        "tokens_per_s_per_gpu": tokens_per_gpu(wl.gbs(lay), wl.seq_length, step, lay.world_size),
        "tflops_per_gpu": tflops,
        "flops_convention": spec.flops_convention,  # whose counter tflops_per_gpu follows (walls/model_flops.py)
        # against the dense peak of the recipe's GEMM precision, as the seeds read MFU (seeds/004: tuned MXFP8
        # DeepSeek-V3 on GB200 at "high-teens to low-20s MFU"; seeds/000 Pitfalls: FP8 MFU reads low), and BF16's
        "mfu": tflops / gpu.peak_tflops(knobs.precision),
        "mfu_bf16_peak": tflops / gpu.bf16_tflops,
        # the share of those counted FLOPs that never run (Llama 4's chunked attention past its chunk): they read high
        "counted_not_run": chunked_attention_flops(spec, wl.seq_length, tokens) / flops,
        "walls": walls,
        "dominant_wall": max(walls, key=walls.get),
        "collectives": collectives,
        "exposed_collectives": exposed,
        # per step, summing to walls["compute"]: the slowest stage's classes over m micro-batches, then the optimizer
        # step on the GPU; and to walls["host"]: kernel issue, then the optimizer's offloaded share on the host CPU
        "compute_by_class": {**{k: float(m * v) for k, v in slow["compute"].items()},
                             "optimizer_step": float(optimizer)},
        "host_by_class": {"kernel_issue": float(m * slow["host"] + u * regain), "optimizer_offload": float(offload)},
        "slowest_stage": stages.index(slow),
        "stage_seconds": [float(s["total"]) for s in stages],  # per micro-batch, each pipeline rank
        "num_microbatches": m,
        # DSA's kernel rates: moetune's own, no published run to calibrate them on (walls/dsa.py)
        **({"uncalibrated": UNCALIBRATED} if spec.dsa is not None else {}),
    }
