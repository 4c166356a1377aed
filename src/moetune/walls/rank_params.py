"""Parameters held by one rank of each pipeline stage, split into dense and routed-expert parts.

The dense part is replicated over the attention mesh's DP x CP ranks, the expert part over the
expert mesh's EDP ranks; the distributed optimizer shards each over that group (see memory.py).
"""

from dataclasses import dataclass

from moetune.layout.layout import Layout
from moetune.layout.pipeline import Chunk, pipeline_chunks
from moetune.specs.model import ModelSpec
from moetune.walls.params import (
    LayerSpec, Tensor, embedding_tensors, final_norm_tensors, layer_tensors, mtp_tensors, output_tensors,
)

MAKE_VOCAB_SIZE_DIVISIBLE_BY = 128  # Megatron-LM --make-vocab-size-divisible-by default


def padded_vocab_size(vocab: int, tp: int, divisible_by: int = MAKE_VOCAB_SIZE_DIVISIBLE_BY) -> int:
    """Megatron pads the vocabulary to a multiple of divisible_by * TP
    (megatron/training/tokenizer/tokenizer.py::_vocab_size_with_padding; Bridge calculate_padded_vocab_size)."""
    multiple = divisible_by * tp
    return -(-vocab // multiple) * multiple


@dataclass(kw_only=True, slots=True, frozen=True)
class StageParams:
    stage: int
    dense: int  # non-expert parameters on one rank of this stage
    expert: int  # routed-expert parameters on one rank of this stage
    vocab: int  # embedding / output-layer parameters among `dense` (not GEMM weights TE caches in FP8)
    layers: tuple[int, ...]  # decoder layer ids held (all virtual chunks)
    mtp_layers: int
    embedding: bool
    loss: bool

    @property
    def total(self) -> int:
        return self.dense + self.expert


def _divisor(t: Tensor, layout: Layout) -> int:
    return {"tp": layout.tp, "rep": 1, "vocab": layout.tp, "expert": layout.ep * layout.etp,
            "expert_rep": layout.ep}[t.shard]


def chunk_tensors(spec: ModelSpec, chunk: Chunk, *, vocab: int, tied_copy: bool, layer_spec: LayerSpec) -> list[Tensor]:
    """Parameters of one virtual chunk. A chunk holding MTP layers also holds an embedding (MTP embeds the
    shifted tokens; gpt_model.py builds `embedding` when pre_process or mtp_process)."""
    out: list[Tensor] = embedding_tensors(spec, vocab) if chunk.embedding or chunk.mtp_layers else []
    for layer in chunk.layers:
        out += layer_tensors(spec, spec.layers[layer], layer_spec)
    if spec.num_layers - 1 in chunk.layers:
        out += final_norm_tensors(spec)
    for _ in range(chunk.mtp_layers):
        out += mtp_tensors(spec, layer_spec)
    if chunk.loss:
        out += output_tensors(spec, vocab, tied_copy=tied_copy)
    return [t for t in out if t.megatron]


def per_rank(tensors: list[Tensor], layout: Layout) -> tuple[int, int]:
    """(dense, expert) elements held by one rank; shards divide exactly once the layout is validated."""
    dense = expert = 0
    for t in tensors:
        share = t.numel // _divisor(t, layout)
        if t.expert:
            expert += share
        else:
            dense += share
    return dense, expert


def stage_params(spec: ModelSpec, layout: Layout, *, layer_spec: LayerSpec = "te",
                 include_mtp: bool = True) -> list[StageParams]:
    """One entry per pipeline stage, for one rank of that stage (all its virtual chunks together)."""
    vocab = padded_vocab_size(spec.vocab_size, layout.tp)
    tied_copy = not spec.untie_embeddings_and_output_weights and layout.pp > 1
    grid = pipeline_chunks(layout, spec.num_layers, spec.mtp_num_layers if include_mtp else 0)
    result = []
    for stage, chunks in enumerate(grid):
        tensors = [t for c in chunks for t in chunk_tensors(spec, c, vocab=vocab, tied_copy=tied_copy,
                                                            layer_spec=layer_spec)]
        dense, expert = per_rank(tensors, layout)
        vocab_share = per_rank([t for t in tensors if t.shard == "vocab"], layout)[0]
        result.append(StageParams(
            stage=stage, dense=dense, expert=expert, vocab=vocab_share,
            layers=tuple(i for c in chunks for i in c.layers), mtp_layers=sum(c.mtp_layers for c in chunks),
            embedding=any(c.embedding for c in chunks), loss=any(c.loss for c in chunks),
        ))
    return result
