"""Parameters held by one rank of each pipeline stage, split into dense and routed-expert parts.

The dense part is replicated over the attention mesh's DP x CP ranks, the expert part over the
expert mesh's EDP ranks; the distributed optimizer shards each over that group (see model_state.py).
"""

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from types import MappingProxyType
from typing import NamedTuple

from moetune.layout.layout import Layout
from moetune.layout.pipeline import pipeline_chunks, split_key
from moetune.memo import remembered, remembered_stages
from moetune.specs.model import LayerKind, ModelSpec
from moetune.walls.params import (
    LayerSpec,
    Tensor,
    embedding_tensors,
    final_norm_tensors,
    layer_tensors,
    mtp_tensors,
    output_tensors,
)

MAKE_VOCAB_SIZE_DIVISIBLE_BY = 128  # Megatron-LM --make-vocab-size-divisible-by default


def padded_vocab_size(vocab: int, tp: int, divisible_by: int = MAKE_VOCAB_SIZE_DIVISIBLE_BY) -> int:
    """Megatron pads the vocabulary to a multiple of divisible_by * TP
    (megatron/training/tokenizer/tokenizer.py::_vocab_size_with_padding; Bridge calculate_padded_vocab_size)."""
    multiple = divisible_by * tp
    return -(-vocab // multiple) * multiple


def model_padded_vocab(spec: ModelSpec, tp):
    """The model's vocabulary as Megatron pads it at this TP (padded_vocab_size with the model's divisor); `tp` may
    be an array."""
    return padded_vocab_size(spec.vocab_size, tp, spec.vocab_divisor)


def vocab_shard(spec: ModelSpec, tp):
    """The rows of the padded vocabulary one TP rank holds (VocabParallelEmbedding, the output layer's
    ColumnParallelLinear): what its logits and its LM head's weight cache are sized by (walls/memory.py)."""
    return model_padded_vocab(spec, tp) // tp


@dataclass(kw_only=True, slots=True, frozen=True)
class StageParams:
    stage: int
    dense: int  # non-expert parameters on one rank of this stage
    expert: int  # routed-expert parameters on one rank of this stage
    vocab: int  # embedding / output-layer parameters among `dense` (not GEMM weights TE quantizes)
    nonmatrix: int  # parameters among `dense` Megatron-Core builds other than 2-D (params.Tensor.matrix)
    expert_nonmatrix: int  # the same among `expert` (routed experts' biases)
    quantized: int  # parameters among `dense` and `expert` TE quantizes under an FP8/FP4 recipe (params.Tensor)
    layers: tuple[int, ...]  # decoder layer ids held (all virtual chunks)
    mtp_layers: int
    loss: bool  # holds the output layer (logits and loss activations)

    @property
    def total(self) -> int:
        return self.dense + self.expert

    @property
    def fsdp_units(self) -> int:
        """Megatron FSDP units held: one per decoder and MTP layer (mcore_fsdp_adapter.py: TransformerLayer)."""
        return len(self.layers) + self.mtp_layers


def quantized_split(p) -> tuple:
    """(dense, routed-expert) parameters among `p.quantized` (StageParams' fields, or the planner's arrays of them):
    every routed-expert 2-D weight is a TE GroupedLinear's and its biases are vectors (params._ffn), so the experts'
    quantized ones are their 2-D ones and the rest of `quantized` is dense."""
    expert = p.expert - p.expert_nonmatrix
    return p.quantized - expert, expert


def _divisor(shard: str, layout: Layout):
    return {"tp": layout.tp, "rep": 1, "vocab": layout.tp, "expert": layout.ep * layout.etp,
            "expert_rep": layout.ep}[shard]


ShardKey = tuple[str, bool, bool, bool]  # (shard, is_expert, is 2-D, quantized)
ShardSums = Mapping[ShardKey, int]  # ShardKey -> elements


def shard_sums(tensors: list[Tensor]) -> ShardSums:
    """Elements by shard, read-only: kind_sums and _piece_sums cache the result and hand the one mapping to every
    caller, so a caller writing to it would change every later estimate of the model."""
    out: dict[ShardKey, int] = {}
    for t in tensors:
        if t.megatron:
            key = (t.shard, t.expert, t.matrix, t.quantized)
            out[key] = out.get(key, 0) + t.numel
    return MappingProxyType(out)


@cache
def kind_sums(spec: ModelSpec, kind: LayerKind, layer_spec: LayerSpec) -> ShardSums:
    """Elements of one decoder layer of this kind, grouped by how they shard (cached per model)."""
    return shard_sums(layer_tensors(spec, kind, layer_spec))


@cache
def _piece_sums(spec: ModelSpec, vocab: int, piece: str, tied_copy: bool, layer_spec: LayerSpec) -> ShardSums:
    tensors = {"embedding": lambda: embedding_tensors(spec, vocab), "final_norm": lambda: final_norm_tensors(spec),
               "mtp": lambda: mtp_tensors(spec, layer_spec),
               "output": lambda: output_tensors(spec, vocab, tied_copy=tied_copy)}[piece]()
    return shard_sums(tensors)


@dataclass(kw_only=True, slots=True, frozen=True)
class StageStructure:
    """What one rank of a pipeline stage holds, independent of TP/EP sizes: layers by kind and the
    other modules. A chunk holding MTP layers also holds an embedding (MTP embeds the shifted tokens;
    gpt_model.py builds `embedding` when pre_process or mtp_process); the decoder's final norm sits with
    the last decoder layer (transformer_block.py)."""

    stage: int
    kind_counts: tuple[tuple[LayerKind, int], ...]
    embeddings: int
    final_norms: int
    mtp_layers: int
    outputs: int
    layers: tuple[int, ...]
    # What the stage holds, its place and its layers' ids aside: stages alike in it hold the same parameters and
    # activations, and take the same time (the walls' memos key a stage by it, several lookups a stage and estimate)
    held: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "held", _Held((self.kind_counts, self.embeddings, self.final_norms, self.mtp_layers,
                                                self.outputs)))


