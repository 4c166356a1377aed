"""Step time of many layouts at once (numpy arrays), for the planner's full search (their memory: walls/batch_bytes.py).

The formulas are the scalar ones (layer_time.layer_time, compute.heads_seconds, comms.p2p_seconds,
iteration.iteration_terms): they are plain arithmetic, so they accept arrays whose first axis is the candidate and
whose second is the pipeline stage (walls/batch_layouts.py). Per-layer quantities are evaluated once per distinct
shape (MBS, TP, CP, ETP, EP, SP) and read back by row. Only the per-stage assembly is written here; tests check it
against `estimate` candidate by candidate.
"""

from types import SimpleNamespace

import numpy as np

from moetune.layout.knobs import Knobs
from moetune.layout.ranks import job_gpu
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import ModelSpec
from moetune.walls.batch_bytes import batch_ctx, shapes_ctx
from moetune.walls.batch_keys import layer_time_key, time_key
from moetune.walls.batch_layouts import LayoutBatch, distinct_shapes
from moetune.walls.batch_rows import (
    bubble,
    by_row,
    microbatches,
    row_sum,
    slowest_runs,
    stage_ranks,
    take,
)
from moetune.walls.comms import p2p_bandwidth, p2p_seconds
from moetune.walls.compute import heads_seconds, layer_compute_seconds, rates
from moetune.walls.iteration import gathered_weight_bytes, stage_iteration_terms, step_weight_bytes
from moetune.walls.layer_time import layer_time
from moetune.walls.overlap import dp_exposed_seconds, ep_overlap_unpaired
from moetune.walls.split_floor import even_floor, layer_shares, whole_floor
from moetune.walls.step import step_walls


def _shape_layer_times(spec: ModelSpec, b: LayoutBatch, seq: int, knobs: Knobs, gpu: GpuSpec, eff: dict) -> tuple:
    """(u, K, 5), or (u, K + 1, 5) with the MTP layer's kind last: each distinct shape's five figures a layer of each
    of `b.kinds` (compute, exposed communication, host, the EP all-to-all EP overlap hides, the host time it regains),
    seconds per micro-batch, in one table that a subset's rows read in one take."""
    u, _ = distinct_shapes(b)
    ctx, r = shapes_ctx(b, seq, knobs), rates(gpu, knobs.precision, eff, fp8_head=knobs.fp8_output_proj)
    kinds = [*b.kinds, spec.mtp_layer_kind] if spec.mtp_num_layers else b.kinds
    table = np.empty((len(u.mbs), len(kinds), 5))
    for kind in spec.layer_kinds:
        def figures(kind=kind) -> tuple:
            compute = b.memo(("compute", kind, knobs.precision, knobs.recompute, knobs.effective_modules,
                              knobs.routing, knobs.token_imbalance,  # with routing, all Knobs.imbalance_at reads
                              knobs.hidden_dropout > 0),  # the elementwise kernels touch the dropout masks
                             lambda: layer_compute_seconds(spec, kind, ctx, r, u.ep, recompute=knobs.recompute,
                                                           modules=knobs.effective_modules, eff=eff))
            t = layer_time(spec, kind, u, ctx, gpu, eff, knobs, r, compute=compute)
            return (sum(t.compute.values()), sum(t.comm.values()), t.host,
                    t.comm_raw["ep_alltoall"] - t.comm["ep_alltoall"], t.host_unpaired - t.host)
        at = [i for i, k in enumerate(kinds) if k == kind]  # the MTP layer's kind is a decoder kind too
        for j, x in enumerate(b.memo(("kind_times", kind, seq, *layer_time_key(kind, knobs, gpu, eff)), figures)):
            table[:, at, j] = x  # a (u, 1) array, or a scalar where no shape changes it
    return table


def _layer_tables(spec: ModelSpec, root: LayoutBatch, seq: int, knobs: Knobs, gpu: GpuSpec,
                  eff: dict) -> SimpleNamespace:
    """_shape_layer_times' table as _stage_part reads it, once per batch and time_key: the decoder kinds' figures
    (u, K, 5) and a layer's compute, exposed comm and host (u, K), and with MTP layers the figures of m of them on one
    stage, m from 0 to the most a stage holds, as rows m * u + shape: the (n, S, 5) product a subset would otherwise
    broadcast (a 5-long inner loop, 4x slower than reading those rows back), by the same products."""
    table = _shape_layer_times(spec, root, seq, knobs, gpu, eff)
    kinds = np.ascontiguousarray(table[:, :len(root.kinds)])
    mtp = None
    if spec.mtp_num_layers:
        # MTP layers a stage may hold: the max over the root's strided int32 column is ~1 ms, once per batch not key
        held = np.arange(root.memo(("mtp_held",), lambda: int(root.mtp.max(initial=0))) + 1)
        mtp = (held[:, None, None] * table[None, :, -1]).reshape(-1, table.shape[2])
    return SimpleNamespace(kinds=kinds, cost=row_sum(kinds[:, :, :3]), mtp=mtp)


