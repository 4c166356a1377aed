"""The tensor-parallel shard of a weight GEMM (walls/flops.py tp_shard, tp_size), which both the compute wall's tile
quantization (walls/compute.py) and Muon's Newton-Schulz work (walls/muon.py) take."""

import numpy as np

from moetune.walls.flops import tp_shard, tp_size


def test_deepseek_v3_mla_projections_at_tp_2():
    """DeepSeek-V3 (hidden 7,168, 128 heads, q LoRA 1,536, kv LoRA 512, qk 128 + rope 64, v 128) at TP 2:
    q_down 7,168 -> 1,536 and kv_down 7,168 -> 576 are whole ("-"); q_up 1,536 -> 128 x 192 = 24,576 is
    column-parallel, 12,288 outputs a rank; kv_up 512 -> 128 x 256 = 32,768 column-parallel, 16,384; linear_proj
    128 x 128 = 16,384 -> 7,168 row-parallel, 8,192 inputs a rank."""
    assert tp_shard(7168, 1536, "-", 2) == (7168, 1536)
    assert tp_shard(1536, 24576, "n", 2) == (1536, 12288)
    assert tp_shard(7168, 576, "-", 2) == (7168, 576)
    assert tp_shard(512, 32768, "n", 2) == (512, 16384)
    assert tp_shard(16384, 7168, "k", 2) == (8192, 7168)


def test_the_planner_batches_tp_sizes_as_arrays():
    """A gated expert fc2 (2,048 -> 7,168, row-parallel) over ETP 1, 2 and 4: 2,048, 1,024 and 512 inputs a rank."""
    k, n = tp_shard(2048, 7168, "k", np.array([1, 2, 4]))
    assert k.tolist() == [2048, 1024, 512] and n == 7168


def test_routed_experts_split_over_expert_tp_the_rest_over_tp():
    """TP 4 with ETP 1 (Parallel Folding): the experts' GEMMs are whole on a rank, attention's and the shared
    experts' split four ways."""
    assert tp_size("routed_experts", 4, 1) == 1
    assert [tp_size(c, 4, 1) for c in ("attn_proj", "mixer_proj", "dense_mlp", "shared_experts")] == [4, 4, 4, 4]
