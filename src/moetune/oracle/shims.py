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
    from megatron.core.models.common.embeddings import yarn_rotary_pos_embedding as yarn
    from megatron.core.models.common.language_module import language_module

    saved_device = torch.cuda.current_device
    saved_embd = language_module.LanguageModule._is_in_embd_group
    saved_cp_slice = yarn.get_pos_emb_on_this_cp_rank
    # rotary_pos_embedding.py / yarn_rotary_pos_embedding.py (MLA builds RotaryEmbedding without
    # use_cpu_initialization), moe/router.py expert_bias buffers, dot_product_attention.py
    # softmax_offset: all call torch.cuda.current_device() for their device.
    torch.cuda.current_device = lambda: "meta"
    # language_module.py setup_embeddings_and_output_layer: the duplicated word embedding on the
    # last (or MTP) stage is moved with .cuda() and all-reduced to copy initial values.
    language_module.LanguageModule._is_in_embd_group = lambda self: False
    # yarn_rotary_pos_embedding.py precomputes its cos/sin cache at construction; with CP > 1 it
    # slices it per CP rank through rope_utils.get_pos_emb_on_this_cp_rank, which builds a
    # pinned CPU index tensor and moves it with .cuda(). The cache is a non-persistent buffer.
    yarn.get_pos_emb_on_this_cp_rank = lambda emb, seq_dim, cp_group: emb
    try:
        yield
    finally:
        torch.cuda.current_device = saved_device
        language_module.LanguageModule._is_in_embd_group = saved_embd
        yarn.get_pos_emb_on_this_cp_rank = saved_cp_slice


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


def core_attention_class():
    """Local ``DotProductAttention`` standing in for ``TEDotProductAttention`` at build time.

    Two constructor-only gaps of the local class, neither touching a parameter:
    * multi_latent_attention.py passes ``k_channels`` / ``v_channels`` (only the TE class takes
      them), so the stock local MLA spec cannot be built at all;
    * dot_product_attention.py asserts ``context_parallel_size == 1`` (CP needs the TE kernel).
    CP splits activations, never weights; the only attention parameter (the learnable softmax
    offset, one per head) is sized by TP alone, so building it under a CP=1 copy of the config
    changes no count.
    """
    import copy

    from megatron.core.transformer.dot_product_attention import DotProductAttention

    class OracleDotProductAttention(DotProductAttention):
        def __init__(self, config, *args, k_channels=None, v_channels=None, **kwargs):
            if config.context_parallel_size != 1:
                config = copy.copy(config)
                config.context_parallel_size = 1
            super().__init__(config, *args, **kwargs)

    return OracleDotProductAttention


def use_oracle_core_attention(layer_specs: list) -> None:
    """Point every layer spec's core_attention at ``core_attention_class()``."""
    cls = core_attention_class()
    for spec in layer_specs:
        sub = getattr(spec.submodules.self_attention, "submodules", None)
        if sub is not None and hasattr(sub, "core_attention"):
            sub.core_attention = cls


def use_dsa_core_attention(layer_specs: list) -> None:
    """Point every MLA layer's core_attention at DSAttention with its indexer, as
    experimental_attention_variant_module_specs.py get_dsa_module_spec_for_backend builds it (0.16.1), with no TE:
    the indexer's three TE linears are parallel_mode="duplicated" (dsa.py DSAIndexer), so ``DuplicatedLinear``
    holds what they hold; its k_norm is built under a LayerNorm copy of the config (dsa.py), which TENorm and
    ``WrappedTorchNorm`` both build as a LayerNorm with a bias. DSAttention itself holds nothing else."""
    from megatron.core.models.backends import WrappedTorchNorm
    from megatron.core.transformer.experimental_attention_variant.dsa import (
        DSAIndexer,
        DSAIndexerSubmodules,
        DSAttention,
        DSAttentionSubmodules,
    )
    from megatron.core.transformer.spec_utils import ModuleSpec

    indexer = ModuleSpec(module=DSAIndexer, submodules=DSAIndexerSubmodules(
        linear_wq_b=DuplicatedLinear, linear_wk=DuplicatedLinear, k_norm=WrappedTorchNorm,
        linear_weights_proj=DuplicatedLinear))
    for sub in _mla_submodules(layer_specs):
        sub.core_attention = ModuleSpec(module=DSAttention, submodules=DSAttentionSubmodules(indexer=indexer))