class _Held(tuple):
    """StageStructure.held: a tuple (equal to, and hashing as, the plain one) whose hash is worked out once, not again
    over its layer kinds at each of the walls' lookups."""

    def __new__(cls, parts: tuple):
        self = super().__new__(cls, parts)
        self._hash = tuple.__hash__(self)
        return self

    def __hash__(self) -> int:
        return self._hash


def held_kinds(spec: ModelSpec, st: StageStructure) -> dict[LayerKind, int]:
    """A stage's decoder and MTP layers by kind, in the order its layers come (the MTP layers' kind last, or added to
    the same kind's count): what the walls evaluate once a kind and multiply by its count."""
    kinds = dict(st.kind_counts)
    if st.mtp_layers:
        kinds[spec.mtp_layer_kind] = kinds.get(spec.mtp_layer_kind, 0) + st.mtp_layers
    return kinds


# stage_structures by the model, the layout's split (pipeline.split_key) and include_mtp: asked twice per estimate
# (memory and time), and again for each split a re-split weighs, under several layouts' sizes
_STRUCTURES: dict = {}


def stage_structures(spec: ModelSpec, layout: Layout, include_mtp: bool = True) -> tuple[StageStructure, ...]:
    """Each pipeline stage's structure (read-only: the result is shared)."""
    return remembered(_STRUCTURES, (spec, *split_key(layout), include_mtp),
                      lambda: _stage_structures(spec, layout, include_mtp), 4096)


def _stage_structures(spec: ModelSpec, layout: Layout, include_mtp: bool) -> tuple[StageStructure, ...]:
    grid = pipeline_chunks(layout, spec.num_layers, spec.mtp_num_layers if include_mtp else 0)
    out = []
    for stage, chunks in enumerate(grid):
        layers = tuple(i for c in chunks for i in c.layers)
        out.append(StageStructure(
            stage=stage, kind_counts=tuple(Counter(map(spec.layers.__getitem__, layers)).items()), layers=layers,
            embeddings=sum(bool(c.embedding or c.mtp_layers) for c in chunks),
            # with MTP the final norm follows the last decoder layer, else the post-process stage (Megatron-Core
            # transformer_block.py has_final_layernorm_in_this_stage)
            final_norms=int(spec.num_layers - 1 in layers) if spec.mtp_num_layers and include_mtp
            else sum(c.loss for c in chunks), mtp_layers=sum(c.mtp_layers for c in chunks),
            outputs=sum(c.loss for c in chunks),
        ))
    return tuple(out)


def structure_sums(spec: ModelSpec, st: StageStructure, *, vocab: int, tied_copy: bool,
                   layer_spec: LayerSpec) -> ShardSums:
    """Elements of a stage by shard (TP/EP-independent)."""
    parts: list[tuple[ShardSums, int]] = [(kind_sums(spec, k, layer_spec), n) for k, n in st.kind_counts]
    pieces = (("embedding", st.embeddings), ("final_norm", st.final_norms), ("mtp", st.mtp_layers),
              ("output", st.outputs))
    parts += [(_piece_sums(spec, vocab, name, tied_copy, layer_spec), n) for name, n in pieces if n]
    out: dict[ShardKey, int] = {}
    for sums, times in parts:
        for key, numel in sums.items():
            out[key] = out.get(key, 0) + numel * times
    return out


