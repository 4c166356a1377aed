"""FLOP counting: our Megatron model FLOPs vs the FLOPs Megatron Bridge itself reported, vs the classic
closed form, and properties of the hardware per-layer counts.

The key check: a published row's tflops_per_gpu * 1e12 / tokens_per_s_per_gpu is the model FLOPs per
token that Bridge computed for that run; megatron_model_flops(...) / (gbs * seq) must equal it."""

import csv
import dataclasses
import re
from pathlib import Path

import pytest

from moetune.errors import MoetuneError
from moetune.specs.model import LayerKind, ModelSpec
from moetune.specs.registry import load_model
from moetune.walls.flops import (
    attended_keys,
    causal_context,
    layer_flops,
    layer_windows,
    logits_flops,
    mtp_proj_flops,
)
from moetune.walls.model_flops import megatron_model_flops

CSV = Path(__file__).resolve().parents[3] / "shared" / "data" / "published_runs.csv"

# Bridge sets gpt-oss's activation_func = quick_gelu (src/megatron/bridge/models/gpt_oss/gpt_oss_bridge.py);
# the HF config says hidden_act "silu", so state Megatron's activation explicitly.
_GPT_OSS = {"activation": "quick_gelu"}
# CSV model name -> (built-in model, spec overrides)
MODELS = {
    "DeepSeekV3": ("deepseek-v3", {}),
    "DeepSeekV3 (w/ MTP)": ("deepseek-v3", {}),
    "DeepSeekV3 (tokendrop)": ("deepseek-v3", {}),
    "DeepSeekV3 (dropless)": ("deepseek-v3", {}),
    "DeepSeek-V3": ("deepseek-v3", {}),
    "DeepSeekV3 (w/o MTP)": ("deepseek-v3", {"mtp_num_layers": 0}),
    "GPT OSS 120B": ("gpt-oss-120b", _GPT_OSS),
    "GPT-OSS-120B": ("gpt-oss-120b", _GPT_OSS),
    "GPT-OSS-20B": ("gpt-oss-20b", _GPT_OSS),
    "Qwen3_30B_a3B": ("qwen3-30b-a3b", {}),
    "Qwen3_30B_a3B (tokendrop)": ("qwen3-30b-a3b", {}),
    "Qwen3-30B-A3B": ("qwen3-30b-a3b", {}),
    "Qwen3_235B_a22B": ("qwen3-235b-a22b", {}),
    "Qwen3_235B_a22B (tokendrop)": ("qwen3-235b-a22b", {}),
    "Qwen3-235B-A22B": ("qwen3-235b-a22b", {}),
    "Nemotron_3_Nano": ("nemotron3-nano-30b-a3b", {}),
    "Nemotron-3-Nano-30B-A3B": ("nemotron3-nano-30b-a3b", {}),
    "Kimi_K2": ("kimi-k2", {}),
    "Moonlight-16B-A3B": ("moonlight-16b-a3b", {}),
}
# Dense BSHD pre-training only: SFT/PEFT rows pack sequences (Bridge then counts sum(s_i^2)).
_TASKS = ("pretrain", "pretrain_performance", "pretrain_weak_scaling", "checkpoint_resume")


def _rows() -> list[dict]:
    if not CSV.exists():
        return []
    out = []
    for row in csv.DictReader(CSV.open()):
        ok = (row["model"] in MODELS and row["framework"].startswith("Megatron-Bridge") and row["seq_len"]
              and row["tflops_per_gpu"] and row["tokens_per_s_per_gpu"] and row["task"].split(" ")[0] in _TASKS)
        if ok:
            out.append(row)
    return out


def _convention(row: dict) -> str:
    """Releases up to 26.04.01 predate Bridge PR #3947 (GLU factor for any GLU, exact SWA)."""
    return "bridge-pre-2026-05" if re.match(r"NeMo (25\.|26\.0[24])", row["sw_version"]) else "bridge"


def _spec(row: dict) -> ModelSpec:
    name, overrides = MODELS[row["model"]]
    spec = dataclasses.replace(load_model(name), **overrides)
    h100_recipe = r"(pretrain|checkpoint_resume) \(recipe gpt_oss_\w+_pretrain_(config|16gpu_h100)"
    if name.startswith("gpt-oss") and re.match(h100_recipe, row["task"]):
        # The H100 gpt-oss pre-training recipes use Megatron's NullTokenizer with vocab_size 32000
        # (recipes/gpt_oss/h100/gpt_oss.py, recipes/utils/tokenizer_utils.py DEFAULT_NULL_TOKENIZER_VOCAB_SIZE).
        spec = dataclasses.replace(spec, vocab_size=32000)
    return spec


ROWS = _rows()


