"""Fused attention's rate (walls/compute.py): kernel rates from published cuDNN measurements, by GPU family, head
shape and the keys each query sees."""

import pytest

from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.attention_rate import attention_rate, head_dim_factor, keys_factor
from moetune.walls.compute import BWD_ATTN, rates
from moetune.walls.efficiency import efficiency

# cuDNN fused attention on H100 SXM5, BF16, 4k sequence (FlashAttention-3 paper, Shah et al. 2024, Figs. 5-6):
# TFLOP/s forward (causal) and backward, by head dim
CUDNN_4K = {128: (518, 499), 64: (363, 417)}
H100_PEAK = 989.4

# NVIDIA cudnn-frontend benchmark/sdpa_benchmark_training/results @ 3929da2 (BF16, causal "top_left"; TFLOP/s forward
# and backward, non-deterministic; FLOPs counted on the unmasked elements, benchmark_single_sdpa.py): (gpu, case, seq)
# -> (forward, backward, forward FLOPs per key and head, backward FLOPs per key and head). H200 rows from
# results/h200_919_only_cudnn/*.csv (cuDNN 9.19.1), GB200/GB300 rows from results/<model>/<gpu>/*.csv (cuDNN 9.22)
# but GB200's "d64 w1024", from results/gb200_919_only_cudnn/gpt_oss_20260226_175022.csv (cuDNN 9.19, removed at
# 50c8aeb: read at its parent 107786d);
# "d64 w1024" is gpt-oss-shaped (64 query / 8 KV heads) with a 1,024-key window, "d64 w128" the benchmark's gpt_oss
# config (128 / 128 heads, 128-key window), "mla" its dsv3 config (query-key 192, value 128), "d128" llama3.1.
CUDNN_FRONTEND = {
    ("h200", "d128", 4096): (591, 474, 256, 640),
    ("h200", "mla", 4096): (599, 404, 320, 832),
    ("h200", "d64 w1024", 4096): (336, 289, 128, 320),
    ("gb200", "d128", 4096): (1408, 1148, 256, 640),
    ("gb200", "mla", 4096): (1406, 1057, 320, 832),
    ("gb200", "d64 w1024", 4096): (574, 617, 128, 320),
    ("gb200", "d64 w128", 4096): (161, 182, 128, 320),
    ("gb200", "d64 w128", 16384): (167, 188, 128, 320),
    ("gb300", "d128", 4096): (1703, 1248, 256, 640),
    ("gb300", "mla", 4096): (1590, 1143, 320, 832),
    ("gb300", "d64 w128", 4096): (167, 191, 128, 320),
}
_MODEL = {"d128": ("qwen3-235b-a22b", None), "mla": ("deepseek-v3", None), "d64 w1024": ("gpt-oss-120b", 1024),
          "d64 w128": ("gpt-oss-120b", 128)}


def _over_forward_and_backward(fwd: float, bwd: float) -> float:
    """The rate of a forward and its BWD_ATTN-times-larger backward run back to back, as a fraction of the peak."""
    return (1 + BWD_ATTN) / (1 / fwd + BWD_ATTN / bwd) / H100_PEAK


def test_hopper_priors_are_the_measured_kernel_rates():
    eff = efficiency("h100")
    assert eff["attn_eff"] == pytest.approx(_over_forward_and_backward(*CUDNN_4K[128]), abs=0.01)


@pytest.mark.parametrize("case", sorted(CUDNN_FRONTEND))
def test_attention_rate_meets_cudnn_frontend_measurements(case):
    """The rate attention_rate gives a layer of the case's head shape and window, against the forward + backward
    rate cuDNN's benchmark measured on that GPU (each pass weighted by its FLOPs): within 10%. The window cases hold
    the band a query tile computes past its window (efficiency.toml attn_window_tile): the 128-key window runs at 0.07
    of GB200's peak, where the key count alone (L / (L + attn_keys_half)) had put it at 0.17."""
    gpu, shape, seq = case
    fwd, bwd, f_flops, b_flops = CUDNN_FRONTEND[case]
    measured = (f_flops + b_flops) / (f_flops / fwd + b_flops / bwd) * 1e12
    name, window = _MODEL[shape]
    g = load_gpu(gpu)
    predicted = attention_rate(load_model(name), seq, window, rates(g, "bf16", efficiency(gpu)))
    assert predicted == pytest.approx(measured, rel=0.10), (predicted / 1e12, measured / 1e12)


