"""The planner's candidates (layout x micro-batch size) as numpy arrays, for walls/batch.py and walls/batch_bytes.py.

One row per candidate; per-stage quantities have a second axis. Every array is a column view of two packed
matrices (integers and floats), so cutting a subset of candidates is two takes, not twenty.
"""

from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter, itemgetter
from types import SimpleNamespace

import numpy as np

from moetune.layout.layout import Layout
from moetune.specs.model import LayerKind, ModelSpec
from moetune.walls.rank_params import (
    RankShare,
    StageStructure,
    model_padded_vocab,
    per_rank,
    stage_structures,
    structure_sums,
)


@dataclass(kw_only=True, slots=True)
class LayoutBatch:
    """Candidates (layout x micro-batch size) as arrays: (n, 1) per layout field, (n, S) per stage.
    Stages with the same contents are kept once, at their lowest index (the one holding the most
    micro-batches in flight), so S is small; `ranks` counts the pipeline ranks each stands for."""

    layouts: list[Layout]  # shared by subsets: candidate i is layouts[rows[i]]
    rows: np.ndarray  # (n,) index into layouts
    mbs: np.ndarray  # (n, 1)
    fields: SimpleNamespace  # tp, cp, pp, vpp, ep, etp, dp, edp, world_size, sp: (n, 1)
    kinds: list[LayerKind]
    kind_layers: np.ndarray  # (K,) the model's decoder layers of each of `kinds` (walls/split_floor.py)
    counts: np.ndarray  # (n, S, K) decoder layers of each kind per stage
    mtp: np.ndarray  # (n, S)
    loss: np.ndarray  # (n, S) bool
    valid: np.ndarray  # (n, S) bool: stage exists
    ranks: np.ndarray  # (n, S) pipeline ranks with this stage's contents (0 where it does not exist)
    stage_index: np.ndarray  # (n, S) pipeline rank of the stage
    padded_vocab: np.ndarray  # (n, 1)
    params: np.ndarray  # the root batch's (N, 6S) parameters per rank (rank_params.RankShare's fields), read by `rows`
    cache: dict = field(default_factory=dict)  # per-plan memo of knob-independent pieces
    origin: "LayoutBatch | None" = None  # the batch every subset was cut from (None: this one); `rows` index it
    packed: np.ndarray | None = None  # every integer array above as columns, so a subset is one take

    @property
    def size(self) -> int:
        return len(self.rows)

    def _params(self, i: int) -> np.ndarray:
        depth = self.valid.shape[1]
        cols = slice(i * depth, (i + 1) * depth)
        if self.origin is None:
            return self.params[:, cols]
        return self.memo(("params", i), lambda: self.params[self.rows, cols])

    # (n, S) parameters per rank, one array per field of rank_params.RankShare, in its order
    dense = property(lambda self: self._params(0))
    expert = property(lambda self: self._params(1))
    vocab = property(lambda self: self._params(2))
    nonmatrix = property(lambda self: self._params(3))
    expert_nonmatrix = property(lambda self: self._params(4))
    quantized = property(lambda self: self._params(5))

    def layout(self, i: int) -> Layout:
        return self.layouts[self.rows[i]]

    def subset(self, rows: np.ndarray) -> "LayoutBatch":
        """The candidates at `rows` (a fresh memo: cached arrays are per batch)."""
        return _unpack(self.packed.take(rows, axis=0), self.params, layouts=self.layouts, kinds=self.kinds,
                       kind_layers=self.kind_layers, origin=self.root())

    def root(self) -> "LayoutBatch":
        return self.origin or self

    def memo(self, key: tuple, make):
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]


# what a layout's stage structures depend on (rank_params.stage_structures): read in one call a layout
_signature = attrgetter("pp", "vpp", "first_stage_layers", "last_stage_layers", "pipeline_layout",
                        "account_for_embedding", "account_for_loss")