def _mtp_rows(root: LayoutBatch, shapes: int) -> np.ndarray:
    """(n, S) each stage's row of _layer_tables' MTP figures: m * `shapes` + its shape, m its MTP layers: computed once
    per batch and read by row (the product of the strided int32 column alone cost more than reading it back)."""
    return root.mtp * shapes + distinct_shapes(root)[1][:, None]


def _stage_part(spec: ModelSpec, b: LayoutBatch, seq: int, gbs: int, knobs: Knobs, gpu: GpuSpec, eff: dict) -> dict:
    """Per-micro-batch time of each candidate's slowest stage, by wall (independent of the optimizer knobs)."""
    r, root = rates(gpu, knobs.precision, eff, fp8_head=knobs.fp8_output_proj), b.root()
    tables = root.memo(("layer_times", *time_key(knobs, gpu, eff), seq),
                       lambda: _layer_tables(spec, root, seq, knobs, gpu, eff))
    _, inverse = distinct_shapes(b)
    # each kind's five figures a layer, (n, K, 5): one product sums all five over each stage's decoder layers (the
    # counts cast first: matmul's own cast of the strided int32 view costs more than the cast and a float product)
    layers = b.counts.astype(float) @ tables.kinds.take(inverse, axis=0)
    # the first three figures of each stage as fresh (n, S) columns (the heads and the send/recv are added in place);
    # the last two are read at the slowest stage alone
    mtp = None
    if spec.mtp_num_layers:  # each stage's MTP layers' figures: mtp x the MTP layer's, read from the tables
        mtp = tables.mtp.take(by_row(b, ("mtp_rows",), lambda a: _mtp_rows(a, len(tables.kinds))), axis=0)
        compute, comm, host = (layers[:, :, j] + mtp[:, :, j] for j in range(3))
    else:
        compute, comm, host = (layers[:, :, j].copy() for j in range(3))
    # the loss heads' GEMMs: the layout's, at the head's rate (the tokens a rank holds are the layout's: any knobs do)
    compute += by_row(b, ("heads", seq, r.head), lambda a: heads_seconds(
        spec, batch_ctx(a, seq, knobs).tokens, a.loss + a.mtp, a.fields.tp, a.padded_vocab, r))
    comm += by_row(b, ("p2p", seq), lambda a: p2p_seconds(  # the send/recv: the layout's alone
        spec, batch_ctx(a, seq, knobs), a.fields.pp, p2p_bandwidth(a.fields.pp, a.fields.world_size, gpu, eff))
                   * eff["p2p_exposed"])
    total = compute + comm
    total += host  # (compute + comm) + host, as the scalar step adds them
    total = np.where(b.valid, total, -1.0)
    slowest = np.arange(len(total)) * total.shape[1] + total.argmax(axis=1)  # the slowest stage, as a flat index
    ep = layers.reshape(-1, layers.shape[2]).take(slowest, axis=0)  # the slowest stage's five figures
    if mtp is not None:
        ep += mtp.reshape(-1, mtp.shape[2]).take(slowest, axis=0)
    hidden_ep, regain = ep[:, 3], ep[:, 4]

    # the stages' time outside their decoder layers (loss, MTP layers, send/recv), what a re-split leaves in place;
    # a stage past the last reads as the first, held by no rank
    cost = tables.cost.take(inverse, axis=0)  # a decoder layer's compute, exposed comm and host, (n, K)
    fixed = total - row_sum(layers[:, :, :3])
    fixed = np.where(b.valid, fixed, fixed[:, :1])
    ranks = stage_ranks(b)
    shares = by_row(b, ("layer_shares",), lambda a: layer_shares(a.kind_layers, stage_ranks(a)))
    return {"compute": compute.take(slowest), "comm": comm.take(slowest), "host": host.take(slowest),
            "total": total.take(slowest), "hidden_ep": hidden_ep, "regain": regain, "fixed": fixed, "layer_cost": cost,
            "floor_total": even_floor(shares, total, fixed, ranks, cost)}


