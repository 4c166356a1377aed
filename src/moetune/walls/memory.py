"""The memory wall: bytes on one rank of each pipeline stage, each a named line item.

Model states (weights, gradients, optimizer state and how they shard): model_state.py.
Activations: activations.py per layer, times the micro-batches in flight on that stage.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.pipeline import interleaved_warmup
from moetune.layout.validate import Workload
from moetune.memo import remembered, remembered_stages
from moetune.specs.model import ModelSpec
from moetune.walls.activations import (
    FP32,
    ActivationContext,
    full_recompute_layer_bytes,
    layer_activation_items,
    offload_staging_bytes,
    whole,
)
from moetune.walls.model_state import FP8_CACHE_BYTES, model_state_bytes, offloaded_host_bytes
from moetune.walls.overheads import merged_overheads, overhead_bytes
from moetune.walls.rank_params import held_kinds, largest_fsdp_unit, stage_params, stage_structures, vocab_shard


@dataclass(kw_only=True, slots=True, frozen=True)
class StageMemory:
    stage: int
    params: int  # parameters on one rank of this stage
    items: dict[str, int]  # named bytes
    in_flight_microbatches: float
    host_bytes: int = 0  # what this rank keeps in host memory: the optimizer's CPU-offloaded share

    @property
    def total(self) -> int:
        return sum(self.items.values())


def in_flight(layout: Layout, stage: int, microbatches: int) -> float:
    """Micro-batches whose activations a stage holds at its peak, in whole-stage units.
    1F1B: PP - p (warm-up + 1). Interleaved: Megatron's warm-up of 2(PP-p-1) + (VPP-1)PP chunks + 1,
    each chunk 1/VPP of the stage (schedules.py get_pp_warmup...; Korthikanti Sec. 4.2.3)."""
    pp, vpp = layout.pp, layout.vpp
    # one layout (estimate, a re-split's every split) on Python numbers, without numpy's cost a call; the planner's
    # batches (walls/batch_bytes.py) on arrays: one formula, its minimum taken by whichever the inputs need
    scalar = all(type(x) is int for x in (pp, vpp, stage, microbatches))
    minimum = min if scalar else np.minimum
    one_f_one_b = minimum(pp - stage, microbatches)
    interleaved = minimum(interleaved_warmup(pp, vpp, stage) + 1, microbatches * vpp) / vpp
    if scalar:
        return float(one_f_one_b) if vpp == 1 else interleaved
    out = np.where(vpp == 1, one_f_one_b, interleaved)
    return out if isinstance(out, np.ndarray) and out.ndim else float(out)


# A full-iteration plan keeps its routed-expert activations in a paged stash (knob_fields.STATIC_EXPERTS), a CUDA
# buffer sized at this factor of the average routed tokens: Megatron Bridge's full-iteration MoE recipes set
# moe_paged_stash_buffer_size_factor_cuda = 1.2 (perf_recipes/deepseek/common.py, gpt_oss/common.py @067f987;
# Megatron-Core's default is 1.10)
PAGED_STASH_CUDA = 1.2


def stash_factor(knobs: Knobs) -> float:
    """Routed-expert activations kept for backward over the mean tokens: the full-iteration graph's buffers (the
    config's own, Knobs.routed_buffer_factor, else a plan's paged stash), the tokens routed otherwise."""
    if "full_iteration" not in knobs.cuda_graph_scope:
        return 1.0
    return PAGED_STASH_CUDA if knobs.routed_buffer_factor is None else knobs.routed_buffer_factor


def activation_context(layout: Layout, workload: Workload, knobs: Knobs) -> ActivationContext:
    return ActivationContext(
        seq_length=workload.seq_length, micro_batch_size=workload.micro_batch_size, tp=layout.tp,
        cp=layout.cp, etp=layout.etp, sequence_parallel=layout.sp,
        recompute_modules=knobs.effective_modules if knobs.recompute == "selective" else frozenset(),
        token_imbalance=knobs.imbalance_at(layout.ep),
        stash_factor=stash_factor(knobs),
        fp8_gemm_inputs=knobs.fp8, offload_modules=knobs.offload_modules, dropout=knobs.hidden_dropout > 0,
    )


def _activation_sums(spec: ModelSpec, knobs: Knobs, ctx: ActivationContext, kinds: dict) -> tuple[dict, dict]:
    """Activation line items of a stage holding `kinds` (its layers by kind, the MTP layers' included:
    rank_params.held_kinds): (bytes a micro-batch, which the micro-batches in flight multiply; bytes held once). Read
    only: stages share them (memory_wall)."""
    if knobs.recompute == "full":
        stored = full_recompute_layer_bytes(spec, ctx) * sum(kinds.values())
        working = max((sum(layer_activation_items(spec, k, ctx).values()) for k in kinds), default=0)
        return {"activations_layer_inputs": stored}, {"activations_recompute_working": working}
    items: dict[str, int] = {}
    for kind, count in kinds.items():  # one evaluation per layer kind, times its layers
        for name, value in _layer_items(spec, kind, ctx).items():
            items[name] = items.get(name, 0) + value * count
    once = {"act_offload_staging": int(offload_staging_bytes(spec, ctx))} if knobs.offload_modules else {}
    return {f"act_{k}": v for k, v in items.items()}, once


def _activation_items(sums: tuple[dict, dict], flight: float) -> dict[str, int]:
    """A stage's activation line items at its peak, `flight` micro-batches in flight (_activation_sums)."""
    scaled, once = sums
    return {**{k: round(v * flight) for k, v in scaled.items()}, **once}


