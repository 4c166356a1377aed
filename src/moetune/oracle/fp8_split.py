"""Which parameters Transformer Engine quantizes under an FP8/FP4 recipe, on the model Megatron-Core builds
(oracle/mcore.py).

TE quantizes the `weight` of its GEMM modules (Linear, LayerNormLinear, GroupedLinear) and nothing else: not their
biases, not a LayerNormLinear's norm (walls/params.py Tensor.quantized cites the TE lines). The oracle builds the local
spec, which puts Megatron's own ColumnParallelLinear / RowParallelLinear (and shims.DuplicatedLinear) where the TE spec
puts TE's linears, and a separate norm where TE fuses one into a LayerNormLinear (oracle/layer_specs.py); every other
module is the same in both specs. So a parameter is quantized here when it is the `weight` of one of those linears and
not the output layer (a Megatron ColumnParallelLinear in either spec, tagged is_embedding_or_output_parameter): the
router's weight (TopKRouter) and a shared expert's gate (SharedExpertMLP.gate_weight) belong to no linear.
"""

from __future__ import annotations

from typing import Any

from moetune.oracle.mcore import count_params_breakdown


def _linear_types() -> tuple:
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear

    from moetune.oracle.shims import DuplicatedLinear

    return ColumnParallelLinear, RowParallelLinear, DuplicatedLinear


def is_quantized(chunk: Any, name: str, param: Any) -> bool:
    """True where TE would quantize this parameter: a GEMM module's weight, the output layer apart."""
    owner, _, attr = name.rpartition(".")
    module = chunk.get_submodule(owner) if owner else chunk
    output = getattr(param, "is_embedding_or_output_parameter", False)
    return attr == "weight" and isinstance(module, _linear_types()) and not output


def quantized_per_stage(hf_config: dict, *, pp: int, **kw: Any) -> list[int]:
    """For the first rank of each pipeline stage, the elements TE quantizes (is_quantized). ``kw``: the keywords of
    count_params_breakdown but ``stage`` and ``keep``."""
    return [sum(count_params_breakdown(hf_config, pp=pp, stage=stage, keep=is_quantized, **kw).values())
            for stage in range(pp)]
