"""One reader per Hugging Face model family, registered by ``model_type`` in ``READERS``.

Each reader names the HF fields it uses (the field-name map is in shared/data/models/INDEX.md) and returns
ModelSpec keyword arguments; a missing field is a one-line ``MoetuneError`` that names it.
"""

from typing import Callable

from moetune.errors import MoetuneError
from moetune.specs.hf_access import HfConfig
from moetune.specs.hf_attention import attention_biases, refuse_qwen_windows, windows
from moetune.specs.hf_common import (
    GDN_FIELDS,
    gqa_common,
    layer_kinds,
    moe_fields,
    mtp_fields,
    pre_softmax,
    shared_experts,
    topk_scaling,
)
from moetune.specs.hf_deepseek import read_deepseek, read_deepseek_dsa
from moetune.specs.hf_hybrid import read_nemotron_h
from moetune.specs.mixer_dims import GdnDims
from moetune.specs.model import LayerKind


def _read_glm4_moe(c: HfConfig) -> dict:
    """GLM-4.5 / 4.5-Air: GQA with qkv bias and optional per-head qk norm, first-k-dense, MTP."""
    n = c.count("num_hidden_layers", least=1)
    k_dense = c.count("first_k_dense_replace", default=0)
    mlps = ["moe" if i >= k_dense else "dense" for i in range(n)]
    mtp = c.count("num_nextn_predict_layers", default=0)
    return dict(
        gqa_common(c),
        layers=layer_kinds(mlps),
        **attention_biases(c),
        qk_layernorm="head" if c.get("use_qk_norm", default=False) else "none",
        ffn_hidden_size=c.read("ffn_hidden_size", "intermediate_size"),
        **moe_fields(c, "deepseek"),
        **shared_experts(c, "n_shared_experts"),
        moe_router_score_function="sigmoid",
        moe_router_score_correction_bias=True,
        moe_router_topk_scaling_factor=topk_scaling(c),
        **mtp_fields(mtp, LayerKind(mixer="gqa", mlp="moe")),
    )


def _qwen_moe_mlps(c: HfConfig) -> list[str]:
    n = c.count("num_hidden_layers", least=1)
    step = c.count("decoder_sparse_step", default=1, least=1)
    dense_only = c.layer_indices("mlp_only_layers", n)
    return ["moe" if i not in dense_only and (i + 1) % step == 0 else "dense" for i in range(n)]


# The Qwen families whose HF MoE block builds a gated shared expert of shared_expert_intermediate_size
# (Qwen2MoeSparseMoeBlock.shared_expert + shared_expert_gate; Qwen3NextSparseMoeBlock likewise). Qwen3MoeSparseMoeBlock
# has only the routed experts and the router, so a qwen3_moe config's shared_expert_intermediate_size builds nothing
# (nor does Bridge's Qwen3-MoE bridge or the oracle's Qwen3MoeForCausalLM mapping).
QWEN_SHARED_EXPERT = frozenset({"qwen2_moe", "qwen3_next"})


def _read_qwen_moe(c: HfConfig) -> dict:
    """Qwen1.5-MoE / Qwen2-MoE (qkv bias, gated shared expert) and Qwen3-MoE (per-head qk norm)."""
    qwen3 = c.get("model_type") == "qwen3_moe"
    refuse_qwen_windows(c)
    shared = 0
    if c.get("model_type") in QWEN_SHARED_EXPERT:
        shared = c.read("moe_shared_expert_intermediate_size", "shared_expert_intermediate_size", default=0)
    return dict(
        gqa_common(c),
        layers=layer_kinds(_qwen_moe_mlps(c)),
        # HF Qwen2MoeAttention biases q, k and v by config.qkv_bias (Qwen2MoeConfig default true, transformers
        # @008e574 configuration_qwen2_moe.py); Qwen3MoeAttention's switch is attention_bias (REFUSED_BIASES)
        add_qkv_bias=False if qwen3 else c.get("qkv_bias", default=True),
        qk_layernorm="head" if qwen3 else "none",
        ffn_hidden_size=c.read("ffn_hidden_size", "intermediate_size"),
        **moe_fields(c, "qwen"),
        moe_shared_expert_intermediate_size=shared,
        moe_shared_expert_gate=shared > 0,
        moe_router_pre_softmax=pre_softmax(c),
    )