_LAYER_ITEMS: dict = {}  # one layer's items by (model, kind, context): a re-split asks again for every split it weighs


def _layer_items(spec: ModelSpec, kind, ctx) -> Mapping[str, int]:
    """layer_activation_items of one scalar context, remembered: every later caller shares it, so it is a read-only
    view (memo.remembered makes arrays read-only, not dicts)."""
    return remembered(_LAYER_ITEMS, (spec, kind, ctx),
                      lambda: MappingProxyType(layer_activation_items(spec, kind, ctx)), 4096)


def logits_bytes(spec: ModelSpec, tokens, vocab_shard):
    """Logits of one micro-batch on the last stage: BF16 logits plus the FP32 softmax the vocab-parallel
    cross entropy saves for backward, once per loss head (main + each MTP layer)."""
    return tokens * vocab_shard * (2 + FP32 * (1 + spec.mtp_num_layers))


def output_proj_cache_bytes(spec: ModelSpec, vocab_shard):
    """Under fp8_output_proj the LM head is a Transformer Engine linear run in MXFP8 (Megatron-Core
    extensions/transformer_engine.py TELMHeadColumnParallelLinear), built outside the layers' FP8-parameter init
    (transformer_block.py: get_fp8_context(is_init=True) per layer), so its BF16 weight stays and TE caches its MXFP8
    copy across micro-batches, as for any BF16 GEMM weight under an FP8 recipe (FP8_CACHE_BYTES)."""
    return whole(FP8_CACHE_BYTES["mxfp8"] * vocab_shard * spec.hidden_size)


def loss_bytes(spec: ModelSpec, layout: Layout, workload: Workload) -> int:
    tokens = workload.seq_length // layout.cp * workload.micro_batch_size
    return logits_bytes(spec, tokens, vocab_shard(spec, layout.tp))


# tp_comm_overlap: Transformer Engine's initialize_ub (pytorch/module/base.py), as Megatron-LM calls it
# (training/initialize.py: shape [seq x MBS / CP, hidden]), registers one buffer of that shape for each of 12 overlapped
# GEMMs (qkv, proj, fc1, fc2 x fprop, dgrad, wgrad): BF16, except the 8 all-gather ones, uint8 under an FP8 recipe.
# (A recipe keeping its first and last layers in BF16 registers a second, BF16 set; the perf recipes turn that off.)
UB_BUFFERS, UB_ALL_GATHER = 12, 8
UB_FP8_PRECISIONS = ("fp8-blockwise", "fp8-delayed", "fp8-current", "mxfp8")


def userbuffer_bytes(spec: ModelSpec, tokens, tp, sp, knobs: Knobs):
    """Userbuffers of tp_comm_overlap on one rank (`tokens` = seq x MBS / CP); 0 where Megatron Bridge turns the
    overlap off (TP < 2 or no sequence parallel, training/comm_overlap.py)."""
    if not knobs.tp_comm_overlap:
        return 0
    gathered = 1 if knobs.precision in UB_FP8_PRECISIONS else 2
    per_row = UB_ALL_GATHER * gathered + (UB_BUFFERS - UB_ALL_GATHER) * 2
    return np.where((np.asarray(tp) > 1) & np.asarray(sp, dtype=bool), tokens * spec.hidden_size * per_row, 0)


# Each stage's memory by (model, the layout's sizes, workload, knobs, overheads, GPU architecture), then by what the
# stage holds (layers by kind, embeddings, final norms, MTP layers, outputs) and its place (the micro-batches in flight
# follow it): a re-split (planner/resplit.py) moves a layer between two ranks and asks again for every rank it left
# alone. Nothing else of a layout reaches a stage's bytes (its split reaches them only through what each stage holds).
# The outer key, whose knobs take a while to hash, is hashed once a call (moetune/memo.py).
_STAGE_MEMORY: dict = {}


