"""What one GQA attention saves for backward under core_attn recompute, measured on Megatron-Core itself.

A SelfAttention of the local spec runs forward on the CPU as TP rank 0 under torch's fake process group (the
oracle's mcore._fake_rank: collectives are no-ops, shapes are real) with recompute_modules=["core_attn"], and
torch.autograd.graph.saved_tensors_hooks records every storage the autograd graph keeps. A view keeps its whole base
storage alive, so the sum of the unique storages is what stays in memory. The checkpoint saves the attention's
inputs as given (tensor_parallel.checkpoint), the same under the Transformer Engine spec: its _SplitAlongDim is a
torch.split, and the core attention it replays runs under no_grad. The measured bytes must equal
walls.activations' items for the same shape: Q and K fresh from RoPE, the QKV output V's view pins, and the
output projection's input.
"""

import contextlib

import pytest

pytest.importorskip("megatron.core")

import torch  # noqa: E402

from moetune.oracle import mcore  # noqa: E402
from moetune.specs.model import LayerKind, ModelSpec  # noqa: E402
from moetune.walls.activations import ActivationContext, layer_activation_items  # noqa: E402

S, B, D, HEADS, GROUPS, HIDDEN = 64, 3, 32, 16, 4, 512
SPEC = ModelSpec(name="toy-gqa", model_type="toy", hidden_size=HIDDEN, vocab_size=32000,
                 layers=(LayerKind(mixer="gqa", mlp="dense"),), num_attention_heads=HEADS, num_query_groups=GROUPS,
                 kv_channels=D, ffn_hidden_size=1024, num_moe_experts=0, moe_router_topk=0, moe_ffn_hidden_size=0)
ATTENTION_ITEMS = ("attn_qkv", "attn_qkv_buffer", "attn_softmax_stats", "attn_proj_input")


def _attention(tp: int):
    import torch.nn.functional as F
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.attention import SelfAttention
    from megatron.core.transformer.transformer_config import TransformerConfig

    config = TransformerConfig(
        num_layers=1, hidden_size=HIDDEN, num_attention_heads=HEADS, num_query_groups=GROUPS, kv_channels=D,
        ffn_hidden_size=1024, tensor_model_parallel_size=tp, use_cpu_initialization=True,
        params_dtype=torch.bfloat16, bf16=True, activation_func=F.silu, add_bias_linear=False,
        attention_dropout=0.0, hidden_dropout=0.0, recompute_granularity="selective", recompute_modules=["core_attn"])
    attn = get_gpt_layer_local_spec().submodules.self_attention
    return SelfAttention(config, attn.submodules, layer_number=1, **attn.params).train()


def _rope() -> torch.Tensor:
    """RoPE angles as RotaryEmbedding gives them, [s, 1, 1, d] (it asks for a CUDA device, so built here)."""
    freqs = torch.outer(torch.arange(S, dtype=torch.float32), 1.0 / 10000 ** (torch.arange(0, D, 2) / D))
    return torch.cat((freqs, freqs), dim=-1)[:, None, None, :]


def _saved_bytes(module, inputs: torch.Tensor, **kw) -> int:
    """Bytes of the unique storages of the activations the forward saves: tensors [s, b, ...] (not the weights,
    the RoPE angles, the mask or the mask-type scalar), less the module's own input (the layer's norm output)."""
    storages = {}

    def pack(t):
        if t.dim() >= 3 and tuple(t.shape[:2]) == (S, B) and t.untyped_storage().data_ptr() != inputs.data_ptr():
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(inputs, **kw)
    return sum(storages.values())


@contextlib.contextmanager
def _on_cpu(monkeypatch):
    """Megatron's checkpoint and attention dropout fork the CUDA RNG (there is none here, and no dropout), and the
    local attention's score buffer asks for the current CUDA device."""
    from megatron.core.tensor_parallel import random

    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    monkeypatch.setattr(random, "_get_all_rng_states", lambda: ())
    monkeypatch.setattr(random.get_cuda_rng_tracker(), "fork", lambda *a, **k: contextlib.nullcontext())
    yield


@pytest.mark.parametrize("tp", [1, 2, 4, 8])  # within the groups, one group a rank, past them (gathered)
def test_core_attn_recompute_saves_what_megatron_core_keeps(tp, monkeypatch):
    mcore._load_megatron()
    p = mcore.Parallelism(tensor_model_parallel_size=tp, pipeline_model_parallel_size=1,
                          expert_model_parallel_size=1, expert_tensor_parallel_size=1, world_size=tp)
    with mcore._fake_rank(0, tp, p, None), _on_cpu(monkeypatch), torch.random.fork_rng():
        torch.manual_seed(0)
        hidden = torch.randn(S, B, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
        mask = torch.ones(S, S, dtype=torch.bool).triu(1)[None, None]  # the local attention asks for one on CUDA
        measured = _saved_bytes(_attention(tp), hidden, attention_mask=mask, rotary_pos_emb=_rope())
    ctx = ActivationContext(seq_length=S, micro_batch_size=B, tp=tp, recompute_modules=frozenset({"core_attn"}))
    items = layer_activation_items(SPEC, SPEC.layers[0], ctx)
    assert measured == sum(items.get(name, 0) for name in ATTENTION_ITEMS)