def _read_qwen3_next(c: HfConfig) -> dict:
    """Qwen3-Next: every `full_attention_interval`-th layer is gated attention, the rest gated delta-net."""
    n = c.count("num_hidden_layers", least=1)
    interval = c.count("full_attention_interval", least=1)
    mixers = ["gqa" if (i + 1) % interval == 0 else "gdn" for i in range(n)]
    gdn = GdnDims(**{field: c.get(key) for field, key in GDN_FIELDS.items()})
    spec = _read_qwen_moe(c)
    return dict(
        spec, layers=layer_kinds(_qwen_moe_mlps(c), mixers), gdn=gdn, attention_output_gate=True,
        add_qkv_bias=False, qk_layernorm="head",
        # its config.json names no MTP depth, but the checkpoint ships one MTP layer (transformers skips mtp.*), and
        # Megatron Bridge trains it: the recipe sets mtp_num_layers 1 (recipes/qwen/h100/qwen3_next.py) and the bridge
        # maps mtp.layers.0 as gated full attention and MoE (qwen3_next_bridge.py). Trained only where asked
        # (--mtp-layers, a config's mtp_num_layers).
        mtp_layer_kind=LayerKind(mixer="gqa", mlp="moe"), mtp_checkpoint_layers=1,
    )


def _read_mixtral(c: HfConfig) -> dict:
    """Mixtral, Phi-3.5-MoE, MiniMax-M2, gpt-oss, Grok-1 (hpcai port): every layer MoE, no shared expert."""
    mt = c.get("model_type")
    n = c.count("num_hidden_layers", least=1)
    mtp = c.count("num_mtp_modules", default=0) if c.get("use_mtp", default=False) else 0
    return dict(
        gqa_common(c),
        layers=tuple(LayerKind(mixer="gqa", mlp="moe", window=w) for w in windows(c, n)),
        **attention_biases(c),
        add_mlp_bias=mt == "gpt_oss",
        # gpt-oss's clamped SwiGLU is a quick-GELU GLU in Megatron (Bridge gpt_oss_bridge.py activation_func)
        activation="quick_gelu" if mt == "gpt_oss" else c.name("hidden_act", default="silu"),
        softmax_sinks=mt == "gpt_oss",
        moe_router_bias=mt == "gpt_oss",
        qk_layernorm="full" if mt == "minimax_m2" else "none",
        normalization="LayerNorm" if mt == "phimoe" else "RMSNorm",
        norm_has_bias=mt == "phimoe",
        output_layer_bias=c.get("lm_head_bias", default=False),
        extra_norms_per_layer=2 if mt == "grok-1" else 0,
        ffn_hidden_size=c.read("ffn_hidden_size", "intermediate_size"),
        **moe_fields(c, "mixtral"),
        moe_router_score_function="sigmoid" if mt == "minimax_m2" else "softmax",
        moe_router_score_correction_bias=mt == "minimax_m2",
        # MiniMax's num_mtp_modules: Megatron Bridge's provider reads no MTP depth from it (CONFIG_MAPPING takes
        # num_nextn_predict_layers and mtp_num_hidden_layers only, models/conversion/model_bridge.py) nor maps its
        # modules (minimax_m2_bridge.py "MTP modules are not mapped"), and Megatron-LM builds none unless asked: none
        # trained by default, and --mtp-layers N trains N from scratch, each the checkpoint's MTP layer shape
        mtp_num_layers=0, mtp_layer_kind=LayerKind(mixer="gqa", mlp="moe") if mtp else None,
    )


