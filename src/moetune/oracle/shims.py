"""Small, scoped patches that let Megatron-Core build a model on ``meta`` with no GPU and no TE.

Two kinds live here:

* CUDA shims (``cuda_free``). A few MCore constructors name a CUDA device explicitly for
  *buffers* (rotary frequencies, the router's expert-bias buffer, the learnable-softmax
  offset) or move the tied/MTP embedding copy to CUDA to all-reduce it. None of these hold a
  parameter whose size we count, so the shims only redirect the device to ``meta`` or skip the
  initial-value sync. Each one is listed with its MCore file in docs/oracle.md.
* The TE allocation stand-in (``DuplicatedLinear`` + ``te_mla_down_proj``). The Transformer
  Engine layer spec builds the MLA down-projections as ``TELinear(parallel_mode="duplicated")``
  (full weight on every TP rank) while the local spec uses ``ColumnParallelLinear`` (split over
  TP). Without TE installed we reproduce the TE allocation with a plain module of the same shape.

Everything is undone on exit, so the rest of the process sees stock torch / megatron.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


class DuplicatedLinear(torch.nn.Module):
    """Holds exactly what ``TELinear(parallel_mode="duplicated")`` allocates: [out, in] (+bias).

    Mirrors megatron/core/extensions/transformer_engine.py ``TELinear.__init__`` where
    ``parallel_mode == "duplicated"`` forces ``tp_size = 1`` (no split across TP ranks).
    Only used for counting; it has no forward.
    """

    def __init__(self, input_size: int, output_size: int, *, config, bias: bool = False, **_: object):
        super().__init__()
        dtype = config.params_dtype
        self.weight = torch.nn.Parameter(torch.empty(output_size, input_size, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.empty(output_size, dtype=dtype)) if bias else None


@contextlib.contextmanager
def cuda_free() -> Iterator[None]:
    """Redirect MCore's explicit CUDA device requests to ``meta`` and skip the embedding sync."""
    from megatron.core.models.common.language_module import language_module

    saved_device = torch.cuda.current_device
    saved_embd = language_module.LanguageModule._is_in_embd_group
    # rotary_pos_embedding.py / yarn_rotary_pos_embedding.py (MLA builds RotaryEmbedding without
    # use_cpu_initialization), moe/router.py expert_bias buffers, dot_product_attention.py
    # softmax_offset: all call torch.cuda.current_device() for their device.
    torch.cuda.current_device = lambda: "meta"
    # language_module.py setup_embeddings_and_output_layer: the duplicated word embedding on the
    # last (or MTP) stage is moved with .cuda() and all-reduced to copy initial values.
    language_module.LanguageModule._is_in_embd_group = lambda self: False
    try:
        yield
    finally:
        torch.cuda.current_device = saved_device
        language_module.LanguageModule._is_in_embd_group = saved_embd


@contextlib.contextmanager
def te_mla_down_proj() -> Iterator[None]:
    """Make MLASelfAttention accept ``DuplicatedLinear`` as it accepts ``TELinear``.

    multi_latent_attention.py picks ``parallel_mode='duplicated'`` (and no tp_group) when the
    down-projection class is ``TELinear``; with TE absent that name is ``None``, so we point it
    at our stand-in for the duration of the build.
    """
    from megatron.core.transformer import multi_latent_attention as mla

    saved = mla.TELinear
    mla.TELinear = DuplicatedLinear
    try:
        yield
    finally:
        mla.TELinear = saved


def _mla_submodules(layer_specs: list) -> list:
    subs = [getattr(spec.submodules.self_attention, "submodules", None) for spec in layer_specs]
    return [sub for sub in subs if sub is not None and hasattr(sub, "linear_kv_down_proj")]


def use_te_mla_down_proj(layer_specs: list) -> None:
    """Swap the MLA down-projection modules of these layer specs to the TE allocation."""
    for sub in _mla_submodules(layer_specs):
        sub.linear_q_down_proj = DuplicatedLinear
        sub.linear_kv_down_proj = DuplicatedLinear


def mla_core_attention_class():
    """Local ``DotProductAttention`` that tolerates MLA's ``k_channels`` / ``v_channels``.

    multi_latent_attention.py builds core_attention with k_channels/v_channels (only
    TEDotProductAttention takes them); the local DotProductAttention.__init__ rejects them, so
    the stock local MLA spec cannot be built. The attention kernel holds no parameters for the
    vanilla softmax MLA models use, so dropping the two sizes changes no count.
    """
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    class MLADotProductAttention(DotProductAttention):
        def __init__(self, *args, k_channels=None, v_channels=None, **kwargs):
            super().__init__(*args, **kwargs)

    return MLADotProductAttention


def use_local_mla_core_attention(layer_specs: list) -> None:
    """Point the MLA specs' core_attention at the k/v-channel-tolerant local class."""
    cls = mla_core_attention_class()
    for sub in _mla_submodules(layer_specs):
        sub.core_attention = cls
