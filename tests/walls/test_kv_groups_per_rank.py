"""TP past the KV groups (TP a multiple of num_query_groups, Megatron-Core core_v0.16.0 and later,
transformer/attention.py get_query_key_value_tensors): each rank all-gathers the QKV projection's output over TP and
keeps one group's K and V, views of the gathered buffer, which core_attn recompute's checkpoint saves whole (V's view
pins it, as it pins the rank's own QKV output within the groups). What that adds to memory, communication and Muon's
Newton-Schulz work, each against a count written here from the Megatron-Core and Transformer Engine code paths."""

import numpy as np
import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.model import LayerKind, ModelSpec
from moetune.specs.registry import load_model
from moetune.walls.activations import ActivationContext, layer_activation_items
from moetune.walls.flops import kv_groups_per_rank
from moetune.walls.muon import ns_flops_per_param

# 8 query heads in 2 KV groups of head dim 128, hidden 1024
TOY = ModelSpec(name="toy-gqa", model_type="toy", hidden_size=1024, vocab_size=32000,
                layers=(LayerKind(mixer="gqa", mlp="moe"),), num_attention_heads=8, num_query_groups=2,
                kv_channels=128, ffn_hidden_size=4096, num_moe_experts=16, moe_router_topk=4, moe_ffn_hidden_size=512)
QWEN = load_model("qwen3-30b-a3b")  # 32 query heads, 4 KV groups, head dim 128, hidden 2048


def _items(tp, modules=frozenset()):
    ctx = ActivationContext(seq_length=4096, micro_batch_size=1, tp=tp, sequence_parallel=tp > 1,
                            recompute_modules=frozenset(modules))
    return layer_activation_items(TOY, TOY.layers[0], ctx)


def test_groups_per_rank_never_fall_below_one():
    assert [kv_groups_per_rank(4, tp) for tp in (1, 2, 4, 8, 16)] == [4, 2, 1, 1, 1]
    assert list(kv_groups_per_rank(4, np.array([1, 2, 4, 8, 16]))) == [4, 2, 1, 1, 1]


def test_within_the_groups_a_rank_saves_a_tp_th_of_q_k_and_v():
    items, sb = _items(2), 4096
    assert items["attn_qkv"] == 2 * sb * (8 + 2 + 2) * 128 // 2
    assert "attn_qkv_buffer" not in items