# Megatron Bridge builds OLMoE's q/k norms over every head on each TP rank and applies them to the rank's shard
# (models/olmoe/olmoe_provider.py OLMoESelfAttention: hidden_size = head dim x num_attention_heads), which fails at
# TP > 1; its recipes run tensor_model_parallel_size=1 (recipes/olmoe/h100/olmoe_7b.py). MiniMax-M2's full-width
# norms are TP-aware (minimax_m2_provider.py FullDimQNorm) and split over TP.
OLMOE_TP1 = ("its q/k norms span every head, and Megatron Bridge builds them whole on each TP rank, where they "
             "cannot apply to the rank's share of the heads (olmoe_provider.py OLMoESelfAttention)")


def _read_olmoe(c: HfConfig) -> dict:
    """OLMoE: full-width q/k norms (q_norm over all heads), no shared experts."""
    n = c.count("num_hidden_layers", least=1)
    return dict(
        gqa_common(c),
        layers=layer_kinds(["moe"] * n),
        qk_layernorm="full",
        tp1_only=OLMOE_TP1,
        ffn_hidden_size=c.read("ffn_hidden_size", "intermediate_size"),
        **moe_fields(c, "olmoe"),
        moe_router_pre_softmax=pre_softmax(c),
    )


def _read_llama4(c: HfConfig) -> dict:
    """Llama 4 (text_config): MoE every `interleave_moe_layer_step` layers, one shared expert."""
    t = c.section("text_config")
    n = t.count("num_hidden_layers", least=1)
    step = t.count("interleave_moe_layer_step", default=1, least=1)
    # Llama4TextConfig's moe_layers where given, else every step-th from step - 1 (configuration_llama4.py :175-185
    # @5.24.0); HF builds a MoE layer where layer_idx in config.moe_layers (modeling_llama4.py :400)
    moe = t.layer_indices("moe_layers", n) if t.get("moe_layers", default=None) is not None else \
        set(range(step - 1, n, step))
    mlps = ["moe" if i in moe else "dense" for i in range(n)]
    return dict(
        gqa_common(t),
        layers=layer_kinds(mlps),
        ffn_hidden_size=t.read("ffn_hidden_size", "intermediate_size_mlp", "intermediate_size"),
        **moe_fields(t, "llama4"),
        moe_shared_expert_intermediate_size=t.read("moe_shared_expert_intermediate_size", "intermediate_size"),
        moe_router_score_function="sigmoid",
        attention_chunk=None if t.get("attention_chunk_size", default=None) is None
        else t.count("attention_chunk_size", least=1),
        qk_l2_norm=t.get("use_qk_norm", default=True),  # Llama4TextConfig's default
        no_rope_freq=_no_rope_freq(t, n),
        moe_apply_probs_on_input=True,
    )


def _no_rope_freq(t: HfConfig, n: int) -> int:
    """Megatron's no_rope_freq of a Llama 4 config: HF's no_rope_layers (1: the layer uses RoPE) must leave every
    k-th layer without it, else the interval (Llama4TextConfig no_rope_layer_interval, default 4)."""
    interval = t.count("no_rope_layer_interval", default=4, least=1)
    layers = t.get("no_rope_layers", default=None)
    if layers in (None, []):
        return interval
    if not isinstance(layers, list) or len(layers) != n or any(x not in (0, 1) or isinstance(x, bool) for x in layers):
        raise MoetuneError(f"{t.origin}: field 'no_rope_layers' must list 0 or 1 for each of the {n} layers")
    nope = [i for i, x in enumerate(layers) if x == 0]
    k = nope[0] + 1 if nope else 0
    if not k or nope != list(range(k - 1, n, k)):
        raise MoetuneError(f"{t.origin}: no_rope_layers leaves RoPE out of layers {nope[:6]}...: Megatron's "
                           "no_rope_freq takes every k-th layer only; moetune cannot plan another pattern")
    return k