@pytest.mark.parametrize(("model", "factor"), [
    ("gpt-oss-120b", 0.42 / 0.51),  # head dim 64
    ("qwen3-235b-a22b", 1.0),  # 128
    ("deepseek-v3", 0.449 / 0.51),  # MLA: 128 + 64 rotary query-key, 128 value: its own measured rate
])
def test_head_shapes_run_at_their_own_rates(model, factor):
    r = rates(load_gpu("h100"), "bf16", efficiency("h100"))
    assert head_dim_factor(load_model(model), r) == pytest.approx(factor, rel=1e-6)


# cuDNN causal forward and backward, head dim 128 (llama3.1: 64 query / 8 KV heads), by sequence length: TFLOP/s
# (cudnn-frontend results @ 3929da2, as CUDNN_FRONTEND: H200 cuDNN 9.19.1, GB200 and GB300 9.22)
CUDNN_CAUSAL = {
    "h200": {2048: (484, 370), 4096: (591, 474), 8192: (644, 541), 16384: (673, 579), 32768: (688, 581)},
    "gb200": {2048: (1097, 885), 4096: (1408, 1148), 8192: (1574, 1332), 16384: (1708, 1328), 32768: (1622, 1226)},
    "gb300": {2048: (1373, 967), 4096: (1703, 1248), 8192: (1856, 1435), 16384: (1915, 1507), 32768: (1953, 1490)},
}


@pytest.mark.parametrize(("gpu", "within"), [("h200", 0.05), ("gb200", 0.13), ("gb300", 0.06)])
def test_rate_by_keys_follows_the_measured_curve(gpu, within):
    """keys_factor (L / (L + attn_keys_half), 1 at 4k) against cuDNN's measured rise with the sequence, forward and
    backward together, relative to 4k: H200's within 5% from 2k to 32k, GB200's within 13% (its 32k falls back)."""
    r = rates(load_gpu(gpu), "bf16", efficiency(gpu))
    curve = {seq: _over_forward_and_backward(*pair) for seq, pair in CUDNN_CAUSAL[gpu].items()}
    for seq, rate in curve.items():
        assert keys_factor((seq + 1) / 2, r) / keys_factor(2048.5, r) == pytest.approx(rate / curve[4096],
                                                                                        rel=within), seq
    assert keys_factor(2048, r) == 1.0


def test_sliding_window_layers_are_charged_their_window_and_its_band():
    """gpt-oss-20b alternates 128-token sliding-window layers with full ones. At 8k a windowed query sees
    128 - 128 x 127 / (2 x 8192) keys on average, a full one (8192 + 1) / 2. A windowed query tile of T rows computes
    the keys of every row's window, W + T of them (efficiency.toml attn_window_tile, 128), at that many keys' rate
    L / (L + attn_keys_half, 540): the windowed layer's attention takes its FLOP share over that rate share of the full
    layer's (walls/compute.py forward_seconds)."""
    from moetune.walls.activations import ActivationContext
    from moetune.walls.compute import forward_flops, forward_seconds

    spec = load_model("gpt-oss-20b")
    windowed, full = (next(k for k in spec.layers if (k.window is not None) == w) for w in (True, False))
    ctx = ActivationContext(seq_length=8192, micro_batch_size=1)
    r = rates(load_gpu("h100"), "bf16", efficiency("h100"))
    attn = [forward_seconds(spec, k, ctx, r, 8, forward_flops(spec, k, ctx))["core_attn"] for k in (windowed, full)]
    w_keys, f_keys = 128 - 128 * 127 / (2 * 8192), (8192 + 1) / 2
    done = w_keys + 128
    rate = (done / (done + 540)) * (w_keys / done) / (f_keys / (f_keys + 540))
    assert attn[0] / attn[1] == pytest.approx(w_keys / f_keys / rate, rel=1e-3)
