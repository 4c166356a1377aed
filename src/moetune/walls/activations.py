"""Activation bytes saved for backward, per layer and per micro-batch, on one rank.

Dense part: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", Sec. 4: a GPT layer stores sbh(34 + 5as/h) bytes in 16-bit (11sbh + 5as^2b attention,
19sbh MLP, 4sbh layer norms); with TP and sequence parallel every term divides by t (their eq. 5).
Each term is a named item below, so the paper's figures are reproduced with ``dropout=True,
flash_attention=False`` and a 4h GeLU MLP. MoE part: our derivation, written down in
docs/activations.md (routed-token copies, expert fc1/activation outputs, router logits, combine).
Recompute modules follow Megatron's ``recompute_modules`` names (transformer_config.py).
"""

from dataclasses import dataclass, field
from functools import reduce

import numpy as np

from moetune.specs.model import LayerKind, ModelSpec
from moetune.walls.dsa import dsa_items
from moetune.walls.flops import is_dsa, kv_groups_per_rank, qkv_gathered

BF16 = 2
FP32 = 4


@dataclass(kw_only=True, slots=True, frozen=True)
class ActivationContext:
    """The per-rank shape of one micro-batch and the knobs that change what is saved."""

    seq_length: int  # full sequence; CP splits it
    micro_batch_size: int
    tp: int = 1
    cp: int = 1
    etp: int = 1
    sequence_parallel: bool = False
    recompute_modules: frozenset[str] = field(default_factory=frozenset)
    dropout: bool = False  # Megatron MoE recipes set hidden/attention dropout to 0
    flash_attention: bool = True  # fused attention keeps O and the softmax statistics, not s^2 terms
    token_imbalance: float = 1.0  # max/mean routed tokens per rank; 1.0 under force-balanced routing
    # routed-expert activations held for backward over the mean: a paged stash is sized at a factor of the average
    # tokens (full-iteration graphs, memory.PAGED_STASH_CUDA); memory only, the GPU works on the tokens routed
    stash_factor: float = 1.0
    fp8_gemm_inputs: bool = False  # FP8 recipes: TE saves GEMM inputs quantized (1 byte/element)
    offload_modules: frozenset[str] = field(default_factory=frozenset)  # inputs moved to host (offload_modules)

    # tokens and sp_div, worked out once: the walls read them many times over a context, on the planner's arrays too
    _shape: tuple = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self) -> None:
        # s*b on this rank before any sequence-parallel split (CP already applied), and the divisor of the tensors that
        # sequence parallelism shards (norms, dropouts, residuals)
        sp_div = np.where(self.sequence_parallel, self.tp, 1) if isinstance(self.sequence_parallel, np.ndarray) \
            else self.tp if self.sequence_parallel else 1  # the planner evaluates many layouts at once
        object.__setattr__(self, "_shape", (self.seq_length // self.cp * self.micro_batch_size, sp_div))

    @property
    def tokens(self) -> int:
        """s*b on this rank before any sequence-parallel split (CP already applied)."""
        return self._shape[0]

    @property
    def sp_div(self) -> int:
        """Divisor of tensors that sequence parallelism shards (norms, dropouts, residuals)."""
        return self._shape[1]


def whole(x):
    """Round to whole bytes/tokens; numpy arrays (the planner's batched layouts) stay arrays."""
    return np.rint(x).astype(np.int64) if isinstance(x, np.ndarray) else round(x)


def _attention_core(spec: ModelSpec, ctx: ActivationContext, q_dim: int, k_dim: int, v_dim: int) -> dict:
    """q, k, v saved for the core attention, its output and its internals (Korthikanti Sec. 4.1)."""
    sb, t, a = ctx.tokens, ctx.tp, spec.num_attention_heads
    items = {"attn_qkv": BF16 * sb * (q_dim + k_dim + v_dim) // t}
    if "core_attn" in ctx.recompute_modules:  # the checkpoint runs the attention under no_grad: nothing inside it
        return items                          # is saved (tensor_parallel/random.py CheckpointFunction.forward)
    if ctx.flash_attention:
        items["attn_softmax_stats"] = FP32 * sb * a // t  # log-sum-exp per head per token
    else:
        s = ctx.seq_length // ctx.cp
        # softmax output (2as^2b) + dropout mask (as^2b) + dropout output (2as^2b)
        items["attn_scores"] = (5 if ctx.dropout else 2) * a * s * sb // t
    return items


def _gqa(spec: ModelSpec, ctx: ActivationContext) -> dict:
    """A rank's attention takes Q, K and V as views into the fused QKV projection's output (attention.py
    get_query_key_value_tensors: one view of the output split with torch.split or Transformer Engine's
    _SplitAlongDim), which past the KV groups (TP a multiple of them, flops.kv_groups_per_rank) is first all-gathered
    over TP, of which the rank keeps one group. RoPE makes Q and K afresh (rope_utils.apply_rotary_pos_emb); V stays
    a view. Without recompute Transformer Engine copies them to a layout it takes where their strides match none
    (dot_product_attention/utils.py get_qkv_layout: V's view and K, fresh from RoPE or its norm, do not), so it
    saves Q, K and V and the buffer dies with the forward. core_attn recompute saves the attention's inputs as given
    (tensor_parallel.checkpoint save_for_backward): the fresh Q and K, and V's view, which keeps the whole buffer
    alive, counted in V's place as `attn_qkv_buffer`: the rank's (q + 2kv)/t, or the whole gathered q + 2kv past
    the groups. Measured with saved_tensors_hooks on a core_v0.16 TransformerLayer (16 heads, 4 groups): per token
    at TP 2 the checkpoint held Q 256, K 64 and the buffer 384 elements; at TP 8 Q 64, K 32 and the buffer 768."""
    d, (q, kv_width) = spec.kv_channels, spec.qkv_widths
    kv = kv_groups_per_rank(spec.num_query_groups, ctx.tp) * d * ctx.tp  # one rank's K (or V), x TP (/TP below)
    recomputed = "core_attn" in ctx.recompute_modules
    items = _attention_core(spec, ctx, q, kv, 0 if recomputed else kv)
    if recomputed:
        held_by = np.where(qkv_gathered(spec, ctx.tp), 1, ctx.tp)  # gathered past the groups, the rank's share within
        items["attn_qkv_buffer"] = whole(BF16 * ctx.tokens * (q + kv_width) // held_by)
    items["attn_proj_input"] = BF16 * ctx.tokens * spec.query_projection_size // ctx.tp
    return items


def _mla_latents(spec: ModelSpec, ctx: ActivationContext) -> dict:
    """MLA's latents (q_lora, kv_lora+rope) and their norms' outputs, which every MLA layer keeps (a DSA one too)."""
    m = spec.mla
    latents = (2 * (m.q_lora_rank or 0)) + 2 * m.kv_lora_rank + m.qk_pos_emb_head_dim
    return {"mla_latents": BF16 * ctx.tokens * latents // ctx.sp_div}


def _mla(spec: ModelSpec, ctx: ActivationContext) -> dict:
    """MLA: latents (_mla_latents), then per-head q, k, v; the ``mla_up_proj`` recompute module recomputes the
    up-projections, keeping only the latents."""
    m, n, sb, t = spec.mla, spec.num_attention_heads, ctx.tokens, ctx.tp
    qk = m.q_head_dim
    items = _mla_latents(spec, ctx)
    core = _attention_core(spec, ctx, n * qk, n * qk, n * m.v_head_dim)
    if "mla_up_proj" in ctx.recompute_modules:
        core.pop("attn_qkv")
    items.update(core)
    items["attn_proj_input"] = BF16 * sb * n * m.v_head_dim // t
    return items


def _linear_mixer(spec: ModelSpec, ctx: ActivationContext) -> dict:
    """Gated delta-net / Mamba-2 (HF Qwen3NextGatedDeltaNet, NemotronHMamba2Mixer): the input projection's
    output, the causal conv's output and the scan's output (input of the gated norm and out_proj), all split
    over TP by heads. Chunked-scan kernels recompute their intra-chunk state, so no s^2 or state-size term."""
    if spec.gdn:
        g = spec.gdn
        width = g.in_proj_dim + g.conv_dim + g.v_dim
    else:
        m = spec.mamba
        width = m.in_proj_dim + m.conv_dim + m.d_inner
    return {"linear_mixer": BF16 * ctx.tokens * width // ctx.tp}


def _ffn(prefix: str, tokens: int, ffn: int, gated: bool, div: int, *, recomputed: bool,
         act_recomputed: bool = False) -> dict:
    """fc1 output (activation input) and activation output (fc2 input) of one MLP."""
    if recomputed:
        return {}
    items = {f"{prefix}fc1_output": BF16 * tokens * ffn * (2 if gated else 1) // div}
    if not act_recomputed:
        items[f"{prefix}act_output"] = BF16 * tokens * ffn // div
    return items


def _moe(spec: ModelSpec, ctx: ActivationContext) -> dict:
    """Routed tokens per rank: each token is copied top-k times; an EP rank receives on average the
    top-k copies of as many tokens as it sent, times ETP (the expert-TP group all-gathers them)."""
    if "moe" in ctx.recompute_modules:
        return {}
    h, e = spec.hidden_size, spec.num_moe_experts
    local = ctx.tokens // ctx.sp_div
    routed = whole(local * spec.moe_router_topk * ctx.etp * ctx.token_imbalance * ctx.stash_factor)
    items = {
        "router_logits": 2 * FP32 * local * e,  # logits and scores in FP32 (router kept in FP32)
        "expert_input": BF16 * routed * h,  # permuted tokens, saved for fc1 weight grads
        # Megatron applies each copy's routing prob inside the expert activation (weighted SwiGLU), so the
        # combine saves no expert output; the probs of the routed copies are saved instead.
        "routing_probs": FP32 * routed,
    }
    items.update(_ffn("expert_", routed, spec.moe_ffn_hidden_size // ctx.etp, spec.gated_linear_unit, 1,
                      recomputed=False, act_recomputed="moe_act" in ctx.recompute_modules))
    if spec.moe_shared_expert_intermediate_size:
        items.update(_ffn("shared_", ctx.tokens, spec.moe_shared_expert_intermediate_size, spec.shared_expert_gated,
                          ctx.tp, recomputed="shared_experts" in ctx.recompute_modules))
    return items


# Items that are inputs of a GEMM: under FP8 Transformer Engine saves them quantized for the weight
# gradient (1 byte/element instead of 2; block scales are <4% and ignored).
GEMM_INPUTS = frozenset({"attn_norm_output", "attn_proj_input", "mlp_norm_output", "mlp_act_output",
                         "expert_input", "expert_act_output", "shared_act_output"})


# Megatron offload_modules name -> the saved item that is that module's input.
OFFLOADED_ITEM = {"attn_norm": "attn_norm_input", "qkv_linear": "attn_norm_output", "core_attn": "attn_qkv",
                  "attn_proj": "attn_proj_input", "mlp_norm": "mlp_norm_input", "expert_fc1": "expert_input",
                  "moe_act": "expert_fc1_output"}


def _saved_items(spec: ModelSpec, kind: LayerKind, ctx: ActivationContext) -> dict[str, int]:
    items = _layer_items(spec, kind, ctx)
    if ctx.fp8_gemm_inputs:
        items = {k: v // 2 if k in GEMM_INPUTS else v for k, v in items.items()}
    return items


def _kept_and_offloaded(spec: ModelSpec, kind: LayerKind, ctx: ActivationContext) -> tuple[dict, dict]:
    """One layer's saved items split into those that stay on the GPU and those fine-grained offloading moves."""
    items = _saved_items(spec, kind, ctx)
    if not ctx.offload_modules:  # the common case, on the planner's hot path
        return items, {}
    gone = {OFFLOADED_ITEM[m] for m in ctx.offload_modules}
    return ({k: v for k, v in items.items() if k not in gone}, {k: v for k, v in items.items() if k in gone})


def layer_activation_items(spec: ModelSpec, kind: LayerKind, ctx: ActivationContext) -> dict[str, int]:
    """Named bytes saved for backward by one layer for one micro-batch on one rank and kept on the GPU
    (fine-grained offloading moves its modules' inputs to host memory: offloaded_bytes)."""
    return _kept_and_offloaded(spec, kind, ctx)[0]


def offloaded_bytes(spec: ModelSpec, kind: LayerKind, ctx: ActivationContext):
    """Bytes of one layer's saved activations that fine-grained offloading moves to the host and back."""
    return sum(_kept_and_offloaded(spec, kind, ctx)[1].values()) if ctx.offload_modules else 0


def offload_staging_bytes(spec: ModelSpec, ctx: ActivationContext):
    """GPU memory offloaded tensors still occupy. Our assumption, not a Megatron figure: two layers of the largest
    kind, the one whose inputs are being copied out in the forward and the one prefetched back for the backward
    (Megatron bounds the copies in flight with fine_grained_offloading_max_inflight_offloads)."""
    if not ctx.offload_modules:
        return 0
    return 2 * reduce(np.maximum, (offloaded_bytes(spec, k, ctx) for k in spec.layer_kinds))


def _layer_items(spec: ModelSpec, kind: LayerKind, ctx: ActivationContext) -> dict[str, int]:
    sbh = ctx.tokens * spec.hidden_size
    norm_out = "layernorm" not in ctx.recompute_modules
    items: dict[str, int] = {}
    if kind.mixer != "none":
        items["attn_norm_input"] = BF16 * sbh // ctx.sp_div
        if norm_out:
            items["attn_norm_output"] = BF16 * sbh // ctx.sp_div
        mixer = {"gqa": _gqa, "mla": _mla, "gdn": _linear_mixer, "mamba": _linear_mixer}[kind.mixer]
        items.update({**_mla_latents(spec, ctx), **dsa_items(spec, kind, ctx)} if is_dsa(spec, kind) else
                     mixer(spec, ctx))
        if ctx.dropout:
            items["attn_dropout_mask"] = sbh // ctx.sp_div
    if kind.mlp != "none":
        items["mlp_norm_input"] = BF16 * sbh // ctx.sp_div
        if norm_out and not (kind.mlp == "moe" and "moe" in ctx.recompute_modules):
            items["mlp_norm_output"] = BF16 * sbh // ctx.sp_div
        if kind.mlp == "dense":
            items.update(_ffn("mlp_", ctx.tokens, spec.ffn_hidden_size, spec.gated_linear_unit, ctx.tp,
                              recomputed="mlp" in ctx.recompute_modules))
        else:
            items.update(_moe(spec, ctx))
        if ctx.dropout:
            items["mlp_dropout_mask"] = sbh // ctx.sp_div
    return items


def full_recompute_layer_bytes(spec: ModelSpec, ctx: ActivationContext) -> int:
    """Full (uniform) recompute keeps only each layer's input (Megatron recompute_granularity='full')."""
    return BF16 * ctx.tokens * spec.hidden_size // ctx.sp_div