def test_enough_published_rows_are_checked():
    if not CSV.exists():
        pytest.skip("../shared/data is not beside the repository")
    assert len(ROWS) >= 60
    assert {MODELS[r["model"]][0] for r in ROWS} >= {
        "deepseek-v3", "gpt-oss-120b", "gpt-oss-20b", "qwen3-30b-a3b", "qwen3-235b-a22b",
        "nemotron3-nano-30b-a3b", "kimi-k2", "moonlight-16b-a3b"}
    assert {_convention(r) for r in ROWS} == {"bridge", "bridge-pre-2026-05"}


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['row_id']}-{r['model']}" for r in ROWS])
def test_model_flops_per_token_match_what_bridge_reported(row):
    published = float(row["tflops_per_gpu"]) * 1e12 / float(row["tokens_per_s_per_gpu"])
    seq, tp = int(row["seq_len"]), int(row["tp"] or 1)
    ours = megatron_model_flops(_spec(row), seq, 8, tp=tp, convention=_convention(row)) / (8 * seq)
    assert ours == pytest.approx(published, rel=0.01)


def test_median_error_per_model_is_within_rounding():
    """Single rows carry the rounding of two printed figures (one B300 row is 0.9% off); the median
    per model must be far tighter, tight enough to catch a missing MTP eh-proj term (0.23% of DSV3)."""
    errors: dict[tuple, list[float]] = {}
    for row in ROWS:
        spec = _spec(row)
        published = float(row["tflops_per_gpu"]) * 1e12 / float(row["tokens_per_s_per_gpu"])
        seq, tp = int(row["seq_len"]), int(row["tp"] or 1)
        ours = megatron_model_flops(spec, seq, 1, tp=tp, convention=_convention(row)) / seq
        errors.setdefault((spec.name, spec.mtp_num_layers, spec.vocab_size), []).append(abs(ours / published - 1))
    for model, errs in errors.items():
        assert sorted(errs)[len(errs) // 2] < 0.0015, model


def test_gpt_oss_glu_convention_changed_at_26_06():
    """Published: ~27.2 GFLOP/token (<= 26.04.01) vs ~32.6 (>= 26.06) for the same model at seq 4096."""
    spec = dataclasses.replace(load_model("gpt-oss-120b"), **_GPT_OSS)
    old = megatron_model_flops(spec, 4096, 1, convention="bridge-pre-2026-05") / 4096
    new = megatron_model_flops(spec, 4096, 1, convention="bridge") / 4096
    assert old / 1e9 == pytest.approx(27.2, abs=0.1)
    assert new / 1e9 == pytest.approx(32.6, abs=0.1)


# ---- the classic closed form ------------------------------------------------------------------

def _gpt(*, h=1024, layers=4, heads=16, vocab=50304, groups=None, glu=False, ffn=None) -> ModelSpec:
    return ModelSpec(
        name="toy", model_type="toy", hidden_size=h, vocab_size=vocab,
        layers=(LayerKind(mixer="gqa", mlp="dense"),) * layers, num_attention_heads=heads,
        num_query_groups=groups or heads, kv_channels=h // heads, ffn_hidden_size=ffn or 4 * h,
        gated_linear_unit=glu, activation="silu" if glu else "gelu",
        num_moe_experts=0, moe_router_topk=0, moe_ffn_hidden_size=0)


def test_dense_gpt_matches_narayanan_closed_form():
    """Narayanan et al. 2021 (Megatron-LM at scale), appendix: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
    Their s/(6h) counts the full s x s score matrix; Megatron halves it for the causal mask -> s/(12h)."""
    h, layers, s, b, v = 1024, 4, 2048, 8, 50304
    expected = 72 * b * s * layers * h * h * (1 + s / (12 * h) + v / (12 * layers * h))
    assert megatron_model_flops(_gpt(h=h, layers=layers, vocab=v), s, b) == pytest.approx(expected, rel=1e-12)


def test_gqa_swiglu_gpt_by_hand():
    h, layers, s, b, n, g, ffn, v = 2048, 3, 1024, 2, 16, 4, 5632, 32000
    d = h // n
    gemm_weights = h * (n * d + 2 * g * d) + n * d * h + 3 * h * ffn  # qkv, proj, fc1 (2x wide) + fc2
    per_token = 6 * (layers * (gemm_weights + 2 * n * d * s / 2) + h * 32000)  # vocab 32000 is a multiple of 128
    spec = _gpt(h=h, layers=layers, heads=n, groups=g, glu=True, ffn=ffn, vocab=v)
    assert megatron_model_flops(spec, s, b) == pytest.approx(b * s * per_token, rel=1e-12)


def test_logits_use_the_vocab_padded_to_divisible_by_times_tp():
    spec = _gpt(vocab=50257)
    tiny = dataclasses.replace(spec, vocab_size=1)  # pads to 128 * tp
    for tp, padded in ((1, 50304), (8, 51200)):
        extra = megatron_model_flops(spec, 512, 1, tp=tp) - megatron_model_flops(tiny, 512, 1, tp=tp)
        assert extra == pytest.approx(6 * 512 * spec.hidden_size * (padded - 128 * tp), rel=1e-12)
    assert logits_flops(spec, 10, tp=8) == 2 * 10 * spec.hidden_size * 51200


# ---- conventions and special layers -----------------------------------------------------------

def test_routed_expert_count_does_not_change_model_flops_but_router_hardware_flops_do():
    spec = load_model("qwen3-30b-a3b")
    more = dataclasses.replace(spec, num_moe_experts=2 * spec.num_moe_experts)
    assert megatron_model_flops(more, 4096, 4) == megatron_model_flops(spec, 4096, 4)
    kind = spec.layers[0]
    assert layer_flops(more, kind, 100, 4096)["router"] == 2 * layer_flops(spec, kind, 100, 4096)["router"]
    assert layer_flops(spec, kind, 100, 4096)["router"] == 2 * 100 * spec.hidden_size * spec.num_moe_experts


def test_linear_attention_layers_have_no_quadratic_term():
    """Qwen3-Next: only every 4th layer is softmax attention, so only those grow with seq."""
    spec = load_model("qwen3-next-80b-a3b")
    attn_layers = sum(k.mixer == "gqa" for k in spec.layers)
    assert 0 < attn_layers < spec.num_layers
    q = spec.num_attention_heads * spec.kv_channels
    per_token = {s: megatron_model_flops(spec, s, 1) / s for s in (4096, 8192)}
    assert per_token[8192] - per_token[4096] == pytest.approx(6 * attn_layers * q * 4096, rel=1e-9)


def test_attention_gate_is_the_only_difference_for_qwen3_next_before_2026_05():
    spec = load_model("qwen3-next-80b-a3b")
    attn_layers = sum(k.mixer == "gqa" for k in spec.layers)
    q = spec.num_attention_heads * spec.kv_channels
    gap = megatron_model_flops(spec, 4096, 2) - megatron_model_flops(spec, 4096, 2, convention="bridge-pre-2026-05")
    assert gap == pytest.approx(6 * 2 * 4096 * attn_layers * spec.hidden_size * q, rel=1e-9)


def test_megatron_lm_counts_no_sliding_window_and_swiglu_only():
    spec = dataclasses.replace(load_model("gpt-oss-120b"), **_GPT_OSS)
    lm = megatron_model_flops(spec, 4096, 1, convention="megatron-lm")
    assert lm == megatron_model_flops(spec, 4096, 1, convention="bridge-pre-2026-05")
    silu = load_model("qwen3-30b-a3b")  # SiLU, no window, no gate: every convention agrees
    counts = {c: megatron_model_flops(silu, 4096, 1, convention=c) for c in ("bridge", "bridge-pre-2026-05",
                                                                              "megatron-lm")}
    assert len(set(counts.values())) == 1


def test_unknown_convention_is_a_user_error():
    with pytest.raises(MoetuneError, match="convention"):
        megatron_model_flops(load_model("qwen3-30b-a3b"), 4096, 1, convention="nemo")


@pytest.mark.parametrize("s,w", [(64, None), (64, 8), (64, 64), (64, 100), (33, 1), (4096, 128)])
def test_causal_window_context_by_brute_force(s, w):
    pairs = [min(i + 1, w or s) for i in range(s)]  # query i attends keys max(0, i-W+1)..i
    assert attended_keys(s, w) == pytest.approx(sum(pairs) / s)
    if w is not None and w < s:  # Bridge's exact window formula counts the same pairs
        assert causal_context(s, w) == pytest.approx(sum(pairs) / s)
    else:  # full attention: Megatron's convention is s/2 (the diagonal is not counted)
        assert causal_context(s, w) == s / 2


# ---- hardware per-layer FLOPs ------------------------------------------------------------------

@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "deepseek-v3", "mixtral-8x7b"])
def test_hardware_layers_add_up_to_model_flops(name):
    """3 x forward of every layer (router aside) + logits = Megatron's count, up to norms and the
    causal diagonal that the model-FLOPs convention leaves out."""
    spec, s, b = load_model(name), 4096, 2
    layers = spec.layers + (spec.mtp_layer_kind,) * spec.mtp_num_layers
    fwd = sum(sum(v for k, v in layer_flops(spec, kind, b * s, s).items() if k != "router") for kind in layers)
    fwd += logits_flops(spec, b * s) * (1 + spec.mtp_num_layers)
    fwd += spec.mtp_num_layers * mtp_proj_flops(spec, b * s)
    assert 3 * fwd == pytest.approx(megatron_model_flops(spec, s, b), rel=2e-3)