def _distinct(structs: list[StageStructure]) -> list[tuple[StageStructure, int]]:
    """Each distinct stage (its first rank) and how many ranks hold the same contents."""
    out: dict[tuple, list] = {}
    for st in structs:
        key = (st.kind_counts, st.embeddings, st.final_norms, st.mtp_layers, st.outputs)
        out.setdefault(key, [st, 0])[1] += 1
    return [(st, n) for st, n in out.values()]


def _index(candidates: list[tuple[Layout, int]]) -> tuple:
    """The candidates' layouts, their distinct layouts (each comes once per micro-batch size; by identity, in first-seen
    order), each candidate's among those (`which`), and the first layout of each distinct stage signature with each
    distinct layout's signature group: C-level passes and numpy sorts over the 10^4 candidates rather than a Python
    loop (or a dict insertion) each."""
    lays = list(map(itemgetter(0), candidates))
    ids = np.fromiter(map(id, lays), np.int64, len(lays))
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(first)  # the distinct layouts by first appearance
    rank = np.empty(len(order), np.intp)
    rank[order] = np.arange(len(order))
    which = rank[inverse.reshape(-1)]
    distinct = list(map(lays.__getitem__, first[order].tolist()))
    sigs = list(map(_signature, distinct))
    group = dict(zip(dict.fromkeys(sigs), range(len(sigs))))  # each signature's group, in first-seen order
    first_of = dict(zip(reversed(sigs), reversed(distinct)))  # each signature's first layout (the last write wins)
    shapes = {sig: first_of[sig] for sig in group}
    return lays, distinct, which, shapes, np.fromiter(map(group.__getitem__, sigs), np.intp, len(sigs))[which]


def build_batch(spec: ModelSpec, candidates: list[tuple[Layout, int]]) -> LayoutBatch:
    # a total order (gpt-oss's sliding-window and full layers tie on mixer and MLP): a set's order follows the
    # process's string hashes, and the per-stage sums would add the kinds in another order run to run
    kinds = sorted(set(spec.layers), key=lambda k: (k.mixer, k.mlp, k.window is not None, k.window or 0))
    kind_layers = np.array([spec.layers.count(k) for k in kinds])  # counted once: every knob set's floor reads it
    lays, distinct, which, shapes, sig_id = _index(candidates)
    structures = {sig: _distinct(stage_structures(spec, lay)) for sig, lay in shapes.items()}
    n, depth = len(candidates), max(len(v) for v in structures.values())
    # one C call a layout, flattened: numpy reads a flat iterator of ints far faster than a list of tuples
    table = np.fromiter(chain.from_iterable(map(attrgetter(*_FIELDS), distinct)), np.int64,
                        len(distinct) * len(_FIELDS)).reshape(len(distinct), len(_FIELDS))[which]
    fields = SimpleNamespace(**{k: table[:, j:j + 1] for j, k in enumerate(_FIELDS)})
    fields.sp = fields.sp.astype(bool)
    tps, tp_index = np.unique(fields.tp[:, 0], return_inverse=True)
    padded = np.array([model_padded_vocab(spec, int(t)) for t in tps])
    mbs = np.fromiter(map(itemgetter(1), candidates), np.int64, n)
    # every integer array as columns of one int32 matrix (see _unpack), filled in place
    k, f = len(kinds), len(_FIELDS)
    ints = np.zeros((n, 3 + f + (5 + k) * depth), np.int32)
    ints[:, 0], ints[:, 1], ints[:, 2:2 + f], ints[:, 2 + f] = np.arange(n), mbs, table, padded[tp_index]
    stage = 3 + f
    index, loss, valid = (ints[:, stage + i * depth:stage + (i + 1) * depth] for i in range(3))
    counts = ints[:, stage + 3 * depth:stage + (3 + k) * depth].reshape(n, depth, k)
    mtp, ranks = (ints[:, stage + (3 + k + i) * depth:stage + (4 + k + i) * depth] for i in range(2))
    params = np.zeros((n, len(RankShare._fields), depth))  # rank_params.per_rank's, field by field
    for g, (sig, structs) in enumerate(structures.items()):
        rows = np.nonzero(sig_id == g)[0]
        sub = SimpleNamespace(**{k: getattr(fields, k)[rows, 0] for k in ("tp", "ep", "etp")})
        for j, (st, same) in enumerate(structs):
            for kind, c in st.kind_counts:
                counts[rows, j, kinds.index(kind)] = c
            mtp[rows, j], loss[rows, j], valid[rows, j], index[rows, j] = st.mtp_layers, st.outputs > 0, True, \
                st.stage
            ranks[rows, j] = same
            for tp in np.array(sorted(set(sub.tp.tolist())), dtype=sub.tp.dtype):  # np.unique: see _group_sizes
                sel = sub.tp == tp
                at = rows[sel]
                layout_view = SimpleNamespace(tp=tp, ep=sub.ep[sel], etp=sub.etp[sel])
                sums = structure_sums(spec, st, vocab=model_padded_vocab(spec, int(tp)),
                                      tied_copy=not spec.untie_embeddings_and_output_weights and sig[0] > 1,
                                      layer_spec="te")
                for i, share in enumerate(per_rank(sums, layout_view)):
                    params[at, i, j] = share
    return _unpack(ints, params.reshape(n, -1), layouts=lays, kinds=kinds, kind_layers=kind_layers)