class GatedRMSNormStandIn:
    """Stands in for mamba_ssm's gated ``RMSNorm`` (mamba_ssm/ops/triton/layernorm_gated.py), which MambaMixer builds
    as ``ExtendedRMSNorm`` (ssm/mamba_mixer.py:83, :354-363) and which needs the mamba_ssm package: that class holds
    one ``weight`` [hidden_size] and no bias. This returns ``torch.nn.RMSNorm`` of the same width, which holds the
    same; it holds nothing itself."""

    def __new__(cls, hidden_size: int, eps: float = 1e-5, group_size=None, norm_before_gate: bool = True,
                device=None, dtype=None):
        return torch.nn.RMSNorm(hidden_size, eps=eps, device=device, dtype=dtype)


class _NoRngTracker:
    """A CUDA RNG tracker whose fork changes nothing (see ssm_free)."""

    @staticmethod
    def fork(*_a, **_k):
        return contextlib.nullcontext()


def _placeholder_module(name: str, *attrs: str):
    """A module whose functions refuse to run: it stands in for an inference-only Megatron module at import time."""
    import types

    def refuse(*_a, **_k):
        raise RuntimeError(f"moetune oracle: {name} is a build-only placeholder")

    module = types.ModuleType(name)
    for attr in attrs:
        setattr(module, attr, refuse)
    return module


@contextlib.contextmanager
def ssm_free() -> Iterator[None]:
    """Let Megatron-Core's Mamba and gated delta-net modules be *constructed* without their kernel packages.

    * ssm/mamba_mixer.py imports inference/contexts/attention_context/triton/tensor_ops.py (triton kernels for
      inference only); without triton a placeholder module stands in for that import alone, then is dropped.
    * MambaMixer.__init__ raises without mamba_ssm / einops (mamba_mixer.py:173-179; mamba_context_parallel.py:74,
      the CP helper it builds) and GatedDeltaNet.__init__ without fla (gated_delta_net.py:103-106): the flags are
      set for the build; nothing they guard holds a parameter (the kernels run in forward), except mamba_ssm's gated
      norm: ``GatedRMSNormStandIn``.
    * MambaStack builds its final norm as TENorm (ssm/mamba_block.py:166): MCore's ``WrappedTorchNorm`` stands in,
      the same [hidden] weight (and bias under LayerNorm).
    * MambaMixer draws its conv and dt initial values under the CUDA RNG tracker's model-parallel state
      (mamba_mixer.py:293, :317), which only model_parallel_cuda_manual_seed (CUDA) registers: the fork is a no-op
      here (initial values, never shapes).
    """
    import importlib.util
    import sys

    ops = "megatron.core.inference.contexts.attention_context.triton.tensor_ops"
    placed = importlib.util.find_spec("triton") is None and ops not in sys.modules
    if placed:
        sys.modules[ops] = _placeholder_module(ops, "tensor_get_slice_after", "tensor_masked_update", "tensor_merge")
    try:
        from megatron.core.ssm import gated_delta_net, mamba_block, mamba_context_parallel, mamba_mixer
    finally:
        if placed:
            del sys.modules[ops]
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    saved = [(m, name, getattr(m, name)) for m, name in (
        (mamba_mixer, "HAVE_MAMBA_SSM"), (mamba_mixer, "HAVE_EINOPS"), (mamba_mixer, "ExtendedRMSNorm"),
        (mamba_block, "TENorm"), (gated_delta_net, "HAVE_FLA"), (mamba_mixer, "get_cuda_rng_tracker"),
        (mamba_context_parallel, "HAVE_EINOPS"))]
    mamba_mixer.HAVE_MAMBA_SSM = mamba_mixer.HAVE_EINOPS = mamba_context_parallel.HAVE_EINOPS = True
    gated_delta_net.HAVE_FLA = True
    mamba_mixer.get_cuda_rng_tracker = _NoRngTracker
    mamba_mixer.ExtendedRMSNorm = GatedRMSNormStandIn
    mamba_block.TENorm = WrappedTorchNorm
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
