"""Activation bytes vs Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", Sec. 4 and Table 2), derived by hand here, and MoE terms vs the derivation in docs/activations.md."""

from dataclasses import replace

import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.model import LayerKind, ModelSpec
from moetune.specs.registry import load_model
from moetune.walls.activations import ActivationContext, layer_activation_items
from moetune.walls.memory import PAGED_STASH_CUDA

# GPT-3 175B shapes from the paper's Table 3: h=12288, a=96, s=2048.
H, A, S = 12288, 96, 2048
GPT3 = ModelSpec(
    name="gpt3-175b", model_type="gpt", hidden_size=H, vocab_size=51200,
    layers=(LayerKind(mixer="gqa", mlp="dense"),) * 96,
    num_attention_heads=A, num_query_groups=A, kv_channels=H // A, ffn_hidden_size=4 * H, gated_linear_unit=False,
    activation="gelu", normalization="LayerNorm", num_moe_experts=0, moe_router_topk=0, moe_ffn_hidden_size=0,
)
DENSE = GPT3.layers[0]


def _bytes(t=1, sp=False, b=1, modules=frozenset(), **kw):
    ctx = ActivationContext(seq_length=S, micro_batch_size=b, tp=t, sequence_parallel=sp, recompute_modules=modules,
                            dropout=True, flash_attention=False, **kw)
    return sum(layer_activation_items(GPT3, DENSE, ctx).values())


@pytest.mark.parametrize("b", [1, 4])
def test_no_parallelism_is_34sbh_plus_5as2b(b):
    assert _bytes(b=b) == S * b * H * 34 + 5 * A * S * S * b  # eq. (1)


@pytest.mark.parametrize("t", [2, 8])
def test_tensor_parallel_without_sp(t):
    # eq. (2): sbh (10 + 24/t + 5as/(ht)); every term is an integer number of bytes for these shapes
    assert _bytes(t=t) == S * H * 10 + S * H * 24 // t + 5 * A * S * S // t


@pytest.mark.parametrize("t", [2, 8])
def test_tensor_and_sequence_parallel(t):
    assert _bytes(t=t, sp=True) == (S * H * 34 + 5 * A * S * S) // t  # eq. (4)


# Megatron-Core's core_attn checkpoint keeps more than the paper's 6sbh of Q, K and V (attention.py
# get_query_key_value_tensors, tensor_parallel.checkpoint): V stays a view of the fused QKV output and pins all of it
# (2sb(h + 2h) = 6sbh), and RoPE's fresh Q and K are saved beside it (4sbh): 4sbh more than the paper per layer.
# moetune applies RoPE to every GQA model, this one too (GPT-3's learned positions would keep Q's reshaped copy only).
MCORE_CORE_ATTN_EXTRA = 4


def test_selective_recompute_of_core_attention():
    # Sec. 5: with SP + selective recompute the 5as^2b/t term goes, 34 sbh/t remains (Table 2 last row).
    assert _bytes(t=8, sp=True, modules=frozenset({"core_attn"})) == S * H * (34 + MCORE_CORE_ATTN_EXTRA) // 8


def test_gpt3_selective_figure_in_megabytes():
    # Paper Sec. 5 example: GPT-3 175B, t=8, SP + selective: 34 * 2048 * 12288 / 8 bytes per layer = 106.95 MB;
    # Megatron-Core's view of the QKV output and RoPE's copies add 4 * 2048 * 12288 / 8 = 12.58 MB.
    assert _bytes(t=8, sp=True, modules=frozenset({"core_attn"})) / 1e6 == pytest.approx(106.954752 + 12.582912)


def _moe_spec(**kw):
    base = dict(name="toy-moe", model_type="toy", hidden_size=1024, vocab_size=32000,
                layers=(LayerKind(mixer="gqa", mlp="moe"),), num_attention_heads=8, num_query_groups=8,
                kv_channels=128, ffn_hidden_size=4096, num_moe_experts=16, moe_router_topk=4, moe_ffn_hidden_size=512)
    return ModelSpec(**{**base, **kw})


def test_moe_routed_token_items_follow_the_derivation():
    spec, s, b, h, k, f, e = _moe_spec(), 4096, 2, 1024, 4, 512, 16
    items = layer_activation_items(spec, spec.layers[0], ActivationContext(seq_length=s, micro_batch_size=b))
    routed = s * b * k  # docs/activations.md: each token sent to top-k experts
    assert items["expert_input"] == 2 * routed * h
    assert "expert_output" not in items  # probs are applied in the activation: the combine saves nothing
    assert items["routing_probs"] == 4 * routed
    assert items["expert_fc1_output"] == 2 * routed * 2 * f  # SwiGLU fc1 is 2f wide
    assert items["expert_act_output"] == 2 * routed * f
    assert items["router_logits"] == 2 * 4 * s * b * e  # logits and scores in FP32


