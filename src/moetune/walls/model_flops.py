"""Megatron's reported *model* FLOPs: the numerator of its "throughput per GPU (TFLOP/s/GPU)".

``megatron_model_flops`` reproduces
  Megatron-Bridge src/megatron/bridge/training/utils/flop_utils.py::num_floating_point_operations
  (transformer_flops / hybrid_flops, HEAD 067f987, 2026-08-22), which mirrors
  Megatron-LM megatron/training/training.py::num_floating_point_operations (HEAD d98e8a6).
Every GEMM is counted 3x (fwd, dgrad, wgrad) x 2 (multiply-add); recompute replays, router GEMMs,
capacity padding and dropped tokens are not counted. BSHD batches only (every sample seq_length long).
The hardware FLOPs of the time wall are walls/flops.py. See docs/flops.md.
"""

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

from moetune.errors import MoetuneError
from moetune.specs.model import ModelSpec
from moetune.walls.flops import all_layers, attended_keys, causal_context, layer_windows
from moetune.walls.rank_params import model_padded_vocab

Convention = Literal["bridge", "bridge-0.6", "bridge-0.5", "bridge-pre-2026-05", "megatron-lm"]


@dataclass(kw_only=True, slots=True, frozen=True)
class _Rules:
    """What differs between the FLOP counters Megatron has shipped."""

    glu_needs_silu: bool  # GLU factor 3 only for SwiGLU (older Bridge; MLM's --swiglu flag)
    count_swa: bool  # sliding-window layers get the exact causal-window context
    count_attention_gate: bool  # Qwen3-Next's gate doubles the q projection width
    hybrid_glu_needs_silu: bool  # hybrid_flops' swiglu flag: Bridge passes gated_linear_unit, MLM args.swiglu
    # DeepSeek Sparse Attention counted as top-k attention plus the indexer (Bridge 52fc01b9a, PR #5324, 2026-08-05);
    # older Bridge and Megatron-LM main count a DSA layer as dense MLA with no indexer (training.py has no DSA term)
    count_dsa: bool = False
    # the linear-attention pattern laid over the decoder and MTP layers alike, so an MTP layer's mixer is the pattern's
    # at its index (Megatron-LM training.py core_v0.19.0:715-719 over num_layers + mtp_num_layers; Bridge before
    # 7d03e8cad, PR #4834, 2026-07-12, first in v0.6.0); after it, an MTP layer counts as the last decoder layer
    mtp_in_pattern: bool = False


# Bridge: GLU rule and exact SWA from commit baa0259bd (PR #3947, 2026-05-28, first in v0.5.0 = 26.06);
# releases up to 26.04.01 (v0.4.0) had the SiLU-only GLU rule, no SWA term and no gate term
# (gate added in eaddead3f, PR #3029, not in v0.4.0). Megatron-LM HEAD: ffn factor from args.swiglu
# (gpt-oss runs --quick-geglu, so 2), no SWA term, gate counted.
# The releases: v0.6.0 (2026-08-19) has PR #4834 but not the DSA term (52fc01b9a is in no release tag yet); v0.5.x
# (v0.5.0 2026-06-16) has the GLU, SWA and gate terms of PR #3947/#3029 but neither.
_CONVENTIONS: dict[str, _Rules] = {
    "bridge": _Rules(glu_needs_silu=False, count_swa=True, count_attention_gate=True,
                     hybrid_glu_needs_silu=False, count_dsa=True),
    "bridge-0.6": _Rules(glu_needs_silu=False, count_swa=True, count_attention_gate=True,
                         hybrid_glu_needs_silu=False),
    "bridge-0.5": _Rules(glu_needs_silu=False, count_swa=True, count_attention_gate=True,
                         hybrid_glu_needs_silu=False, mtp_in_pattern=True),
    "bridge-pre-2026-05": _Rules(glu_needs_silu=True, count_swa=False, count_attention_gate=False,
                                 hybrid_glu_needs_silu=False, mtp_in_pattern=True),
    "megatron-lm": _Rules(glu_needs_silu=True, count_swa=False, count_attention_gate=True,
                          hybrid_glu_needs_silu=True, mtp_in_pattern=True),
}
# The counter each Megatron Bridge release ships, by its first release (newest first); a release past the table counts
# as main does
BRIDGE_RELEASE_COUNTERS = (((0, 6, 0), "bridge-0.6"), ((0, 5, 0), "bridge-0.5"), ((0, 0, 0), "bridge-pre-2026-05"))
NEWEST_COUNTED_RELEASE = (0, 6, 0)