def test_past_the_groups_a_rank_saves_its_queries_and_one_group_s_k_and_v():
    """Transformer Engine copies V's strided view of the gathered buffer to its own layout (get_qkv_layout: its strides
    are not K's, which RoPE or the key norm made afresh), so the buffer is not saved; one group's K and V are."""
    items, sb = _items(4), 4096
    assert items["attn_qkv"] == 2 * sb * (8 // 4 + 1 + 1) * 128  # its 2 query heads, one group's K and one's V
    assert "attn_qkv_buffer" not in items


def test_core_attn_recompute_saves_the_qkv_buffer_v_is_a_view_of():
    """The core_attn checkpoint saves the attention's inputs as given (tensor_parallel.checkpoint): Q and K fresh
    from RoPE, and V's view, which keeps the whole QKV output alive: past the groups the gathered one, within them
    the rank's own (tests/oracle/test_saved_attention.py measures both on Megatron-Core)."""
    items, sb = _items(4, {"core_attn"}), 4096
    assert items["attn_qkv"] == 2 * sb * (8 // 4 + 1) * 128  # its 2 query heads and one group's K
    assert items["attn_qkv_buffer"] == 2 * sb * (8 + 2 * 2) * 128  # the whole gathered QKV output, V inside it
    within = _items(2, {"core_attn"})
    assert within["attn_qkv"] == 2 * sb * (8 + 2) * 128 // 2  # its 4 query heads and its group's K
    assert within["attn_qkv_buffer"] == 2 * sb * (8 + 2 * 2) * 128 // 2  # its share of the QKV output


@pytest.mark.parametrize("modules", [frozenset(), frozenset({"core_attn"})])
def test_the_planner_s_arrays_give_what_each_layout_gives_alone(modules):
    ctx = ActivationContext(seq_length=4096, micro_batch_size=1, tp=np.array([1, 2, 4, 8]),
                            sequence_parallel=np.array([False, True, True, True]), recompute_modules=modules)
    batched = layer_activation_items(TOY, TOY.layers[0], ctx)
    for i, tp in enumerate((1, 2, 4, 8)):
        alone = _items(tp, modules)
        assert sum(int(np.asarray(v)[i]) if np.ndim(v) else v for v in batched.values()) == sum(alone.values())


def _tp_seconds(tp, recompute="none", tp_comm_overlap=False, **eff):
    knobs = Knobs(precision="bf16", dispatcher="alltoall", routing="force-balance", recompute=recompute,
                  tp_comm_overlap=tp_comm_overlap)
    e = estimate(QWEN, load_gpu("h100"), Layout(world_size=16, tp=tp, ep=8),
                 Workload(seq_length=4096, micro_batch_size=1, global_batch_size=16), knobs,
                 efficiency_overrides={"h100": eff} if eff else None)
    return e.time["collectives"]["tp"], e.time["exposed_collectives"]["tp"]


def test_the_qkv_gather_adds_two_ring_collectives_of_the_qkv_width_a_layer():
    """Sequence parallel's all-gather and reduce-scatter around attention move 2 x hidden (2048) a token, forward
    and backward; past the groups the QKV output (32 + 2 x 4 heads of 128 = 5120) is gathered forward and
    reduce-scattered backward: (4 x 2048 + 2 x 5120) / (4 x 2048) = 2.25 times the TP seconds of the same ring."""
    within, _ = _tp_seconds(4)
    past, _ = _tp_seconds(8)
    ring = (8 - 1) / 8 / ((4 - 1) / 4)  # the same NVLink ring, 7/8 of the bytes in place of 3/4
    microbatches = (16 // 2) / (16 // 4)  # a step's micro-batches at DP 2 and DP 4
    assert past / within == pytest.approx(2.25 * ring * microbatches, rel=1e-9)


def test_full_recompute_gathers_the_qkv_again():
    assert _tp_seconds(8, "full")[0] / _tp_seconds(8)[0] == pytest.approx(1.5, rel=1e-9)


def test_tp_comm_overlap_does_not_hide_the_qkv_gather():
    """With TE's overlap hiding all of sequence parallel's collectives, the QKV gather is what stays exposed:
    5/9 of the TP seconds (2 x 5120 of 4 x 2048 + 2 x 5120)."""
    raw, exposed = _tp_seconds(8, tp_comm_overlap=True, tp_overlap_hide=1.0)
    assert exposed == pytest.approx(raw * 10240 / 18432, rel=1e-9)


def _ns(rows, cols):
    """One quintic Newton-Schulz iteration (walls/muon.py): 4 a^2 b + 2 a^3, a the smaller side."""
    a, b = min(rows, cols), max(rows, cols)
    return 4 * a * a * b + 2 * a ** 3


def _per_param(shapes):
    return 5 * sum(_ns(r, c) for r, c in shapes) / sum(r * c for r, c in shapes)


def test_muon_steps_a_shard_holding_less_than_a_group_as_one_matrix():
    """Megatron's QKV split needs whole groups in a rank's shard (Megatron-LM optimizer/__init__.py: the shard's rows
    a multiple of a group's q, k, v): at TP 4 over the toy's 2 groups each rank's 384 QKV rows are one matrix;
    at TP 2 its q, k and v split. A dense toy layer: QKV, output projection, SwiGLU fc1 and fc2."""
    spec = ModelSpec(name="toy-dense", model_type="toy", hidden_size=1024, vocab_size=32000,
                     layers=(LayerKind(mixer="gqa", mlp="dense"),), num_attention_heads=8, num_query_groups=2,
                     kv_channels=128, ffn_hidden_size=4096, num_moe_experts=0, moe_router_topk=0, moe_ffn_hidden_size=0)
    h, f = 1024, 4096
    past = [(h, 12 * 128 // 4), (8 * 128 // 4, h), (h, 2 * f // 4), (f // 4, h)]
    within = [(h, 8 * 128 // 2), (h, 2 * 128 // 2), (h, 2 * 128 // 2), (8 * 128 // 2, h), (h, 2 * f // 2), (f // 2, h)]
    assert ns_flops_per_param(spec, 4, 1)[0] == pytest.approx(_per_param(past), rel=1e-12)
    assert ns_flops_per_param(spec, 2, 1)[0] == pytest.approx(_per_param(within), rel=1e-12)
    batched = ns_flops_per_param(spec, np.array([2, 4]), np.array([1, 1]))[0]
    assert list(batched) == pytest.approx([_per_param(within), _per_param(past)], rel=1e-12)
