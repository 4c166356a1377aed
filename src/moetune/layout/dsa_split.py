"""What DeepSeek Sparse Attention asks of a layout: the walls price its sparse indexer loss alone (refuse_unpriced),
and under index sharing every pipeline chunk must start on a layer that computes its own top-k (dsa_pipeline_split)."""

from moetune.errors import MoetuneError
from moetune.layout.layout import Layout
from moetune.layout.pipeline import pipeline_chunks, stage_order
from moetune.specs.model import ModelSpec

DSA_ARCHS = frozenset({"hopper", "blackwell"})
# FlashMLA's sparse kernels run a TP rank's query heads in groups of 64 on SM90 and 128 on SM100 (Megatron-LM
# dsa_cudnn_kernels.py _flash_mla_head_padding @ core_v0.19.0)
HEAD_ALIGN = {"hopper": 64, "blackwell": 128}


def flash_mla_heads(local: int, arch: str | None) -> int | None:
    """The query heads FlashMLA runs for `local` heads a rank, zero-padded (dsa_cudnn_kernels.py
    _flash_mla_head_padding @ core_v0.19.0): a count dividing 64 pads to 64, on Blackwell one dividing 128 to 128;
    a multiple of the architecture's group runs as it is; any other is None, where Megatron-Core falls back to the
    unfused dense path. `arch` None: Hopper's rule, which every count Blackwell runs also meets."""
    align = HEAD_ALIGN.get(arch or "hopper", 64)
    for padded in (64, 128) if align == 128 else (64,):
        if local <= padded and padded % local == 0:
            return padded
    return local if local % align == 0 else None


def dsa_heads(spec: ModelSpec, layout: Layout, arch: str | None = None) -> None:
    """A DSA model's query heads a TP rank holds must be a count FlashMLA's sparse kernels run (flash_mla_heads);
    Megatron-Core otherwise falls back to the unfused path, dense O(s^2) scores moetune does not price."""
    if (why := dsa_heads_refusal(spec, layout.tp, arch)) is not None:
        raise MoetuneError(why)


def dsa_heads_refusal(spec: ModelSpec, tp: int, arch: str | None = None) -> str | None:
    """The line refusing `tp` where a DSA model's heads a rank holds are no count FlashMLA runs on `arch`, else None
    (a count TP does not divide is left to the layout's own head check)."""
    if spec.dsa is None or spec.num_attention_heads % tp:
        return None
    local = spec.num_attention_heads // tp
    if flash_mla_heads(local, arch) is not None:
        return None
    group = HEAD_ALIGN.get(arch or "hopper", 64)
    return (f"{spec.name}: {local} query heads a TP rank ({spec.num_attention_heads} / TP {tp}) is no count "
            f"FlashMLA's sparse attention runs on {arch or 'Hopper'} (a divisor of {group} or a multiple of it): "
            "Megatron-Core falls back to the unfused dense path, which moetune does not price; choose a TP that gives "
            "one")


class Unpriced(MoetuneError):
    """A model the walls cannot price yet: bad input to estimate and plan, a skipped memory wall to check --model."""


def refuse_unpriced(spec: ModelSpec, arch: str | None = None) -> None:
    """A DSA model whose attention the walls do not price, refused before any layout is timed or sized. They price
    what the cuDNN backend runs (walls/dsa.py; Megatron-LM dsa_cudnn_kernels.py @ core_v0.19.0): its FlashMLA kernels
    need Hopper or Blackwell (_flash_mla_head_padding declines below SM90, and the unfused fallback keeps O(heads s^2)
    scores), and its loss is the sparse one (dsa_indexer_use_sparse_loss False takes a path whose work was not read).
    `arch`: the GPU's, where the caller has one."""
    if spec.dsa is None:
        return
    if spec.dsa.indexer_loss and not spec.dsa.sparse_loss:
        raise Unpriced(f"{spec.name}: DeepSeek Sparse Attention's dense indexer loss (dsa_indexer_use_sparse_loss "
                       "False) is not priced - only the sparse loss Megatron Bridge's GLM-5 provider sets is; "
                       "`moetune models show` gives its parameters, which are exact")
    if arch is not None and arch not in DSA_ARCHS:
        raise Unpriced(f"{spec.name}: DeepSeek Sparse Attention on {arch} is not priced - its FlashMLA and cuDNN "
                       "kernels need Hopper or Blackwell (below, Megatron-Core falls back to dense O(s^2) scores); "
                       "use an H100/H200 or B200/GB200-class GPU")


def shares_index(spec: ModelSpec) -> bool:
    """Whether DSA layers reuse an earlier layer's top-k (index_topk_freq > 1, GLM-5.2), whose groups a pipeline split
    must keep whole (dsa_pipeline_split)."""
    return spec.dsa is not None and spec.dsa.index_topk_freq > 1


def index_group_counts(spec: ModelSpec, chunks: int) -> list[int] | None:
    """Decoder layers per pipeline chunk (Megatron's stage order) that keep every index-sharing group whole: a
    computing layer and the layers reusing its top-k (dsa_pipeline_split), chunk by chunk as near the mean of the
    layers left as whole groups allow. None without index sharing, or where there are fewer groups than chunks."""
    if not shares_index(spec):
        return None
    starts = [i for i, k in enumerate(spec.layers) if k.indexer]
    groups = [b - a for a, b in zip(starts, [*starts[1:], spec.num_layers], strict=True)]
    if len(groups) < chunks:
        return None
    counts: list[int] = []
    for left in range(chunks, 1, -1):
        target = sum(groups) / left
        take = 1
        while len(groups) - take > left - 1 and sum(groups[:take + 1]) <= target + groups[take] / 2:
            take += 1
        counts.append(sum(groups[:take]))
        groups = groups[take:]
    return [*counts, sum(groups)]


def keeps_index_groups(spec: ModelSpec, layout: Layout) -> bool:
    """Whether Megatron-Core builds this pipeline split under DSA index sharing (dsa_pipeline_split): what the planner
    asks of the layouts it enumerates and of each re-split it tries."""
    try:
        dsa_pipeline_split(spec, layout)
    except MoetuneError:
        return False
    return True


def dsa_pipeline_split(spec: ModelSpec, layout: Layout) -> None:
    """Under index sharing a layer reuses the top-k of the computing layer before it, which must be earlier in the
    same pipeline chunk: Megatron-Core raises at build time otherwise (Megatron-LM
    models/gpt/experimental_attention_variant_module_specs.py _validate_dsa_index_share_pipeline_split
    @ core_v0.19.0). Chunks hold consecutive layers, so each must start on a computing layer."""
    if not shares_index(spec):
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
