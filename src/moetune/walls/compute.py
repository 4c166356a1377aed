"""The compute wall: seconds of GPU work per layer, per micro-batch, on one rank (forward + backward
+ recompute replays), from the hardware FLOPs of flops.layer_flops over achievable throughput.

Throughput by op class: dense GEMMs at ``gemm_eff`` of the precision's peak; routed-expert grouped
GEMMs slowed further by their small per-expert shapes (``m / (m + grouped_m_half)`` with ``m`` the
tokens per local expert); fused attention at ``attn_eff`` of the BF16 peak (FP8 recipes speed GEMMs
only, seeds/000 "FP8 Recipe Quick Decision"); elementwise work (norms, activations, permutation,
router softmax) is memory-bound: ``mem_passes`` x the layer's saved activation bytes over HBM.
Backward costs 2x the forward for GEMMs (dgrad + wgrad) and 2.5x for fused attention.
"""

from dataclasses import dataclass, replace

import numpy as np

from moetune.layout.knobs import PLAN_ROUTER_DTYPE, Knobs
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import LayerKind, ModelSpec
from moetune.walls.activations import ActivationContext, layer_activation_items
from moetune.walls.attention_rate import attention_rate, attention_span, sparse_attention_rate
from moetune.walls.dsa import head_padding, indexer_seconds
from moetune.walls.efficiency import rate_key
from moetune.walls.flops import gemm_shapes, is_dsa, layer_flops, tp_shard, tp_size

# Backward / forward work: a GEMM's backward is dgrad + wgrad (2x); fused attention's backward runs five
# matmuls to the forward's two (2.5x; Dao 2023, FlashAttention-2, Sec. 3.1).
BWD_GEMM, BWD_ATTN = 2.0, 2.5


def passes(op_class: str) -> float:
    """Forward + backward work of an op class over its forward: 1 + BWD_ATTN for fused attention, else 1 + BWD_GEMM."""
    return 1 + (BWD_ATTN if op_class == "core_attn" else BWD_GEMM)


@dataclass(kw_only=True, slots=True)
class Rates:
    """FLOP/s and bytes/s one rank achieves per op class."""

    gemm: float
    attn: float  # fused attention at head dim 128
    attn_hdim64: float  # ... at head dim 64 (head_dim_factor)
    attn_mla: float  # ... at MLA's 192-wide query-key and 128-wide value heads
    attn_keys_half: float  # keys per query at which fused attention runs at half its long-sequence rate
    attn_window_tile: float  # query rows a fused-attention tile holds: a sliding window's band computes W + this keys
    router: float  # the router GEMM runs in FP32/BF16 whatever the recipe
    head: float  # the LM head: BF16 unless fp8_output_proj puts it under MXFP8 (Knobs.fp8_output_proj)
    hbm: float
    m_half: float
    tile: int = 1  # GEMM tile edge: weight dimensions round up to it
    arch: str | None = None  # the GPU's architecture: the sparse attention kernels' head groups (walls/dsa.py)


def gemm_rate(gpu: GpuSpec, precision: str, eff: dict) -> float:
    """FLOP/s of a large GEMM under the recipe, its quantization included: BF16 at gemm_eff of the BF16 peak; a
    low-precision recipe at the architecture's reference FP8 rate (fp8_gemm_eff of the FP8 peak) times the recipe's
    own rate over it (efficiency.toml rate_*, from Transformer Engine's GEMM benchmark in autocast)."""
    gpu.peak_tflops(precision)  # refuses a recipe the GPU has no Tensor Core rate for
    if precision == "bf16":
        return gpu.bf16_tflops * 1e12 * eff["gemm_eff"]
    return gpu.fp8_tflops * 1e12 * eff["fp8_gemm_eff"] * eff[rate_key(precision)]


def rates(gpu: GpuSpec, precision: str, eff: dict, *, fp8_head: bool = False) -> Rates:
    gemm, bf16 = gemm_rate(gpu, precision, eff), gpu.bf16_tflops * 1e12 * eff["gemm_eff"]
    return Rates(gemm=gemm, attn=gpu.bf16_tflops * 1e12 * eff["attn_eff"],
                 attn_hdim64=gpu.bf16_tflops * 1e12 * eff["attn_eff_hdim64"],
                 attn_mla=gpu.bf16_tflops * 1e12 * eff["attn_eff_mla"],
                 attn_keys_half=eff["attn_keys_half"], attn_window_tile=eff["attn_window_tile"], router=bf16,
                 head=gemm if fp8_head else bf16, hbm=gpu.hbm_tbps * 1e12 * eff["mem_eff"],
                 m_half=eff["grouped_m_half"], tile=gpu.gemm_tile, arch=gpu.arch)


