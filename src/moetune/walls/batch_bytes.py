"""Memory of many layouts at once (numpy arrays), for the planner's full search: each candidate's peak bytes over its
stages, its heaviest stage's model state and host bytes. The formulas are the scalar ones (memory.memory_wall's line
items: activations.layer_activation_items, model_state.model_state_bytes, memory.in_flight), plain arithmetic over
the batch's (candidate, stage) arrays (walls/batch_layouts.py); per-layer quantities are evaluated once per distinct
shape and read back by row. walls/batch.py holds the step time; tests check both against `estimate` candidate by
candidate.
"""

from functools import reduce
from types import SimpleNamespace

import numpy as np

from moetune.layout.knobs import Knobs
from moetune.specs.model import ModelSpec
from moetune.walls.activations import (
    ActivationContext,
    full_recompute_layer_bytes,
    layer_activation_items,
    offload_staging_bytes,
)
from moetune.walls.batch_layouts import LayoutBatch, distinct_shapes
from moetune.walls.batch_rows import (
    root_rows,
    row_max,
    row_sum,
)
from moetune.walls.memory import (
    activation_context,
    in_flight,
    logits_bytes,
    output_proj_cache_bytes,
    stash_factor,
    userbuffer_bytes,
)
from moetune.walls.model_state import model_state_bytes, offloaded_host_bytes, optimizer_shard
from moetune.walls.overheads import overhead_bytes
from moetune.walls.rank_params import layer_rank_params


def batch_ctx(b: LayoutBatch, seq: int, knobs: Knobs) -> ActivationContext:
    return shape_ctx(SimpleNamespace(mbs=b.mbs, **vars(b.fields)), seq, knobs)


def shape_ctx(f: SimpleNamespace, seq: int, knobs: Knobs) -> ActivationContext:
    """memory.activation_context over arrays: `f` stands for the layout (tp, cp, etp, sp) and carries the MBS."""
    return activation_context(f, SimpleNamespace(seq_length=seq, micro_batch_size=f.mbs), knobs)


def shapes_ctx(b: LayoutBatch, seq: int, knobs: Knobs) -> ActivationContext:
    """shape_ctx of the root's distinct shapes, once per batch for the knobs activation_context reads (a few dozen
    of a grid's knob sets share one)."""
    root = b.root()
    key = ("shapes_ctx", seq, knobs.recompute, knobs.effective_modules, knobs.routing, knobs.token_imbalance,
           stash_factor(knobs), knobs.fp8, knobs.offload_modules, knobs.hidden_dropout > 0)
    return root.memo(key, lambda: shape_ctx(distinct_shapes(root)[0], seq, knobs))


def _on_shapes(b: LayoutBatch, seq: int, knobs: Knobs, per_shape) -> np.ndarray:
    """per_shape(ctx) evaluated once per distinct shape (a scalar or a (u, 1) array), as an (n, 1) array over the
    candidates."""
    x, inverse = np.asarray(per_shape(shapes_ctx(b, seq, knobs)), dtype=float), distinct_shapes(b)[1]
    return np.full((len(inverse), 1), float(x)) if x.ndim == 0 else x.reshape(-1, 1).take(inverse, axis=0)


def _per_stage(b: LayoutBatch, spec: ModelSpec, per_kind) -> np.ndarray:
    """Sum a per-layer-kind quantity (arrays of shape (n, 1)) over each stage's layers and MTP layers, in kind order
    (a fresh array, added to in place: a sum() of products had started from 0 and allocated at each step)."""
    total = b.counts[:, :, 0] * per_kind(b.kinds[0])
    for k, kind in enumerate(b.kinds[1:], 1):
        total += b.counts[:, :, k] * per_kind(kind)
    if spec.mtp_num_layers:
        total += b.mtp * per_kind(spec.mtp_layer_kind)
    return total