def bridge_release_convention(version: tuple[int, ...] | None) -> Convention:
    """The FLOP counter a Megatron Bridge release reports TFLOP/s/GPU with, by its number ((0, 4, 2); None for main),
    as the planner reads it (configio/releases.py release_number: walls reads no release names)."""
    if version is None or version > NEWEST_COUNTED_RELEASE:  # main, or a release after the table
        return "bridge"
    return next(c for first, c in BRIDGE_RELEASE_COUNTERS if version >= first)


def _rules(convention: str) -> _Rules:
    if convention not in _CONVENTIONS:
        raise MoetuneError(f"unknown FLOP convention '{convention}': use one of {', '.join(_CONVENTIONS)}")
    return _CONVENTIONS[convention]


def _glu(spec: ModelSpec, needs_silu: bool) -> int:
    """Megatron's ffn_expansion_factor: fc1 is 2*ffn wide for a GLU, so 3 ffn-wide GEMMs, else 2."""
    gated = spec.gated_linear_unit and (spec.activation == "silu" or not needs_silu)
    return 3 if gated else 2


def _gqa_proj(spec: ModelSpec, gate: bool) -> float:
    q, kv = spec.query_projection_size, spec.kv_projection_size
    return spec.hidden_size * (q + 2 * kv + (q if gate else 0)) + q * spec.hidden_size


def _mla_linear(spec: ModelSpec) -> float:
    """Token-linear MLA work as flop_utils counts it: q (lora or plain), kv lora, rope k, o-proj, norms."""
    m, h, n = spec.mla, spec.hidden_size, spec.num_attention_heads
    qk = m.q_head_dim
    q_term = h * n * qk if m.q_lora_rank is None else m.q_lora_rank * (h + n * qk + 1)
    kv_term = m.kv_lora_rank * (h + n * m.kv_up_head_dim + 1) + h * m.qk_pos_emb_head_dim
    return q_term + kv_term + n * m.v_head_dim * h


def _dsa_per_token(spec: ModelSpec, kind, seq: int) -> float:
    """A DSA layer's core attention and indexer, / (3*2) per token, as Bridge flop_utils.py counts them @067f987:
    absorbed MLA (q.k over kv_lora_rank + rope, p.v over kv_lora_rank) over the causal top-k context; an indexer
    layer adds its projections (forward + wgrad with the loss, which detaches their input; forward alone without),
    its dense causal scores (n_idx x (d_idx + 1) a pair; their gradient over the top-k pairs with the sparse loss) and
    the loss's forward-only q.k target."""
    m, d, n = spec.mla, spec.dsa, spec.num_attention_heads
    dense, sparse = attended_keys(seq), attended_keys(seq, d.index_topk)  # top-k keys: a window's count
    qk = m.kv_down_dim
    total = sparse * n * (qk + m.kv_lora_rank)
    if not kind.indexer:
        return total
    h = spec.hidden_size
    proj = (m.q_lora_rank or h) * d.index_n_heads * d.index_head_dim + h * d.index_head_dim + h * d.index_n_heads
    unit = d.index_n_heads * (d.index_head_dim + 1)
    total += (4 if d.indexer_loss else 2) * proj / 6 + 2 * dense * unit / 6
    if d.indexer_loss:
        context = sparse if d.sparse_loss else dense
        total += 4 * context * unit / 6 + 2 * context * n * qk / 6
    return total


def _gdn_linear(spec: ModelSpec) -> float:
    """GDN per token: in_proj (q,k,v,z,beta,alpha), conv1d, 4 state-sized matmuls, out_proj."""
    g, h = spec.gdn, spec.hidden_size
    return (h * g.in_proj_dim + g.conv_kernel * g.conv_dim + g.num_value_heads * g.value_head_dim ** 2 * 4
            + h * g.v_dim)


def _counted_layers(spec: ModelSpec, r: _Rules) -> tuple:
    """The decoder and MTP layers as the counter has them: under `mtp_in_pattern` an MTP layer of a linear-attention
    stack takes the pattern's mixer at its index, the pattern Megatron builds from linear_attention_freq (full
    attention where (i + 1) % freq == 0; the decoder's gated attention layers give freq)."""
    layers = all_layers(spec)
    gqa = [i for i, k in enumerate(spec.layers) if k.mixer == "gqa"]
    if not (r.mtp_in_pattern and spec.mtp_num_layers and gqa and any(k.mixer == "gdn" for k in spec.layers)):
        return layers
    freq = gqa[0] + 1
    if gqa != list(range(freq - 1, spec.num_layers, freq)):
        return layers  # a list pattern: Megatron takes it as given, one entry a layer with MTP's among them
    n = spec.num_layers
    return spec.layers + tuple(replace(k, mixer="gqa" if (n + j + 1) % freq == 0 else "gdn")
                               for j, k in enumerate(layers[n:]))