def _tile_eff(shapes: list, tile: int, tp) -> float:
    """Useful over issued MACs of a class's GEMMs when output tiles round up: the forward's output is N wide,
    dgrad's K, wgrad's K x N (NVIDIA, "Matrix Multiplication Background", tile quantization)."""
    if not shapes or tile <= 1:
        return 1.0
    def up(d):
        return np.ceil(d / tile) * tile

    useful, issued = 0.0, 0.0
    for k, n, split in shapes:
        k, n = tp_shard(k, n, split, tp)
        useful = useful + 3 * k * n
        issued = issued + k * up(n) + up(k) * n + up(k) * up(n)
    return useful / issued


def routed_rows(spec: ModelSpec, ctx: ActivationContext):
    """Rows the routed experts of one rank compute for one micro-batch: its tokens (the ETP group's, past the
    sequence-parallel split) times top-k, scaled by the busiest rank's token imbalance."""
    return ctx.tokens / ctx.sp_div * spec.moe_router_topk * ctx.etp * ctx.token_imbalance


def forward_flops(spec: ModelSpec, kind: LayerKind, ctx: ActivationContext) -> dict:
    """flops.layer_flops of one micro-batch on one TP group, attention over the keys each query sees (its window's on
    a sliding-window layer, its chunk's on a chunked one: forward_seconds says why)."""
    return layer_flops(spec, kind, ctx.tokens, attention_span(spec, ctx.seq_length), window=kind.window)


def forward_seconds(spec: ModelSpec, kind: LayerKind, ctx: ActivationContext, r: Rates, ep, f: dict) -> dict:
    """Forward seconds by class on one rank for one micro-batch (tokens = seq/CP * MBS of the TP group); F: its
    forward_flops."""
    # Sliding-window layers (gpt-oss) are charged their window's attention, the keys each query sees
    # (flops.attended_keys), at attention_rate's band rate: flash-style fused attention skips the tiles a window masks
    # whole, and computes the rest of the tiles it touches. They had been charged full causal attention while gpt-oss
    # read 17-27% fast on HybridEP (the window then put it 4-8 points further off); once the fc2 bias pass was charged
    # (expert_bias_seconds) the window read better: the same 40/40, 101/111 and 31/39 runs within 15%, medians
    # 3.3/3.8/8.2% against 4.1/4.4/8.8% (docs/time.md)
    # chunked attention: each query sees its chunk only (FLOP counters count the whole; only core attention depends on
    # the length); a CP ring's slowdown stays the whole sequence's (Bridge hands the chunks to Transformer Engine's CP
    # attention, whose split is not modelled)
    span = attention_span(spec, ctx.seq_length)
    if is_dsa(spec, kind):  # the top-k's keys at the fused-attention rate, on the heads the sparse kernels run
        attn_rate = sparse_attention_rate(spec, span, r) / head_padding(spec, ctx.tp, r.arch)
    else:
        attn_rate = attention_rate(spec, span, kind.window, r)
    experts_local = spec.num_moe_experts / ep if spec.num_moe_experts else 1
    routed = routed_rows(spec, ctx)
    per_expert = routed / experts_local
    shape = per_expert / (per_expert + r.m_half)
    g = gemm_shapes(spec, kind)
    te = {k: _tile_eff(v, r.tile, tp_size(k, ctx.tp, ctx.etp)) for k, v in g.items()}
    return {
        "attn_proj": (f["attn_proj"] / te["attn_proj"] + f["mixer_proj"] / te["mixer_proj"]) / ctx.tp / r.gemm,
        "core_attn": (f["core_attn"] / attn_rate + f["mixer_scan"] / r.attn) / ctx.tp,
        "dense_mlp": f["dense_mlp"] / ctx.tp / r.gemm / te["dense_mlp"],
        "shared_experts": f["shared_experts"] / ctx.tp / r.gemm / te["shared_experts"],
        "router": f["router"] / ctx.sp_div / r.router,
        "routed_experts": f["routed_experts"] / ctx.sp_div * ctx.token_imbalance / np.maximum(
            r.gemm * shape * te["routed_experts"], 1.0),
    }