def test_hardware_mamba_uses_the_real_inner_width():
    """Megatron's hybrid count assumes d_inner = 2h; Nemotron-3-Nano has 64 heads x 64 = 4096 < 2*2688."""
    spec = load_model("nemotron3-nano-30b-a3b")
    kind = next(k for k in spec.layers if k.mixer == "mamba")
    h, t = 2688, 1000
    in_proj = h * (2 * 4096 + 2 * 8 * 128 + 64)  # z and x, B and C per group, dt per head
    assert layer_flops(spec, kind, t, 8192)["mixer_proj"] == 2 * t * (in_proj + 4096 * h)
    assert layer_flops(spec, kind, t, 8192)["core_attn"] == 0


def test_sliding_window_layers_do_less_core_attention():
    spec = load_model("gpt-oss-120b")
    windows = layer_windows(spec)
    assert windows[:2] == (128, None) and len(windows) == spec.num_layers
    kind = spec.layers[0]
    swa = layer_flops(spec, kind, 4096, 4096, window=windows[0])["core_attn"]
    full = layer_flops(spec, kind, 4096, 4096)["core_attn"]
    assert swa / full == pytest.approx(attended_keys(4096, 128) / attended_keys(4096), rel=1e-12)


def test_mla_up_proj_recompute_replays_the_up_projections_alone():
    """Megatron-Core checkpoints linear_q_up_proj and linear_kv_up_proj (with RoPE) for mla_up_proj, not the down- or
    output projections (transformer/multi_latent_attention.py qkv_up_proj_and_rope_apply). DeepSeek-V3 (hidden 7168,
    128 heads, q LoRA 1536, kv LoRA 512, qk 128 + rope 64, v 128): up = 1536*128*192 + 512*128*256 MACs a token,
    of up + 7168*1536 + 7168*576 + 128*128*7168 in all."""
    from moetune.walls.compute import mla_up_share
    spec = load_model("deepseek-v3")
    up = 1536 * 128 * 192 + 512 * 128 * 256
    assert mla_up_share(spec, spec.layers[-1]) == pytest.approx(up / (up + 7168 * 1536 + 7168 * 576 + 128 * 128 * 7168))
    assert mla_up_share(load_model("qwen3-30b-a3b"), load_model("qwen3-30b-a3b").layers[0]) == 0.0


