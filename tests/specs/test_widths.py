"""The derived widths a spec and its mixers' dimensions name (specs/model.py, specs/mixer_dims.py), against figures
worked by hand from each built-in's config.json and Megatron-Core's constructors (core_v0.16.0)."""

from moetune.specs.registry import load_model


def test_gqa_projection_sizes_of_qwen3_30b():
    """config.json: 32 heads, 4 KV heads, head_dim 128; attention.py: query_projection_size = kv_channels x heads,
    kv_projection_size = kv_channels x num_query_groups; the fused QKV output is q + 2 kv (linear_qkv)."""
    spec = load_model("qwen3-30b-a3b")
    assert (spec.query_projection_size, spec.kv_projection_size) == (4096, 512)
    assert spec.qkv_widths == (4096, 1024)


def test_a_gated_query_doubles_in_the_fused_qkv():
    """Qwen3-Next: 16 heads x head_dim 256, 2 KV heads; attention_output_gate rides the gate with the query."""
    spec = load_model("qwen3-next-80b-a3b")
    assert spec.query_projection_size == 4096
    assert spec.qkv_widths == (8192, 1024)


def test_mla_widths_of_deepseek_v3():
    """config.json: qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, kv_lora_rank 512;
    multi_latent_attention.py: q_head_dim 192, linear_kv_down_proj to 576, linear_kv_up_proj to heads x 256."""
    m = load_model("deepseek-v3").mla
    assert (m.q_head_dim, m.kv_down_dim, m.kv_up_head_dim) == (192, 576, 256)


def test_gated_delta_net_widths_of_qwen3_next():
    """config.json: 16 key heads and 32 value heads of 128; gated_delta_net.py: qk_dim 2048, v_dim 4096, in_proj_dim
    2 x 2048 + 2 x 4096 + 2 x 32 = 12352, conv_dim 2 x 2048 + 4096 = 8192."""
    g = load_model("qwen3-next-80b-a3b").gdn
    assert (g.qk_dim, g.v_dim, g.in_proj_dim, g.conv_dim) == (2048, 4096, 12352, 8192)


def test_mamba_widths_of_nemotron3_nano():
    """config.json: 64 Mamba heads of 64, 8 groups, state 128; mamba_mixer.py: d_inner 4096, conv_dim 4096 + 2 x 8 x
    128 = 6144, in_proj to 2 x 4096 + 2048 + 64 = 10304 (a multiple of 16, as its FP8 assert asks)."""
    m = load_model("nemotron3-nano-30b-a3b").mamba
    assert (m.d_inner, m.conv_dim, m.in_proj_dim) == (4096, 6144, 10304)


def test_expert_ffn_a_token_runs_through():
    """moe_intermediate_size x num_experts_per_tok + the shared experts' width (Megatron-LM training.py
    num_floating_point_operations): DeepSeek-V3 2048 x 8 + 2048, Qwen3-Next 512 x 10 + 512, Qwen3-30B 768 x 8 (no
    shared expert), Nemotron-3 Nano 1856 x 6 + 3712."""
    assert [load_model(name).moe_ffn_per_token for name in ("deepseek-v3", "qwen3-next-80b-a3b", "qwen3-30b-a3b",
                                                             "nemotron3-nano-30b-a3b")] == [18432, 5632, 6144, 14848]
