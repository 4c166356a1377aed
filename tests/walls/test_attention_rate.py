"""Fused attention's rate (walls/compute.py): a kernel rate from published cuDNN measurements, by head dim."""

import pytest

from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.compute import BWD_ATTN, head_dim_factor, keys_factor, rates
from moetune.walls.efficiency import efficiency

# cuDNN fused attention on H100 SXM5, BF16, 4k sequence (FlashAttention-3 paper, Shah et al. 2024, Figs. 5-6):
# TFLOP/s forward (causal) and backward, by head dim
CUDNN_4K = {128: (518, 499), 64: (363, 417)}
H100_PEAK = 989.4


def _over_forward_and_backward(fwd: float, bwd: float) -> float:
    """The rate of a forward and its BWD_ATTN-times-larger backward run back to back, as a fraction of the peak."""
    return (1 + BWD_ATTN) / (1 / fwd + BWD_ATTN / bwd) / H100_PEAK


def test_priors_are_the_measured_kernel_rates():
    eff = efficiency("h100")
    assert eff["attn_eff"] == pytest.approx(_over_forward_and_backward(*CUDNN_4K[128]), abs=0.01)
    assert eff["attn_eff_hdim64"] == pytest.approx(_over_forward_and_backward(*CUDNN_4K[64]), abs=0.01)


@pytest.mark.parametrize(("model", "factor"), [
    ("gpt-oss-120b", 0.40 / 0.51),  # head dim 64
    ("qwen3-235b-a22b", 1.0),  # 128
    ("deepseek-v3", 1.0),  # MLA: 128 + 64 rotary, wider than 128
])
def test_smaller_heads_run_slower(model, factor):
    r = rates(load_gpu("h100"), "bf16", efficiency("h100"))
    assert head_dim_factor(load_model(model), r) == pytest.approx(factor, rel=1e-6)


# cuDNN causal forward, head dim 128, by sequence length (same figure): TFLOP/s
CUDNN_CAUSAL_FWD = {512: 315, 1024: 410, 2048: 484, 4096: 518, 8192: 529, 16384: 539}


def test_rate_by_keys_follows_the_measured_curve():
    """keys_factor (L / (L + attn_keys_half), 1 at 4k) against cuDNN's measured rise with the sequence: within 4% at
    every length from 512 to 16k, relative to 4k."""
    r = rates(load_gpu("h100"), "bf16", efficiency("h100"))
    for seq, tflops in CUDNN_CAUSAL_FWD.items():
        measured = tflops / CUDNN_CAUSAL_FWD[4096]
        assert keys_factor(seq / 2, r) == pytest.approx(measured, rel=0.04), seq
    assert keys_factor(2048, r) == 1.0


def test_sliding_window_layers_are_charged_their_window():
    """gpt-oss-20b alternates 128-token sliding-window layers with full ones. At 8k a windowed query sees
    128 - 128 x 127 / (2 x 8192) keys on average, a full one (8192 + 1) / 2; each runs at its keys' rate
    L / (L + attn_keys_half) (efficiency.toml, 190): the windowed layer's attention takes that FLOP share over that
    rate share of the full layer's (walls/compute.py forward_seconds; the full causal charge it replaced gave 1)."""
    from moetune.walls.activations import ActivationContext
    from moetune.walls.compute import forward_seconds

    spec = load_model("gpt-oss-20b")
    windowed, full = (next(k for k in spec.layers if (k.window is not None) == w) for w in (True, False))
    ctx = ActivationContext(seq_length=8192, micro_batch_size=1)
    r = rates(load_gpu("h100"), "bf16", efficiency("h100"))
    attn = [forward_seconds(spec, k, ctx, r, 8)["core_attn"] for k in (windowed, full)]
    w_keys, f_keys = 128 - 128 * 127 / (2 * 8192), (8192 + 1) / 2
    rate = (w_keys / (w_keys + 190)) / (f_keys / (f_keys + 190))
    assert attn[0] / attn[1] == pytest.approx(w_keys / f_keys / rate, rel=1e-3)
