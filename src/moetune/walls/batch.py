"""Memory and step time of many layouts at once (numpy arrays), for the planner's full search.

The formulas are the scalar ones (activations.layer_activation_items, memory.model_state_bytes,
memory.in_flight, step.layer_time, step.heads_seconds, step.p2p_seconds, step.iteration_terms): they are plain arithmetic, so
they accept arrays whose first axis is the candidate and whose second is the pipeline stage. Only the
per-stage assembly is written here; tests check it against `estimate` candidate by candidate.
"""

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import LayerKind, ModelSpec
from moetune.walls.activations import (
    ActivationContext,
    full_recompute_layer_bytes,
    layer_activation_items,
    offload_staging_bytes,
)
from moetune.walls.compute import layer_compute_seconds, rates
from moetune.walls.memory import in_flight, logits_bytes, model_state_bytes, overhead_bytes
from moetune.walls.rank_params import StageStructure, padded_vocab_size, per_rank, stage_structures, structure_sums
from moetune.walls.step import heads_seconds, iteration_terms, layer_time, p2p_seconds


@dataclass(kw_only=True, slots=True)
class LayoutBatch:
    """Candidates (layout x micro-batch size) as arrays: (n, 1) per layout field, (n, S) per stage.
    Stages with the same contents are kept once, at their lowest index (the one holding the most
    micro-batches in flight), so S is small."""

    layouts: list[Layout]  # shared by subsets: candidate i is layouts[rows[i]]
    rows: np.ndarray  # (n,) index into layouts
    mbs: np.ndarray  # (n, 1)
    fields: SimpleNamespace  # tp, cp, pp, vpp, ep, etp, dp, edp, world_size, sp: (n, 1)
    kinds: list[LayerKind]
    counts: np.ndarray  # (n, S, K) decoder layers of each kind per stage
    mtp: np.ndarray  # (n, S)
    loss: np.ndarray  # (n, S) bool
    valid: np.ndarray  # (n, S) bool: stage exists
    stage_index: np.ndarray  # (n, S) pipeline rank of the stage
    dense: np.ndarray  # (n, S) parameters per rank
    expert: np.ndarray
    vocab: np.ndarray
    padded_vocab: np.ndarray  # (n, 1)
    cache: dict = field(default_factory=dict)  # per-plan memo of knob-independent pieces
    parent: "LayoutBatch | None" = None  # the batch a subset was cut from (its memo is shared, sliced)
    parent_rows: np.ndarray | None = None

    @property
    def size(self) -> int:
        return len(self.rows)

    def layout(self, i: int) -> Layout:
        return self.layouts[self.rows[i]]

    def subset(self, rows: np.ndarray) -> "LayoutBatch":
        """The candidates at `rows` (a fresh memo: cached arrays are per batch)."""
        arrays = {k: getattr(self, k)[rows] for k in ("rows", "mbs", "counts", "mtp", "loss", "valid", "stage_index",
                                                      "dense", "expert", "vocab", "padded_vocab")}
        fields = SimpleNamespace(**{k: v[rows] for k, v in vars(self.fields).items()})
        return LayoutBatch(layouts=self.layouts, fields=fields, kinds=self.kinds, parent=self, parent_rows=rows,
                           **arrays)

    def shared(self, key: tuple, make_on):
        """A per-candidate dict of arrays computed once on the root batch and sliced for subsets."""
        if self.parent is None:
            return self.memo(key, lambda: make_on(self))
        whole = self.parent.shared(key, make_on)
        return {k: v[self.parent_rows] if isinstance(v, np.ndarray) and v.ndim else v for k, v in whole.items()}

    def memo(self, key: tuple, make):
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]


def _signature(lay: Layout) -> tuple:
    return (lay.pp, lay.vpp, lay.first_stage_layers, lay.last_stage_layers, lay.pipeline_layout,
            lay.account_for_embedding, lay.account_for_loss)


def _distinct(structs: list[StageStructure]) -> list[StageStructure]:
    seen, out = set(), []
    for st in structs:
        key = (st.kind_counts, st.embeddings, st.final_norms, st.mtp_layers, st.outputs)
        if key not in seen:
            seen.add(key)
            out.append(st)
    return out