def _head_bytes(spec: ModelSpec, b: LayoutBatch, seq: int, knobs: Knobs) -> np.ndarray:
    """The loss stages' logits and loss, and under fp8_output_proj the LM head's MXFP8 weight cache (memory.memory_wall
    logits_and_loss, fp8_output_proj_cache), over each candidate's vocabulary shard; 0 on the other stages."""
    f = b.fields
    shard = b.padded_vocab // f.tp  # rank_params.vocab_shard, of the padded vocabulary the batch holds
    head = output_proj_cache_bytes(spec, shard) if knobs.fp8_output_proj else 0
    return np.where(b.loss, logits_bytes(spec, seq // f.cp * b.mbs, shard) + head, 0)


def _activations(spec: ModelSpec, b: LayoutBatch, seq: int, gbs: int, knobs: Knobs) -> np.ndarray:
    f = b.fields
    flight = b.memo(("flight", gbs), lambda: in_flight(f, b.stage_index, gbs // (b.mbs * f.dp)))
    saved = {k: _on_shapes(b, seq, knobs, lambda c, k=k: sum(layer_activation_items(spec, k, c).values()))
             for k in spec.layer_kinds}
    if knobs.recompute == "full":
        stored = _per_stage(b, spec, lambda k: _on_shapes(b, seq, knobs,
                                                         lambda c: full_recompute_layer_bytes(spec, c)))
        stored *= flight
        stored += reduce(np.maximum, [saved[k] for k in b.kinds])
        return stored
    stored = _per_stage(b, spec, saved.__getitem__)
    stored *= flight
    stored += _on_shapes(b, seq, knobs, lambda c: offload_staging_bytes(spec, c))
    return stored


def batch_memory(spec: ModelSpec, b: LayoutBatch, seq: int, gbs: int, knobs: Knobs, overheads: dict, *,
                 arch: str) -> np.ndarray:
    """Peak bytes over stages, per candidate (same line items as memory.memory_wall, on a GPU of `arch`)."""
    f = b.fields
    states_key = ("states", knobs.precision, knobs.optimizer_offload_fraction, knobs.main_grads_fp32,
                  knobs.adam_moments_bytes, knobs.distributed_optimizer, knobs.optimizer, knobs.quantized_params, arch,
                  knobs.torch_fsdp2, knobs.fsdp2_reshard_after_forward, knobs.megatron_fsdp,
                  knobs.num_distributed_optimizer_instances, knobs.outer_dp_sharding_strategy, knobs.fsdp_double_buffer,
                  knobs.suggested_communication_unit_size)
    acts_key = ("acts", knobs.fp8, knobs.recompute, knobs.effective_modules, knobs.routing, knobs.token_imbalance,
                knobs.offload_modules, gbs, stash_factor(knobs),  # a full-iteration graph's routed-expert buffers
                knobs.hidden_dropout > 0)

    def stage_max():  # the knob constants below are the same on every stage, so the max comes first
        states = root_rows(b, states_key, lambda: _state_bytes(spec, b, knobs, arch))
        acts = root_rows(b, acts_key, lambda: _activations(spec, b, seq, gbs, knobs))
        logits = root_rows(b, ("logits", seq, knobs.fp8_output_proj), lambda: _head_bytes(spec, b, seq, knobs))
        peak = states + acts
        peak += logits  # (states + acts) + logits, without a second temporary
        return row_max(np.where(b.valid, peak, 0))

    peak_items = root_rows(b, ("stage_max", states_key, acts_key, knobs.fp8_output_proj), stage_max)
    # the same buffers on every knob set that overlaps TP comm at one GEMM precision: once per batch
    peak_items = peak_items + b.memo(("userbuffers", seq, knobs.tp_comm_overlap, knobs.precision), lambda: (
        userbuffer_bytes(spec, seq // f.cp[:, 0] * b.mbs[:, 0], f.tp[:, 0], f.sp[:, 0], knobs)))
    over = overhead_bytes(knobs, overheads, spec.layer_kinds)
    outside = over.get("cuda_context", 0) + over.get("nccl_buffers", 0)
    return (peak_items + sum(over.values()) - outside) * (1 + overheads["fragmentation_fraction"]) + outside


def _state_bytes(spec: ModelSpec, b: LayoutBatch, knobs: Knobs, arch: str) -> np.ndarray:
    """(n, S) model-state bytes of each stage (model_state.model_state_bytes, read from the batch's fields of
    rank_params.StageParams; the largest FSDP unit only where Megatron FSDP reads it)."""
    params = SimpleNamespace(dense=b.dense, expert=b.expert, vocab=b.vocab, nonmatrix=b.nonmatrix,
                             expert_nonmatrix=b.expert_nonmatrix, quantized=b.quantized,
                             fsdp_units=row_sum(b.counts) + b.mtp)  # rank_params.StageParams.fsdp_units
    largest = largest_fsdp_unit(spec, b) if knobs.megatron_fsdp else None
    # the optimizer shard, by the knobs optimizer_divisors reads: a float ceil-division over every stage of every
    # candidate, the same for each precision memory_bound and the knob sets weigh
    divisors = (knobs.torch_fsdp2, knobs.sharded_optimizer, knobs.outer_dp_sharding_strategy,
                knobs.num_distributed_optimizer_instances)
    shard = root_rows(b, ("optimizer_shard", *divisors), lambda: optimizer_shard(params, b.fields, knobs))
    return sum(model_state_bytes(params, b.fields, knobs, arch, largest_unit=largest, shard=shard).values())


def largest_fsdp_unit(spec: ModelSpec, b: LayoutBatch) -> np.ndarray:
    """(n, S) parameters on one rank of the largest Megatron FSDP unit each stage holds: its decoder layers and the
    decoder layer of each MTP layer (rank_params.largest_fsdp_unit)."""
    held = [np.where(b.counts[:, :, i] > 0, layer_rank_params(spec, kind, b.fields), 0)
            for i, kind in enumerate(b.kinds)]
    if spec.mtp_num_layers:
        held.append(np.where(b.mtp > 0, layer_rank_params(spec, spec.mtp_layer_kind, b.fields), 0))
    return np.max(held, axis=0)


def batch_state_bytes(spec: ModelSpec, b: LayoutBatch, knobs: Knobs, arch: str) -> np.ndarray:
    """Model-state bytes (weights, gradients, optimizer state: model_state.model_state_bytes) of each candidate's
    heaviest stage: what no shorter sequence or smaller micro-batch lowers."""
    return row_max(np.where(b.valid, _state_bytes(spec, b, knobs, arch), 0))


def batch_host_bytes(b: LayoutBatch, knobs: Knobs) -> np.ndarray:
    """Host bytes of the optimizer's CPU offload on each candidate's heaviest stage
    (model_state.offloaded_host_bytes)."""
    params = SimpleNamespace(dense=b.dense, expert=b.expert)
    # the shard the offload keeps (model_state.optimizer_divisors) follows torch_fsdp2, the copies, and whether the
    # optimizer shards at all, which Megatron FSDP's strategy says in place of distributed_optimizer
    host = b.memo(("host", knobs.optimizer_offload_fraction, knobs.adam_moments_bytes, knobs.sharded_optimizer,
                   knobs.torch_fsdp2, knobs.num_distributed_optimizer_instances, knobs.outer_dp_sharding_strategy),
                  lambda: offloaded_host_bytes(params, b.fields, knobs))
    return row_max(np.where(b.valid, host, 0))