# Recompute module -> forward classes it replays (Megatron recompute_modules, transformer_config.py).
REPLAYS = {
    "core_attn": ("core_attn",),
    "mlp": ("dense_mlp",),
    "moe": ("router", "routed_experts", "shared_experts"),
    "shared_experts": ("shared_experts",),
    "mla_up_proj": ("mla_up",),  # the q and kv up-projections only: a share of attn_proj (mla_up_share)
}


def mla_up_share(spec: ModelSpec, kind: LayerKind) -> float:
    """Share of an MLA layer's projection FLOPs in the up-projections mla_up_proj recompute replays (linear_q_up_proj
    and linear_kv_up_proj inside qkv_up_proj_and_rope_apply; Megatron-Core transformer/multi_latent_attention.py):
    DeepSeek-V3's are 29% of them, its output projection 63% (flops.gemm_shapes)."""
    if kind.mixer != "mla":
        return 0.0
    m, n = spec.mla, spec.num_attention_heads
    macs = [k * nn for k, nn, _ in gemm_shapes(spec, kind)["attn_proj"]]
    # without a q LoRA rank the one q projection runs inside the checkpointed function too (linear_q_proj)
    q_in = m.q_lora_rank if m.q_lora_rank is not None else spec.hidden_size
    up = m.kv_lora_rank * n * m.kv_up_head_dim + q_in * n * m.q_head_dim
    return up / sum(macs)


def replayed_classes(recompute: str, modules: frozenset[str], classes) -> set[str]:
    """The forward classes a recompute plan replays: all of them under full recompute, else REPLAYS of each module."""
    return set(classes) if recompute == "full" else {c for m in modules for c in REPLAYS.get(m, ())}


def layer_compute_seconds(spec: ModelSpec, kind: LayerKind, ctx: ActivationContext, r: Rates, ep, *,
                          recompute: str, modules: frozenset[str], eff: dict) -> dict:
    """Forward + backward (+ replay) seconds by class, plus memory-bound elementwise time. Independent of
    activation offloading: the GPU runs the same kernels whether their saved inputs then go to the host or not."""
    ctx = replace(ctx, offload_modules=frozenset(), stash_factor=1.0)
    f = forward_flops(spec, kind, ctx)
    fwd = forward_seconds(spec, kind, ctx, r, ep, f)
    out = {k: v * passes(k) for k, v in fwd.items()}
    replay = replayed_classes(recompute, modules, fwd)
    # summed in the forward's order, not the set's (its hash order moved the last digit from run to run)
    out["recompute"] = sum(fwd[c] for c in fwd if c in replay) + (
        fwd["attn_proj"] * mla_up_share(spec, kind) if "mla_up" in replay else 0.0)
    # Elementwise kernels run whatever is saved: their bytes are those of the layer without recompute;
    # replays run them again (full recompute: the whole layer once more), selective ones the items they drop. Not the
    # bytes saved less: core_attn recompute saves more than it drops (activations.py _gqa, V's view pins the QKV output)
    items = layer_activation_items(spec, kind, replace(ctx, recompute_modules=frozenset()))
    touched = sum(items.values())
    kept = () if recompute == "full" else layer_activation_items(spec, kind, ctx)
    replayed = sum(v for k, v in items.items() if k not in kept)
    out["elementwise"] = eff["mem_passes"] * (touched + replayed) / r.hbm
    if is_dsa(spec, kind):
        _dsa_indexer(spec, kind, ctx, r, f, out, replay)
    return out


def _dsa_indexer(spec: ModelSpec, kind: LayerKind, ctx: ActivationContext, r: Rates, f: dict, out: dict,
                 replay: set) -> None:
    """A DSA layer's indexer seconds into `out` (class "indexer", dsa.indexer_seconds): its forward, replayed by full
    recompute and by core_attn recompute (which checkpoints all of DSAttention, absorbed_mla.py), and its loss once.
    F: the layer's forward_flops."""
    span = attention_span(spec, ctx.seq_length)
    sparse = sparse_attention_rate(spec, span, r)
    fwd, loss = indexer_seconds(spec, kind, f, ctx.tp, r, sparse, attention_rate(spec, span, None, r))
    out["indexer"] = fwd + loss
    out["recompute"] = out["recompute"] + (fwd if "core_attn" in replay else 0.0)