def batch_step_seconds(spec: ModelSpec, b: LayoutBatch, seq: int, gbs: int, knobs: Knobs, gpu: GpuSpec,
                       eff: dict) -> dict:
    """Step seconds and walls per candidate (same assembly as step.step_time), and under "stage" the slowest stage's
    per-micro-batch part (_stage_part) that whole_layer_balanced tightens."""
    f = b.fields
    gpu = job_gpu(gpu, f.world_size.flat[0])  # one world size per search
    stage = b.memo(("stage", *time_key(knobs, gpu, eff), gbs, seq),
                   lambda: _stage_part(spec, b, seq, gbs, knobs, gpu, eff))
    m = microbatches(b, gbs)
    # the data-parallel terms depend on the layout and the knobs below: computed once, read by row (one micro-batch's
    # FSDP traffic: how many times a step runs it applies later, in dp_raw/exposed_seconds, not the key; but Megatron
    # FSDP's gathers across its copies under outer optim run a count of passes the micro-batches set, so there it is)
    # (plan's passes share one batch's memo; by_row keeps a subset's rows for the other knob sets of its group)
    dp_key = ("dp", knobs.main_grads_fp32, knobs.sharded_optimizer, knobs.adam_moments_bytes, knobs.optimizer,
              knobs.optimizer_offload_fraction, gathered_weight_bytes(knobs), step_weight_bytes(knobs),
              knobs.torch_fsdp2, knobs.num_distributed_optimizer_instances, knobs.megatron_fsdp,
              knobs.outer_dp_sharding_strategy,
              *((gbs, knobs.ep_overlap) if knobs.outer_dp_sharding_strategy == "optim" else ()))  # its passes: m
    rs, ag, step_rs, step_ag, optimizer, offload = by_row(
        b, dp_key, lambda a: _data_parallel(spec, a, knobs, gpu, eff, gbs))
    u = by_row(b, ("unpaired", gbs), lambda a: ep_overlap_unpaired(a.fields, microbatches(a, gbs)[:, None])[:, 0]) \
        if knobs.ep_overlap else 0.0
    hidden, regain = (stage["hidden_ep"], stage["regain"]) if knobs.ep_overlap else (0.0, 0.0)
    dp_exposed = dp_exposed_seconds(rs, ag, stage["compute"], eff, knobs, stage["host"], m, step_rs, step_ag)
    walls = step_walls(m, stage["compute"], stage["comm"], stage["host"], stage["total"], hidden=hidden,
                       regain=regain, unpaired_runs=u, bubble_factor=bubble(b), dp_exposed=dp_exposed,
                       optimizer=optimizer, offload=offload)
    walls["step"] = sum(walls.values())
    # the same step with the slowest pipeline rank at the least a re-split could make it (walls/split_floor.py: the
    # work is the same, only where it runs moves), so the planner re-splits only candidates this keeps in reach
    walls["balanced"] = walls["step"] - slowest_runs(b, gbs) * (stage["total"] - stage["floor_total"])
    return walls | {"stage": stage}


def whole_layer_balanced(b: LayoutBatch, gbs: int, walls: dict, rows: np.ndarray) -> np.ndarray:
    """walls["balanced"] (batch_step_seconds of the batch `b`) at `rows`, its floor raised to the best split in whole
    layers (split_floor.whole_floor): tighter, and too dear to take for every candidate, so the planner asks it of
    those the first bound keeps in reach."""
    stage, f = walls["stage"], b.fields
    # the layers each rank keeps (pipeline_balance.with_rank_layers), at `rows` alone (not every row, then a few)
    least = (take(f.vpp, rows) - take(b.loss, rows)).astype(float)
    whole = whole_floor(b.kind_layers, take(stage["fixed"], rows), take(stage_ranks(b), rows), least,
                        take(stage["layer_cost"], rows))
    floor = np.maximum(stage["floor_total"][rows], whole)
    weight = slowest_runs(b, gbs)[rows]  # the slowest rank's times in a step
    return walls["step"][rows] - weight * (stage["total"][rows] - floor)


def _data_parallel(spec: ModelSpec, b: LayoutBatch, knobs: Knobs, gpu: GpuSpec, eff: dict, gbs: int) -> tuple:
    """iteration.iteration_terms for each candidate's largest stage, over its micro-batches."""
    big = np.where(b.valid, b.dense + b.expert, -1).argmax(axis=1)[:, None]
    p = SimpleNamespace(**{k: np.take_along_axis(getattr(b, k), big, 1) for k in (
        "dense", "expert", "vocab", "nonmatrix", "expert_nonmatrix", "quantized")})
    m = gbs // (b.mbs * b.fields.dp)
    dp, optimizer, offload = stage_iteration_terms(spec, p, b.fields, knobs, gpu, eff, m)
    return tuple(np.broadcast_to(x, dp.rs.shape)[:, 0] for x in (*dp, optimizer, offload))