_FIELDS = ("tp", "cp", "pp", "vpp", "ep", "etp", "dp", "edp", "world_size", "sp")


def _unpack(ints: np.ndarray, params: np.ndarray, **rest) -> LayoutBatch:
    """A LayoutBatch whose integer arrays are column views of one packed int32 matrix (see build_batch); the
    (n, 1) layout fields are widened to int64 (products such as tokens x vocabulary exceed 2^31)."""
    k, f = len(rest["kinds"]), len(_FIELDS)
    depth = (ints.shape[1] - 3 - f) // (5 + k)
    def col(i, w=1):
        return ints[:, i:i + w]

    fields = SimpleNamespace(**{name: col(2 + j).astype(np.int64) for j, name in enumerate(_FIELDS)})
    fields.sp = fields.sp != 0
    stage = 3 + f
    # the rows as a contiguous index array: numpy converts a strided int32 one on every gather that reads it
    return LayoutBatch(rows=ints[:, 0].astype(np.intp), mbs=col(1).astype(np.int64), fields=fields,
                       padded_vocab=col(2 + f).astype(np.int64), stage_index=col(stage, depth),
                       loss=col(stage + depth, depth) != 0, valid=col(stage + 2 * depth, depth) != 0,
                       counts=col(stage + 3 * depth, depth * k).reshape(-1, depth, k),
                       mtp=col(stage + (3 + k) * depth, depth), ranks=col(stage + (4 + k) * depth, depth),
                       params=params, packed=ints, **rest)


_SHAPE = ("mbs", "tp", "cp", "etp", "ep", "sp")


def distinct_shapes(b: LayoutBatch) -> tuple[SimpleNamespace, np.ndarray]:
    """The root batch's distinct (MBS, TP, CP, ETP, EP, SP) rows as (u, 1) fields, and each candidate's row
    among them: per-layer compute, communication and host time and activation bytes depend on nothing else,
    and a few hundred shapes cover 10^4 candidates."""
    if b.origin is not None:
        u, inverse = distinct_shapes(b.origin)
        return u, b.memo(("shape_rows",), lambda: inverse.take(b.rows))

    def make():
        cols = np.hstack([b.mbs, *(getattr(b.fields, k) for k in _SHAPE[1:])]).astype(np.int64)
        code = np.zeros(b.size, np.int64)
        for j in range(cols.shape[1]):  # mixed radix: one int64 key per row, faster than np.unique(axis=0)
            code = code * (int(cols[:, j].max()) + 1) + cols[:, j]
        _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
        u = SimpleNamespace(**{k: cols[first, j:j + 1] for j, k in enumerate(_SHAPE)})
        u.sp = u.sp != 0
        return u, inverse.reshape(-1)
    return b.memo(("shapes",), make)
