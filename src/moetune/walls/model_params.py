"""Whole-model parameter counts as model makers publish them (Hugging Face checkpoint view).

``total_params`` is the main model (MTP modules excluded, unpadded vocabulary); ``active_params`` is
what one token touches: every non-expert parameter plus ``topk`` of the routed experts in each MoE
layer. ``mtp_params`` counts what Megatron-Core allocates for the MTP modules (they reuse the main
embedding and output layer, so the extra embedding/head copies some HF checkpoints store are not in it).
"""

from dataclasses import asdict, dataclass

from moetune.specs.model import ModelSpec
from moetune.walls.params import (
    Tensor,
    embedding_tensors,
    final_norm_tensors,
    layer_tensors,
    mtp_tensors,
    numel,
    output_tensors,
)


@dataclass(kw_only=True, slots=True, frozen=True)
class ModelCounts:
    total_params: int
    active_params: int
    mtp_params: int
    embedding_params: int  # input embedding + untied output layer
    expert_params: int  # routed experts in all MoE layers

    def as_dict(self) -> dict:
        return asdict(self)


def _active(tensors: list[Tensor], spec: ModelSpec) -> int:
    frac = spec.moe_router_topk / spec.num_moe_experts if spec.num_moe_experts else 0
    return sum(round(t.numel * frac) if t.expert else t.numel for t in tensors if t.hf)


def main_tensors(spec: ModelSpec) -> list[Tensor]:
    """Every tensor of the main model (no MTP), HF view: unpadded vocabulary, one output layer."""
    out = embedding_tensors(spec, spec.vocab_size)
    for kind in spec.layers:
        out += layer_tensors(spec, kind)
    return out + final_norm_tensors(spec) + output_tensors(spec, spec.vocab_size, tied_copy=False)


def model_counts(spec: ModelSpec) -> ModelCounts:
    tensors = main_tensors(spec)
    embed = [t for t in tensors if t.shard == "vocab"]
    mtp = spec.mtp_num_layers * numel(mtp_tensors(spec), megatron=True) if spec.mtp_num_layers else 0
    return ModelCounts(
        total_params=numel(tensors, megatron=False),
        active_params=_active(tensors, spec),
        mtp_params=mtp,
        embedding_params=numel(embed),
        expert_params=sum(t.numel for t in tensors if t.expert),
    )