def build_batch(spec: ModelSpec, candidates: list[tuple[Layout, int]]) -> LayoutBatch:
    kinds = sorted(set(spec.layers), key=lambda k: (k.mixer, k.mlp))
    shapes = {}
    for lay, _ in candidates:
        shapes.setdefault(_signature(lay), lay)
    structures = {sig: _distinct(stage_structures(spec, lay)) for sig, lay in shapes.items()}
    n, depth = len(candidates), max(len(v) for v in structures.values())
    counts = np.zeros((n, depth, len(kinds)))
    mtp, loss, valid = np.zeros((n, depth)), np.zeros((n, depth), bool), np.zeros((n, depth), bool)
    index = np.zeros((n, depth), int)
    dense, expert, vocab = np.zeros((n, depth)), np.zeros((n, depth)), np.zeros((n, depth))
    names = ("tp", "cp", "pp", "vpp", "ep", "etp", "dp", "edp", "world_size", "sp")
    table = np.array([[getattr(lay, k) for k in names] for lay, _ in candidates], dtype=np.int64)
    fields = SimpleNamespace(**{k: table[:, j:j + 1] for j, k in enumerate(names)})
    fields.sp = fields.sp.astype(bool)
    sig_of = [_signature(lay) for lay, _ in candidates]
    for sig, structs in structures.items():
        rows = np.array([i for i, s in enumerate(sig_of) if s == sig])
        sub = SimpleNamespace(**{k: getattr(fields, k)[rows, 0] for k in ("tp", "ep", "etp")})
        for j, st in enumerate(structs):
            for kind, c in st.kind_counts:
                counts[rows, j, kinds.index(kind)] = c
            mtp[rows, j], loss[rows, j], valid[rows, j], index[rows, j] = st.mtp_layers, st.outputs > 0, True, \
                st.stage
            for tp in np.unique(sub.tp):
                sel = sub.tp == tp
                layout_view = SimpleNamespace(tp=tp, ep=sub.ep[sel], etp=sub.etp[sel])
                sums = structure_sums(spec, st, vocab=padded_vocab_size(spec.vocab_size, int(tp)),
                                      tied_copy=not spec.untie_embeddings_and_output_weights and sig[0] > 1,
                                      layer_spec="te")
                d, e, v = per_rank(sums, layout_view)
                dense[rows[sel], j], expert[rows[sel], j], vocab[rows[sel], j] = d, e, v
    padded = np.array([[padded_vocab_size(spec.vocab_size, int(t))] for t in fields.tp[:, 0]])
    return LayoutBatch(layouts=[lay for lay, _ in candidates], rows=np.arange(n),
                       mbs=np.array([[m] for _, m in candidates]),
                       fields=fields, kinds=kinds, counts=counts, mtp=mtp, loss=loss, valid=valid,
                       stage_index=index, dense=dense, expert=expert, vocab=vocab, padded_vocab=padded)


def _ctx(b: LayoutBatch, seq: int, knobs: Knobs) -> ActivationContext:
    f = b.fields
    return ActivationContext(seq_length=seq, micro_batch_size=b.mbs, tp=f.tp, cp=f.cp, etp=f.etp,
                             sequence_parallel=f.sp, token_imbalance=knobs.imbalance, fp8_gemm_inputs=knobs.fp8,
                             offload_modules=knobs.offload_modules,
                             recompute_modules=knobs.effective_modules if knobs.recompute == "selective"
                             else frozenset())


def _per_stage(b: LayoutBatch, spec: ModelSpec, per_kind) -> np.ndarray:
    """Sum a per-layer-kind quantity (arrays of shape (n, 1)) over each stage's layers and MTP layers."""
    total = sum(b.counts[:, :, k] * per_kind(kind) for k, kind in enumerate(b.kinds))
    if spec.mtp_num_layers:
        total = total + b.mtp * per_kind(spec.mtp_layer_kind)
    return total