@pytest.mark.parametrize(("seq", "mlm"), [(4096, 3.28764e15), (32768, 3.51676e16), (131072, 2.62267e17)])
def test_megatron_lm_lays_qwen3_next_linear_pattern_over_its_mtp_layer(seq, mlm):
    """Megatron-LM's training.py (core_v0.19.0:715-719) builds the linear-attention pattern over num_layers +
    mtp_num_layers, so Qwen3-Next's MTP layer (index 48, (48 + 1) % 4 != 0) counts as gated delta-net; Bridge main
    counts it as the last decoder layer (full attention, PR #4834). MLM figures: an independent re-typing of that
    function for TP 2, GBS 32 (audit of 2026-11-29); moetune had counted the MTP layer as attention, +5.1% at 128k."""
    spec = dataclasses.replace(load_model("qwen3-next-80b-a3b"), mtp_num_layers=1)
    assert megatron_model_flops(spec, seq, 32, tp=2, convention="megatron-lm") == pytest.approx(mlm, rel=2e-6)
    assert megatron_model_flops(spec, seq, 32, tp=2, convention="bridge-0.5") == pytest.approx(mlm, rel=2e-6)
    assert megatron_model_flops(spec, seq, 32, tp=2, convention="bridge") > mlm * 1.001


def test_each_bridge_release_reports_its_own_counter():
    """v0.2-0.4 predate PR #3947 (GLU, windows), v0.5 lays the linear pattern over MTP, v0.6 has PR #4834 but not the
    DSA term (52fc01b9a); main (no number) and later releases count as main. Walls takes the number the planner read
    (planner/release_fit.py release_model)."""
    from moetune.walls.model_flops import bridge_release_convention
    got = {v: bridge_release_convention(v) for v in ((0, 2, 0), (0, 4, 2), (0, 5, 0), (0, 5, 1), (0, 6, 0), (0, 7, 0),
                                                      None)}
    assert got == {(0, 2, 0): "bridge-pre-2026-05", (0, 4, 2): "bridge-pre-2026-05", (0, 5, 0): "bridge-0.5",
                   (0, 5, 1): "bridge-0.5", (0, 6, 0): "bridge-0.6", (0, 7, 0): "bridge", None: "bridge"}