def _transformer_per_token(spec: ModelSpec, seq: int, vocab: int, r: _Rules) -> float:
    """transformer_flops(): everything / (3*2*tokens)."""
    h, f = spec.hidden_size, _glu(spec, r.glu_needs_silu)
    q = spec.query_projection_size
    total = 0.0
    for kind, window in zip(_counted_layers(spec, r), layer_windows(spec)):
        if kind.mlp == "dense":
            total += h * spec.ffn_hidden_size * f
        elif kind.mlp == "moe":  # shared experts use the routed experts' factor, as Megatron does
            total += h * f * spec.moe_ffn_per_token
        if kind.mixer == "gqa":
            ctx = causal_context(seq, window if r.count_swa else None)
            total += _gqa_proj(spec, spec.attention_output_gate and r.count_attention_gate) + 2 * q * ctx
        elif kind.mixer == "mla" and spec.dsa is not None and r.count_dsa:
            total += _mla_linear(spec) + _dsa_per_token(spec, kind, seq)
        elif kind.mixer == "mla":
            m = spec.mla
            total += _mla_linear(spec) + spec.num_attention_heads * (m.q_head_dim + m.v_head_dim) * seq / 2
        elif kind.mixer == "gdn":
            total += _gdn_linear(spec)
    total += spec.mtp_num_layers * (3 * h + 2 * h * h)  # MTP enorm/hnorm/final norm + eh_proj
    return total + h * vocab * (spec.mtp_num_layers + 1)


def _hybrid_per_token(spec: ModelSpec, seq: int, vocab: int, r: _Rules) -> float:
    """hybrid_flops(): forward FLOPs per token; the caller multiplies by 3 (fwd + bwd) and by tokens."""
    h, n, g = spec.hidden_size, spec.num_attention_heads, spec.num_query_groups
    q = spec.query_projection_size
    scale = 1.5 if _glu(spec, r.hybrid_glu_needs_silu) == 3 else 1.0
    total = 0.0
    for kind, window in zip(all_layers(spec), layer_windows(spec)):
        if kind.mixer == "gqa":
            ctx = causal_context(seq, window if r.count_swa else None)
            total += 4 * q * (h + h * g / n) + 2 * q * 2 * ctx
        elif kind.mixer == "mamba":  # Megatron assumes d_inner = 2*h, not heads*head_dim
            m, d_in = spec.mamba, 2 * h
            total += 2 * h * (2 * d_in + 2 * m.n_groups * m.state_size + m.num_heads)
            total += 7 * d_in * m.state_size + 2 * d_in * h
        elif kind.mixer == "gdn":
            total += 2 * _gdn_linear(spec)
        if kind.mlp == "dense":
            total += 4 * spec.ffn_hidden_size * scale * h
        elif kind.mlp == "moe":
            total += 4 * h * scale * spec.moe_ffn_per_token
    return total + 2 * h * vocab * (1 + spec.mtp_num_layers)


def is_hybrid(spec: ModelSpec) -> bool:
    """Megatron's hybrid stack (one mixer *or* one MLP per layer, Nemotron-H pattern) vs a GPT stack."""
    return any(k.mixer in ("mamba", "none") or k.mlp == "none" for k in spec.layers)


# Pure in its arguments (the spec, compared whole; the conventions are constants): a plan's re-split asks it again for
# every layout it moves layers on, with the same model, sequence, batch and TP
@lru_cache(maxsize=1024)
def megatron_model_flops(spec: ModelSpec, seq_length: int, global_batch_size: int, *, tp: int = 1,
                         convention: Convention = "bridge") -> float:
    """Model FLOPs of one training iteration exactly as Megatron reports them (fwd + bwd, no recompute).

    Divide by (iteration seconds * world_size * 1e12) to get Megatron's TFLOP/s/GPU."""
    r = _rules(convention)
    vocab = model_padded_vocab(spec, tp)
    tokens = global_batch_size * seq_length
    if is_hybrid(spec):
        return 3 * tokens * _hybrid_per_token(spec, seq_length, vocab, r)
    return 3 * 2 * tokens * _transformer_per_token(spec, seq_length, vocab, r)


def tflops_per_gpu(flops: float, step_seconds: float, gpus: int) -> float:
    """Megatron's "throughput per GPU (TFLOP/s/GPU)": a step's model FLOPs over its seconds and GPUs
    (training.py training_log)."""
    return flops / step_seconds / gpus / 1e12