def _activations(spec: ModelSpec, b: LayoutBatch, seq: int, gbs: int, knobs: Knobs) -> np.ndarray:
    f, ctx = b.fields, _ctx(b, seq, knobs)
    flight = b.memo(("flight", gbs), lambda: in_flight(f, b.stage_index, gbs // (b.mbs * f.dp)))
    if knobs.recompute == "full":
        stored = _per_stage(b, spec, lambda k: full_recompute_layer_bytes(spec, ctx))
        working = np.max([sum(layer_activation_items(spec, k, ctx).values()) for k in b.kinds], axis=0)
        return stored * flight + working
    stored = _per_stage(b, spec, lambda k: sum(layer_activation_items(spec, k, ctx).values())) * flight
    return stored + offload_staging_bytes(spec, ctx)


def batch_memory(spec: ModelSpec, b: LayoutBatch, seq: int, gbs: int, knobs: Knobs, overheads: dict) -> np.ndarray:
    """Peak bytes over stages, per candidate (same line items as memory.memory_wall)."""
    f = b.fields
    params = SimpleNamespace(dense=b.dense, expert=b.expert, vocab=b.vocab)
    states_key = ("states", knobs.precision, knobs.optimizer_offload_fraction, knobs.main_grads_fp32,
                  knobs.adam_moments_bytes, knobs.distributed_optimizer)
    acts_key = ("acts", knobs.fp8, knobs.recompute, knobs.effective_modules, knobs.routing, knobs.offload_modules,
                gbs)

    def stage_max():  # the knob constants below are the same on every stage, so the max comes first
        states = b.memo(states_key, lambda: sum(model_state_bytes(params, f, knobs).values()))
        acts = b.memo(acts_key, lambda: _activations(spec, b, seq, gbs, knobs))
        logits = b.memo(("logits", seq), lambda: np.where(
            b.loss, logits_bytes(spec, seq // f.cp * b.mbs, b.padded_vocab // f.tp), 0))
        return np.where(b.valid, states + acts + logits, 0).max(axis=1)

    peak_items = b.memo(("stage_max", states_key, acts_key), stage_max)
    over = overhead_bytes(knobs, overheads)
    outside = over.get("cuda_context", 0) + over.get("nccl_buffers", 0)
    return (peak_items + sum(over.values()) - outside) * (1 + overheads["fragmentation_fraction"]) + outside


def _stage_part(spec: ModelSpec, b: LayoutBatch, seq: int, gbs: int, knobs: Knobs, gpu: GpuSpec, eff: dict) -> dict:
    """Per-micro-batch time of each candidate's slowest stage, by wall (independent of the optimizer knobs)."""
    f, ctx, r = b.fields, _ctx(b, seq, knobs), rates(gpu, knobs.precision, eff)
    kinds = set(b.kinds) | ({spec.mtp_layer_kind} if spec.mtp_num_layers else set())
    def compute_on(kind):
        def make(batch):  # only the total and the attention part are needed downstream (layer_time)
            c = layer_compute_seconds(spec, kind, _ctx(batch, seq, knobs), r, batch.fields.ep,
                                      recompute=knobs.recompute, modules=knobs.effective_modules, eff=eff)
            return {"core_attn": c["core_attn"], "rest": sum(c.values()) - c["core_attn"]}
        return make

    computed = {k: b.shared(("compute", k, knobs.precision, knobs.recompute, knobs.effective_modules, knobs.routing),
                            compute_on(k)) for k in kinds}
    times = {k: layer_time(spec, k, f, ctx, gpu, eff, knobs, r, compute=computed[k]) for k in kinds}
    compute = _per_stage(b, spec, lambda k: sum(times[k].compute.values()))
    comm = _per_stage(b, spec, lambda k: sum(times[k].comm.values()))
    host = _per_stage(b, spec, lambda k: times[k].host)
    compute = compute + heads_seconds(spec, ctx.tokens, b.loss + b.mtp, f.tp, b.padded_vocab, r)
    comm = comm + p2p_seconds(spec, ctx, f.pp, gpu, eff) * eff["p2p_exposed"]
    total = np.where(b.valid, compute + comm + host, -1.0)
    slow = total.argmax(axis=1)[:, None]
    pick = lambda a: np.take_along_axis(np.broadcast_to(a, total.shape), slow, axis=1)[:, 0]  # noqa: E731
    return {"compute": pick(compute), "comm": pick(comm), "host": pick(host), "total": pick(total)}


def time_key(knobs: Knobs) -> tuple:
    """Knobs that change the per-stage time (the optimizer knobs only add per-iteration terms)."""
    return (knobs.precision, knobs.dispatcher, knobs.recompute, knobs.effective_modules, knobs.cuda_graph_scope,
            knobs.ep_overlap, knobs.delay_wgrad, knobs.tp_comm_overlap, knobs.routing, knobs.imbalance,
            knobs.offload_modules)


def batch_step_seconds(spec: ModelSpec, b: LayoutBatch, seq: int, gbs: int, knobs: Knobs, gpu: GpuSpec,
                       eff: dict) -> dict[str, np.ndarray]:
    """Step seconds and walls per candidate (same assembly as step.step_time)."""
    f = b.fields
    stage = b.memo(("stage", *time_key(knobs), gbs, seq), lambda: _stage_part(spec, b, seq, gbs, knobs, gpu, eff))
    m = (gbs // (b.mbs * f.dp))[:, 0]
    dp, optimizer, offload = b.memo(("dp", knobs.main_grads_fp32, knobs.distributed_optimizer,
                                     knobs.adam_moments_bytes, knobs.optimizer_offload_fraction),
                                    lambda: _data_parallel(b, knobs, gpu, eff))
    walls = {"compute": m * stage["compute"] + optimizer + offload,
             "communication": m * stage["comm"] + dp * (1 - eff["dp_overlap_hide"]),
             "bubble": ((f.pp - 1) / f.vpp)[:, 0] * stage["total"], "host": m * stage["host"]}
    walls["step"] = sum(walls.values())
    return walls


def _data_parallel(b: LayoutBatch, knobs: Knobs, gpu: GpuSpec, eff: dict) -> tuple:
    """step.iteration_terms for each candidate's largest stage."""
    big = np.where(b.valid, b.dense + b.expert, -1).argmax(axis=1)[:, None]
    dense, expert = np.take_along_axis(b.dense, big, 1), np.take_along_axis(b.expert, big, 1)
    return tuple(x[:, 0] for x in iteration_terms(dense, expert, b.fields, knobs, gpu, eff))