def _read_dbrx(c: HfConfig) -> dict:
    """DBRX: fused Wqkv, bias-free LayerNorm, 16 experts top-4 (fields under attn_config / ffn_config)."""
    n = c.count("n_layers", least=1)
    heads = c.read("num_attention_heads", "n_heads")
    return dict(
        hidden_size=c.read("hidden_size", "d_model"),
        vocab_size=c.get("vocab_size"),
        num_attention_heads=heads,
        num_query_groups=c.read("num_query_groups", "attn_config.kv_n_heads"),
        kv_channels=c.get("d_model") // heads,
        untie_embeddings_and_output_weights=not c.get("tie_word_embeddings", default=False),
        layers=layer_kinds(["moe"] * n),
        normalization="LayerNorm",
        ffn_hidden_size=c.read("ffn_hidden_size", "ffn_config.ffn_hidden_size"),
        **moe_fields(c, "dbrx"),
    )


def _read_ernie(c: HfConfig) -> dict:
    """ERNIE-4.5 MoE: MoE on layers start..end every `moe_layer_interval`, optional shared experts."""
    n = c.count("num_hidden_layers", least=1)
    start = c.count("moe_layer_start_index", default=0)
    # -1: the last layer (Ernie4_5_MoeConfig.__post_init__, configuration_ernie4_5_moe.py :119-121 @5.24.0)
    end = n - 1 if c.get("moe_layer_end_index", default=-1) == -1 else c.count("moe_layer_end_index")
    step = c.count("moe_layer_interval", default=1, least=1)
    # HF Ernie4_5_MoeDecoderLayer (modeling_ernie4_5_moe.py :397-404 @5.24.0): MoE where (i + 1) % interval == 0 and
    # start <= i <= end (the interval counts from layer 0, not from start: interval 3 from 0 is layers 2, 5, 8, ...)
    mlps = ["moe" if start <= i <= end and (i + 1) % step == 0 else "dense" for i in range(n)]
    mtp = c.count("num_nextn_predict_layers", default=0)
    return dict(
        gqa_common(c),
        layers=layer_kinds(mlps),
        ffn_hidden_size=c.read("ffn_hidden_size", "intermediate_size"),
        **moe_fields(c, "ernie"),
        # HF's router takes the top-k of softmax scores plus moe_statics.e_score_correction_bias (aux-free balancing);
        # Megatron-Core's expert bias takes only a sigmoid or sqrtsoftplus score (transformer_config.py), so Bridge's
        # ernie_45_bridge.py builds it as sigmoid + moe_router_enable_expert_bias, over which the plan's config goes
        moe_router_score_function="sigmoid",
        moe_router_score_correction_bias=True,
        **shared_experts(c, "moe_num_shared_experts"),
        # not shipped: the HF checkpoint has no MTP weights (Bridge ernie_45_bridge.py), so trained MTP layers start
        # from scratch
        **mtp_fields(mtp, LayerKind(mixer="gqa", mlp="moe"), shipped=False),
    )


READERS: dict[str, Callable[[HfConfig], dict]] = {
    "deepseek_v2": read_deepseek,
    "deepseek_v3": read_deepseek,
    "deepseek_v32": read_deepseek_dsa,
    "glm_moe_dsa": read_deepseek_dsa,
    "kimi_k2": read_deepseek,
    "glm4_moe": _read_glm4_moe,
    "qwen2_moe": _read_qwen_moe,
    "qwen3_moe": _read_qwen_moe,
    "qwen3_next": _read_qwen3_next,
    "mixtral": _read_mixtral,
    "phimoe": _read_mixtral,
    "minimax_m2": _read_mixtral,
    "gpt_oss": _read_mixtral,
    "grok-1": _read_mixtral,
    "olmoe": _read_olmoe,
    "llama4": _read_llama4,
    "llama4_text": _read_llama4,
    "dbrx": _read_dbrx,
    "ernie4_5_moe": _read_ernie,
    "ernie_moe": _read_ernie,
    "nemotron_h": read_nemotron_h,
}


# Ports that ship no model_type (hpcai-tech's Grok-1 uses remote code keyed by architecture).
ARCHITECTURE_ALIASES = {"Grok1ModelForCausalLM": "grok-1"}