class RankShare(NamedTuple):
    """Elements one rank holds (StageParams' fields of the same names)."""

    dense: int
    expert: int
    vocab: int
    nonmatrix: int
    expert_nonmatrix: int
    quantized: int


def per_rank(sums: ShardSums, layout: Layout) -> RankShare:
    """Elements held by one rank; shards divide exactly once the layout is validated. Divisors may be numpy arrays
    (the planner's batched layouts)."""
    dense = expert = vocab = nonmatrix = expert_nonmatrix = quantized = 0
    for (shard, is_expert, matrix, is_quantized), numel in sums.items():
        share = numel // _divisor(shard, layout)
        if is_expert:
            expert = expert + share
            expert_nonmatrix = expert_nonmatrix if matrix else expert_nonmatrix + share
        else:
            dense = dense + share
            nonmatrix = nonmatrix if matrix else nonmatrix + share
        if shard == "vocab":
            vocab = vocab + share
        quantized = quantized + share if is_quantized else quantized
    return RankShare(dense, expert, vocab, nonmatrix, expert_nonmatrix, quantized)


def layer_rank_params(spec: ModelSpec, kind: LayerKind, layout, layer_spec: LayerSpec = "te"):
    """Parameters of one decoder layer of this kind on one rank, dense and expert (a Megatron FSDP unit); `layout` may
    hold numpy arrays (per_rank)."""
    return sum(per_rank(kind_sums(spec, kind, layer_spec), layout)[:2])


# One rank's elements of a stage (per_rank) by the model, layer spec, the sizes that divide them (TP, EP, ETP) and
# whether the output layer keeps its own copy of a tied embedding, then by what the stage holds (StageStructure.held):
# a layout's middle stages hold the same, and so do most stages of each split a re-split weighs
_SHARES: dict = {}


@lru_cache(maxsize=4096)  # asked by the memory and the time estimate of each layout, and again by each knob set of a
# layout the planner re-splits (planner/resplit.py), whose splits repeat across its knob sets
def stage_params(spec: ModelSpec, layout: Layout, *, layer_spec: LayerSpec = "te",
                 include_mtp: bool = True) -> tuple[StageParams, ...]:
    """One entry per pipeline stage, for one rank of that stage (all its virtual chunks together); read-only, as
    the result is shared."""
    vocab = model_padded_vocab(spec, layout.tp)
    tied_copy = not spec.untie_embeddings_and_output_weights and layout.pp > 1
    shares = remembered_stages(_SHARES, (spec, layer_spec, layout.tp, layout.ep, layout.etp, tied_copy), dict, 256)
    result = []
    for st in stage_structures(spec, layout, include_mtp):
        held = st.held
        if held not in shares:
            shares[held] = per_rank(structure_sums(spec, st, vocab=vocab, tied_copy=tied_copy, layer_spec=layer_spec),
                                    layout)
        result.append(StageParams(stage=st.stage, **shares[held]._asdict(), layers=st.layers,
                                  mtp_layers=st.mtp_layers, loss=st.outputs > 0))
    return tuple(result)


def largest_fsdp_unit(spec: ModelSpec, p: StageParams, layout: Layout, layer_spec: LayerSpec = "te") -> int:
    """Parameters on one rank of the largest Megatron FSDP unit stage `p` holds, which sizes the unit gathered and the
    gradients pending (walls/model_state.py megatron_fsdp_items); asked for only under Megatron FSDP. The units are
    every decoder layer and the decoder layer inside each MTP layer (multi_token_prediction.py
    MultiTokenPredictionLayer builds one, transformer_layer @core_v0.16.0, mtp_model_layer @core_v0.18.2; its norms
    and eh_proj sit outside it): mcore_fsdp_adapter.py fsdp_unit_modules, TransformerLayer to core_v0.18.2 (MoE
    layers are units there too, MoETransformerLayer being a TransformerLayer), TransformerLayer, MoETransformerLayer
    and MambaLayer from core_v0.19.0 (:162). A Mamba layer is counted as a unit, as core_v0.19.0 makes it; before
    it MambaLayer is no unit, so (as the embedding) its weights are gathered by its first forward and stay whole till
    the step ends (megatron_fsdp.py _register_fsdp_hooks @core_v0.18.2: no post-forward release), which moetune,
    having no release input, does not charge."""
    kinds = {spec.layers[i] for i in p.layers} | ({spec.mtp_layer_kind} if p.mtp_layers else set())
    return max((layer_rank_params(spec, kind, layout, layer_spec) for kind in kinds), default=0)