# Bytes a biased expert layer's fc2 bias pass moves per element of its [routed rows, hidden] output, forward and
# backward, by the dtype of the routing probabilities. Megatron-Core adds the fc2 bias scaled by each row's
# probability outside the GEMM (moe/experts.py TEGroupedMLP._apply_bias, core_v0.16.0-v0.18.0: fc2 runs with
# skip_bias_add=True; the output split per local expert, `t + b * p` on each, then torch.cat and .to(t.dtype)),
# eagerly. BF16 probabilities: b*p written (2), t + bp read 2+2 written 2, cat read 2 written 2 = 12 forward (the .to
# copies nothing); backward the two products and reductions of mul's gradient (3 x 2 each) and the split's gradient,
# a cat of the per-expert gradients of t (2+2) = 16. FP32 probabilities (an FP32 router's, or DeepEP's and HybridEP's
# cast: moe/token_dispatcher.py "only supports float32 probs") promote the temporaries: 4 + (2+4+4) + (4+4) + the
# cast back (4+2) = 28 forward; backward the cast's and the add's gradient casts (6 + 6), the products at 4 bytes
# (24) and the split's cat (4) = 40. Counted by hand and checked by logging the bytes every aten op of the expression
# reads and writes under autograd (PyTorch 2.13, four experts).
# The probabilities are FP32 under any dispatcher where the router computes in FP32 or FP64 (moe_router_dtype;
# moe/router.py: the logits in that dtype, the probabilities type_as(logits)). FP64 ones are charged as FP32: no
# published run sets it, and its temporaries' bytes were not logged.
EXPERT_BIAS_BYTES = {"bf16": (12, 16), "fp32": (28, 40)}
FP32_PROBS_DISPATCHERS = frozenset({"deepep", "hybridep"})


def fp32_probs_source(knobs: Knobs) -> str | None:
    """What makes the experts' routing probabilities FP32 ("moe_router_dtype": the router's own dtype, else
    "dispatcher": DeepEP's or HybridEP's cast), or None where they stay the activations' BF16."""
    if knobs.moe_router_dtype is not None:
        return "moe_router_dtype"
    return "dispatcher" if knobs.dispatcher in FP32_PROBS_DISPATCHERS else None


def router_dtype_or_plan(given: bool, value: str | None) -> str | None:
    """moe_router_dtype where estimate's options or a saved result may leave it out: the value given (None: the
    activations' BF16), else the FP32 router every plan's config sets (PLAN_ROUTER_DTYPE); whether the fallback is
    listed as defaulted is router_dtype_defaulted's. A config that leaves it out runs its model bridge's instead
    (planner/from_config.py)."""
    return value if given else PLAN_ROUTER_DTYPE


def router_dtype_defaulted(spec: ModelSpec, given: bool) -> bool:
    """Whether moe_router_dtype is listed as defaulted: left out (the FP32 router every plan's config sets stands in,
    PLAN_ROUTER_DTYPE) where the router's dtype moves this model's estimate, only through the fc2 bias pass of biased
    MoE experts (expert_bias_seconds; gpt-oss). estimate's options and a saved result's reload both ask it."""
    return not given and bool(spec.num_moe_layers and spec.add_mlp_bias)


def expert_bias_seconds(spec: ModelSpec, ctx: ActivationContext, r: Rates, knobs: Knobs) -> tuple:
    """(forward, backward) seconds of the fc2 bias pass of a biased MoE layer's experts (gpt-oss: add_mlp_bias) on one
    rank, one micro-batch: memory-bound, at the elementwise HBM rate, with the bytes of the probabilities' dtype
    (fp32_probs_source). A recompute that replays the experts runs the forward again (walls/step.py layer_time)."""
    per_element = EXPERT_BIAS_BYTES["bf16" if fp32_probs_source(knobs) is None else "fp32"]
    elements = routed_rows(spec, ctx) * spec.hidden_size
    return tuple(elements * b / r.hbm for b in per_element)


def heads_seconds(spec: ModelSpec, tokens, heads, tp, padded_vocab, r: Rates):
    """Output-layer GEMMs (forward + backward) of the loss heads a stage holds (main loss + each MTP layer);
    the GEMM runs over the padded vocabulary split over TP, in BF16 unless fp8_output_proj (Rates.head)."""
    return heads * (1 + BWD_GEMM) * 2 * tokens * spec.hidden_size * padded_vocab / tp / r.head
