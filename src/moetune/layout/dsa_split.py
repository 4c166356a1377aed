"""What DeepSeek Sparse Attention asks of a layout: the walls do not price it yet (refuse_unpriced), and under index
sharing every pipeline chunk must start on a layer that computes its own top-k (dsa_pipeline_split)."""

from moetune.errors import MoetuneError
from moetune.layout.layout import Layout
from moetune.layout.pipeline import pipeline_chunks, stage_order
from moetune.specs.model import ModelSpec


class Unpriced(MoetuneError):
    """A model the walls cannot price yet: bad input to estimate and plan, a skipped memory wall to check --model."""


def refuse_unpriced(spec: ModelSpec) -> None:
    """A model whose attention the walls do not price yet, refused before any layout is timed or sized.

    DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5) runs an indexer and attends to index_topk keys per query
    (Megatron-LM dsa.py @ core_v0.19.0); the walls know only MLA's dense causal attention, and would report those
    figures for it in silence. Its parameters are exact (walls/params.py, `moetune models show`)."""
    if spec.dsa is not None:
        raise Unpriced(f"{spec.name}: DeepSeek Sparse Attention ({spec.model_type}, index_topk "
                           f"{spec.dsa.index_topk}) is not priced yet - moetune would time and size it as dense MLA "
                           "without the indexer; `moetune models show` gives its parameters, which are exact")


def dsa_pipeline_split(spec: ModelSpec, layout: Layout) -> None:
    """Under index sharing a layer reuses the top-k of the computing layer before it, which must be earlier in the
    same pipeline chunk: Megatron-Core raises at build time otherwise (Megatron-LM
    models/gpt/experimental_attention_variant_module_specs.py _validate_dsa_index_share_pipeline_split
    @ core_v0.19.0). Chunks hold consecutive layers, so each must start on a computing layer."""
    if spec.dsa is None or spec.dsa.index_topk_freq <= 1:
        return
    computing = [i + 1 for i, k in enumerate(spec.layers) if k.indexer]
    for chunk in stage_order(pipeline_chunks(layout, spec.num_layers, spec.mtp_num_layers)):  # in model order
        if chunk.layers and not spec.layers[chunk.layers[0]].indexer:
            first = chunk.layers[0] + 1
            source = max(n for n in computing if n < first)
            raise MoetuneError(
                f"pipeline rank {chunk.pp_rank} chunk {chunk.vpp_rank} starts on layer {first}, which reuses the top-k "
                f"of layer {source} on an earlier stage: DSA index sharing (index_topk_freq "
                f"{spec.dsa.index_topk_freq}) does not cross pipeline stages; give a --pipeline-layout whose every "
                f"stage starts on a computing layer ({', '.join(map(str, computing[:6]))}, ...)")