def memory_wall(spec: ModelSpec, layout: Layout, workload: Workload, knobs: Knobs,
                overheads: dict[str, float] | None = None, *, arch: str) -> list[StageMemory]:
    """Per-stage memory of one rank, every line item named, on a GPU of architecture `arch` (each stage its own
    StageMemory and items)."""
    return [StageMemory(stage=s.stage, params=s.params, items=dict(s.items), host_bytes=s.host_bytes,
                        in_flight_microbatches=s.in_flight_microbatches)
            for s in _stage_memories(spec, layout, workload, knobs, overheads, arch)]


def memory_peaks(spec: ModelSpec, layout: Layout, workload: Workload, knobs: Knobs,
                 overheads: dict[str, float] | None = None, *, arch: str) -> tuple[int, int]:
    """(the largest stage's bytes, the largest host bytes a rank keeps, 0 without any): memory_wall's peak and host
    peak (Estimate.peak_bytes, host_peak_bytes) without a copy of every stage's items, for the planner's re-split,
    which weighs nothing else of the splits it tries (planner/resplit.py)."""
    stages = _stage_memories(spec, layout, workload, knobs, overheads, arch)
    return max(s.total for s in stages), max((s.host_bytes for s in stages), default=0)


def _stage_memories(spec: ModelSpec, layout: Layout, workload: Workload, knobs: Knobs, overheads: dict | None,
                    arch: str) -> list[StageMemory]:
    """Each stage's StageMemory as the memo holds it (read only)."""
    overheads = merged_overheads(overheads)
    key = (spec, layout.world_size, layout.tp, layout.cp, layout.pp, layout.vpp, layout.ep, layout.etp, layout.sp,
           workload, knobs, tuple(sorted(overheads.items())), arch)
    # beside the stages, what a stage not seen yet needs (_wall_parts: alike for every split under the outer key)
    by_place, by_held, parts = remembered_stages(_STAGE_MEMORY, key, lambda: ({}, {}, []), 256)
    result = []
    for p, st in zip(stage_params(spec, layout), stage_structures(spec, layout)):
        held = st.held
        if (p.stage, held) not in by_place:
            if not parts:
                parts.append(_wall_parts(spec, layout, workload, knobs, overheads))
            if held not in by_held:
                by_held[held] = _held_bytes(spec, layout, knobs, arch, p, st, parts[0].ctx)
            by_place[p.stage, held] = _stage_memory(layout, p, by_held[held], parts[0])
        result.append(by_place[p.stage, held])
    return result


class _WallParts(NamedTuple):
    """What memory_wall works a stage's bytes out of, alike for every stage of a layout."""

    ctx: ActivationContext
    microbatches: int
    overheads: dict[str, float]  # merged_overheads
    shared: dict[str, int]  # the overheads' and the userbuffers' items, the same on every stage
    loss: dict[str, int]  # the items of a stage holding the output layer and the loss


def _wall_parts(spec: ModelSpec, layout: Layout, workload: Workload, knobs: Knobs, overheads: dict) -> _WallParts:
    shared = overhead_bytes(knobs, overheads, spec.layer_kinds)
    ub = int(userbuffer_bytes(spec, workload.seq_length // layout.cp * workload.micro_batch_size, layout.tp,
                              layout.sp, knobs))
    if ub:
        shared["tp_comm_userbuffers"] = ub
    loss = {"logits_and_loss": loss_bytes(spec, layout, workload)}
    if knobs.fp8_output_proj:
        loss["fp8_output_proj_cache"] = output_proj_cache_bytes(spec, vocab_shard(spec, layout.tp))
    return _WallParts(activation_context(layout, workload, knobs), workload.num_microbatches(layout), overheads,
                      shared, loss)


class _HeldBytes(NamedTuple):
    """A stage's bytes that follow from what it holds alone, not its place in the pipeline."""

    state: dict[str, int]  # model_state_bytes (read only: copied into each stage's items)
    host: int  # offloaded_host_bytes
    activations: tuple  # _activation_sums


def _held_bytes(spec: ModelSpec, layout: Layout, knobs: Knobs, arch: str, p, st, ctx) -> _HeldBytes:
    largest = largest_fsdp_unit(spec, p, layout) if knobs.megatron_fsdp else None
    return _HeldBytes(model_state_bytes(p, layout, knobs, arch, largest_unit=largest),
                      int(offloaded_host_bytes(p, layout, knobs)),
                      _activation_sums(spec, knobs, ctx, held_kinds(spec, st)))


def _stage_memory(layout: Layout, p, held: _HeldBytes, parts: _WallParts) -> StageMemory:
    flight = in_flight(layout, p.stage, parts.microbatches)
    items = {**held.state, **_activation_items(held.activations, flight)}
    if p.loss:
        items.update(parts.loss)
    items.update(parts.shared)
    allocated = sum(v for k, v in items.items() if k not in ("cuda_context", "nccl_buffers"))
    items["fragmentation"] = round(allocated * parts.overheads["fragmentation_fraction"])
    return StageMemory(stage=p.stage, params=p.total, items=items, in_flight_microbatches=flight, host_bytes=held.host)