def test_moe_recompute_modules_remove_their_items():
    spec = _moe_spec(moe_shared_expert_intermediate_size=1024)
    ctx = dict(seq_length=1024, micro_batch_size=1)
    full = layer_activation_items(spec, spec.layers[0], ActivationContext(**ctx))
    act = layer_activation_items(spec, spec.layers[0],
                                 ActivationContext(**ctx, recompute_modules=frozenset({"moe_act"})))
    moe = layer_activation_items(spec, spec.layers[0], ActivationContext(**ctx, recompute_modules=frozenset({"moe"})))
    shared = layer_activation_items(spec, spec.layers[0],
                                    ActivationContext(**ctx, recompute_modules=frozenset({"shared_experts"})))
    assert set(full) - set(act) == {"expert_act_output"}
    assert set(full) - set(shared) == {"shared_fc1_output", "shared_act_output"}
    assert not any(k.startswith(("expert_", "router", "shared_", "mlp_norm_output")) for k in moe)
    assert "mlp_norm_input" in moe  # the MoE input is what `moe` recompute keeps


def test_expert_tokens_scale_with_etp_and_imbalance_and_shrink_with_sp():
    spec = _moe_spec()
    base = dict(seq_length=4096, micro_batch_size=1)
    one = layer_activation_items(spec, spec.layers[0], ActivationContext(**base))["expert_input"]
    etp = layer_activation_items(spec, spec.layers[0], ActivationContext(**base, etp=2))["expert_input"]
    imb = layer_activation_items(spec, spec.layers[0], ActivationContext(**base, token_imbalance=1.5))["expert_input"]
    sp = layer_activation_items(spec, spec.layers[0], ActivationContext(**base, tp=4, sequence_parallel=True))
    assert (etp, imb, sp["expert_input"]) == (2 * one, 1.5 * one, one // 4)


def test_dropless_imbalance_applies_only_across_expert_ranks():
    """With every expert on each rank (EP 1) no rank waits for a busier one: dropless costs what force-balanced
    routing costs, in time and memory; at EP 8 the busiest rank's factor applies to both."""
    from moetune.layout.imbalance import DROPLESS_IMBALANCE
    from moetune.layout.knobs import Knobs
    from moetune.layout.layout import Layout
    from moetune.layout.validate import Workload
    from moetune.planner.estimate import estimate
    from moetune.specs.hardware import load_gpu
    from moetune.specs.registry import load_model

    spec, gpu, wl = load_model("qwen3-30b-a3b"), load_gpu("h100"), Workload(seq_length=4096, global_batch_size=64)
    for ep, factor in ((1, 1.0), (8, DROPLESS_IMBALANCE)):
        lay = Layout(world_size=8, ep=ep)
        runs = {r: estimate(spec, gpu, lay, wl, Knobs(routing=r, dispatcher="alltoall"))
                for r in ("dropless", "force-balance")}
        experts = {r: e.stages[0].items["act_expert_input"] for r, e in runs.items()}
        assert experts["dropless"] == pytest.approx(factor * experts["force-balance"], rel=1e-3)
        slower = runs["force-balance"].time["step_seconds"] < runs["dropless"].time["step_seconds"]
        assert slower == (ep > 1)


def test_full_iteration_paged_stash_holds_routed_activations_at_its_buffer_factor():
    """A full-iteration plan stashes its routed-expert activations in a paged buffer sized at 1.2x the average tokens
    (Bridge's full-iteration MoE recipes); the other saved items, and the GPU's work, are those of the routed tokens."""
    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("gb200")
    lay, wl = Layout(world_size=8, ep=8), Workload(seq_length=4096, micro_batch_size=4, global_batch_size=256)
    scoped = Knobs(precision="mxfp8", dispatcher="hybridep", routing="force-balance",
                   cuda_graph_scope=("attn", "moe_router", "moe_preprocess"))
    full = replace(scoped, cuda_graph_scope=("full_iteration",))
    a, b = (estimate(spec, gpu, lay, wl, k) for k in (scoped, full))
    routed = ("act_expert_input", "act_expert_fc1_output", "act_expert_act_output", "act_routing_probs")
    for item in routed:
        assert b.stages[0].items[item] == pytest.approx(a.stages[0].items[item] * PAGED_STASH_CUDA, rel=1e-3)
    assert b.stages[0].items["act_attn_qkv"] == a.stages[0].items["act_attn_qkv"]
    assert b.time["compute_by_class"]["routed_experts"] == a.time["compute_by_class"]["routed_experts"]
