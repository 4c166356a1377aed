"""One reader per Hugging Face model family, registered by ``model_type`` in ``READERS``.

Each reader names the HF fields it uses (the field-name map is in shared/data/models/INDEX.md) and returns
ModelSpec keyword arguments; a missing field is a one-line ``MoetuneError`` that names it.
"""

from typing import Callable

from moetune.errors import MoetuneError
from moetune.specs.hf_access import HfConfig
from moetune.specs.hf_attention import attention_biases, refuse_qwen_windows, windows
from moetune.specs.model import GdnDims, LayerKind, MambaDims, MlaDims

# Where each family keeps its routed-expert count, top-k and expert FFN width (shared/data/models/INDEX.md,
# "Field-name map"); the first key present wins.
MOE_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "deepseek": (("n_routed_experts",), ("num_experts_per_tok",), ("moe_intermediate_size",)),
    "qwen": (("num_experts",), ("num_experts_per_tok",), ("moe_intermediate_size",)),
    "mixtral": (("num_local_experts", "num_experts"), ("num_experts_per_tok", "experts_per_token"),
                ("intermediate_size",)),
    "olmoe": (("num_experts",), ("num_experts_per_tok",), ("intermediate_size",)),
    "llama4": (("num_local_experts",), ("num_experts_per_tok",), ("intermediate_size",)),
    "dbrx": (("ffn_config.moe_num_experts",), ("ffn_config.moe_top_k",), ("ffn_config.ffn_hidden_size",)),
    "ernie": (("moe_num_experts",), ("moe_k",), ("moe_intermediate_size",)),
}


# Linear-mixer dimensions: moetune field -> HF config key (Qwen3-Next gated delta-net; Nemotron-H Mamba-2).
GDN_FIELDS = {"num_key_heads": "linear_num_key_heads", "num_value_heads": "linear_num_value_heads",
              "key_head_dim": "linear_key_head_dim", "value_head_dim": "linear_value_head_dim",
              "conv_kernel": "linear_conv_kernel_dim"}
MAMBA_FIELDS = {"num_heads": "mamba_num_heads", "head_dim": "mamba_head_dim", "state_size": "ssm_state_size",
                "n_groups": "n_groups", "conv_kernel": "conv_kernel"}


def _moe(c: "HfConfig", family: str) -> dict:
    experts, topk, width = MOE_FIELDS[family]
    return dict(num_moe_experts=c.read("num_moe_experts", *experts), moe_router_topk=c.read("moe_router_topk", *topk),
                moe_ffn_hidden_size=c.read("moe_ffn_hidden_size", *width))


def _layers(mlps: list[str], mixers: list[str] | str = "gqa") -> tuple[LayerKind, ...]:
    if isinstance(mixers, str):
        mixers = [mixers] * len(mlps)
    return tuple(LayerKind(mixer=x, mlp=m) for x, m in zip(mixers, mlps, strict=True))


def _gqa_common(c: HfConfig) -> dict:
    return dict(
        hidden_size=c.get("hidden_size"),
        vocab_size=c.get("vocab_size"),
        num_attention_heads=c.get("num_attention_heads"),
        num_query_groups=c.read("num_query_groups", "num_key_value_heads", "num_attention_heads"),
        kv_channels=c.head_dim(),
        untie_embeddings_and_output_weights=not c.get("tie_word_embeddings", default=False),
    )


def _pre_softmax(c: HfConfig) -> bool:
    """A softmax router whose HF model keeps the softmax over every expert as the top-k weights (norm_topk_prob
    false: DeepSeek-V2, Qwen1.5/Qwen2-MoE, OLMoE) is Megatron's moe_router_pre_softmax; norm_topk_prob true
    renormalizes the top k, which is Megatron's default softmax over the top-k logits. Read where the config states
    it (every built-in config does)."""
    return c.get("norm_topk_prob", default=None) is False


def _topk_scaling(c: HfConfig) -> float | None:
    """HF routed_scaling_factor multiplies the routed experts' top-k weights (DeepSeek-V2 16, DeepSeek-V3 and GLM-4.5
    2.5, Kimi-K2 2.827): Megatron's moe_router_topk_scaling_factor, whose None is HF's 1.0."""
    value = c.get("routed_scaling_factor", default=None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e6:
        raise MoetuneError(f"{c.origin}: routed_scaling_factor ({value!r:.40}) must be a positive number")
    return None if value == 1 else float(value)


def _read_deepseek(c: HfConfig) -> dict:
    """DeepSeek-V2/V3/R1, Kimi-K2, Moonlight: MLA, first-k-dense, shared experts, MTP."""
    n = c.count("num_hidden_layers", least=1)
    k_dense = c.count("first_k_dense_replace", default=0)
    freq = c.count("moe_layer_freq", default=1, least=1)
    mlps = ["moe" if i >= k_dense and i % freq == 0 else "dense" for i in range(n)]
    mla = MlaDims(
        q_lora_rank=c.get("q_lora_rank", default=None),
        kv_lora_rank=c.get("kv_lora_rank"),
        qk_head_dim=c.read("qk_head_dim", "qk_nope_head_dim"),
        qk_pos_emb_head_dim=c.read("qk_pos_emb_head_dim", "qk_rope_head_dim"),
        v_head_dim=c.get("v_head_dim"),
    )
    mtp = c.count("num_nextn_predict_layers", default=0)
    # HF DeepseekV2/V3 MoE gates: scoring_func softmax (V2) or sigmoid (V3); topk_method greedy /
    # group_limited_greedy (V2) or noaux_tc (V3, the e_score_correction_bias)
    sigmoid = c.choice("scoring_func", ("softmax", "sigmoid"), "softmax") == "sigmoid"
    method = c.choice("topk_method", ("greedy", "group_limited_greedy", "noaux_tc"), "greedy")
    return dict(
        _gqa_common(c),
        num_query_groups=c.read("num_query_groups", "num_attention_heads"),  # MLA: a K,V per query head
        kv_channels=mla.qk_head_dim + mla.qk_pos_emb_head_dim,
        layers=_layers(mlps, "mla"),
        mla=mla,
        ffn_hidden_size=c.read("ffn_hidden_size", "intermediate_size"),
        **_moe(c, "deepseek"),
        moe_shared_expert_intermediate_size=c.get("n_shared_experts", default=0) * c.get("moe_intermediate_size"),
        moe_shared_experts=c.get("n_shared_experts", default=0),
        moe_router_score_function="sigmoid" if sigmoid else "softmax",
        moe_router_pre_softmax=not sigmoid and _pre_softmax(c),
        moe_router_score_correction_bias=method == "noaux_tc",
        moe_router_topk_scaling_factor=_topk_scaling(c),
        moe_router_num_groups=c.read("moe_router_num_groups", "n_group", default=1),
        moe_router_group_topk=c.read("moe_router_group_topk", "topk_group", default=1),
        mtp_num_layers=mtp,
        mtp_layer_kind=LayerKind(mixer="mla", mlp=mlps[-1]) if mtp else None,
    )


def _read_glm4_moe(c: HfConfig) -> dict:
    """GLM-4.5 / 4.5-Air: GQA with qkv bias and optional per-head qk norm, first-k-dense, MTP."""
    n = c.count("num_hidden_layers", least=1)
    k_dense = c.count("first_k_dense_replace", default=0)
    mlps = ["moe" if i >= k_dense else "dense" for i in range(n)]
    mtp = c.count("num_nextn_predict_layers", default=0)
    return dict(
        _gqa_common(c),
        layers=_layers(mlps),
        **attention_biases(c),
        qk_layernorm="head" if c.get("use_qk_norm", default=False) else "none",
        ffn_hidden_size=c.read("ffn_hidden_size", "intermediate_size"),
        **_moe(c, "deepseek"),
        moe_shared_expert_intermediate_size=c.get("n_shared_experts", default=0) * c.get("moe_intermediate_size"),
        moe_shared_experts=c.get("n_shared_experts", default=0),
        moe_router_score_function="sigmoid",
        moe_router_score_correction_bias=True,
        moe_router_topk_scaling_factor=_topk_scaling(c),
        mtp_num_layers=mtp,
        mtp_layer_kind=LayerKind(mixer="gqa", mlp="moe") if mtp else None,
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
        _gqa_common(c),
        layers=_layers(_qwen_moe_mlps(c)),
        # HF Qwen2MoeAttention biases q, k and v by config.qkv_bias (Qwen2MoeConfig default true, transformers
        # @008e574 configuration_qwen2_moe.py); Qwen3MoeAttention's switch is attention_bias (REFUSED_BIASES)
        add_qkv_bias=False if qwen3 else c.get("qkv_bias", default=True),
        qk_layernorm="head" if qwen3 else "none",
        ffn_hidden_size=c.read("ffn_hidden_size", "intermediate_size"),
        **_moe(c, "qwen"),
        moe_shared_expert_intermediate_size=shared,
        moe_shared_expert_gate=shared > 0,
        moe_router_pre_softmax=_pre_softmax(c),
    )


def _read_qwen3_next(c: HfConfig) -> dict:
    """Qwen3-Next: every `full_attention_interval`-th layer is gated attention, the rest gated delta-net."""
    n = c.count("num_hidden_layers", least=1)
    interval = c.count("full_attention_interval", least=1)
    mixers = ["gqa" if (i + 1) % interval == 0 else "gdn" for i in range(n)]
    gdn = GdnDims(**{field: c.get(key) for field, key in GDN_FIELDS.items()})
    spec = _read_qwen_moe(c)
    return dict(
        spec, layers=_layers(_qwen_moe_mlps(c), mixers), gdn=gdn, attention_output_gate=True,
        add_qkv_bias=False, qk_layernorm="head",
        # its config.json names no MTP depth, but the checkpoint ships one MTP layer (transformers skips mtp.*), and
        # Megatron Bridge trains it: the recipe sets mtp_num_layers 1 (recipes/qwen/h100/qwen3_next.py) and the bridge
        # maps mtp.layers.0 as gated full attention and MoE (qwen3_next_bridge.py). Trained only where asked
        # (--mtp-layers, a config's mtp_num_layers).
        mtp_layer_kind=LayerKind(mixer="gqa", mlp="moe"),
    )


def _read_mixtral(c: HfConfig) -> dict:
    """Mixtral, Phi-3.5-MoE, MiniMax-M2, gpt-oss, Grok-1 (hpcai port): every layer MoE, no shared expert."""
    mt = c.get("model_type")
    n = c.count("num_hidden_layers", least=1)
    mtp = c.count("num_mtp_modules", default=0) if c.get("use_mtp", default=False) else 0
    return dict(
        _gqa_common(c),
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
        **_moe(c, "mixtral"),
        moe_router_score_function="sigmoid" if mt == "minimax_m2" else "softmax",
        moe_router_score_correction_bias=mt == "minimax_m2",
        mtp_num_layers=mtp,
        mtp_layer_kind=LayerKind(mixer="gqa", mlp="moe") if mtp else None,
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
        _gqa_common(c),
        layers=_layers(["moe"] * n),
        qk_layernorm="full",
        tp1_only=OLMOE_TP1,
        ffn_hidden_size=c.read("ffn_hidden_size", "intermediate_size"),
        **_moe(c, "olmoe"),
        moe_router_pre_softmax=_pre_softmax(c),
    )


def _read_llama4(c: HfConfig) -> dict:
    """Llama 4 (text_config): MoE every `interleave_moe_layer_step` layers, one shared expert."""
    t = c.section("text_config")
    n = t.count("num_hidden_layers", least=1)
    step = t.count("interleave_moe_layer_step", default=1, least=1)
    mlps = ["moe" if (i + 1) % step == 0 else "dense" for i in range(n)]
    return dict(
        _gqa_common(t),
        layers=_layers(mlps),
        ffn_hidden_size=t.read("ffn_hidden_size", "intermediate_size_mlp", "intermediate_size"),
        **_moe(t, "llama4"),
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
        layers=_layers(["moe"] * n),
        normalization="LayerNorm",
        ffn_hidden_size=c.read("ffn_hidden_size", "ffn_config.ffn_hidden_size"),
        **_moe(c, "dbrx"),
    )


def _read_ernie(c: HfConfig) -> dict:
    """ERNIE-4.5 MoE: MoE on layers start..end every `moe_layer_interval`, optional shared experts."""
    n = c.count("num_hidden_layers", least=1)
    start = c.count("moe_layer_start_index", default=0)
    end = c.count("moe_layer_end_index", default=n - 1)
    step = c.count("moe_layer_interval", default=1, least=1)
    mlps = ["moe" if start <= i <= end and (i - start) % step == 0 else "dense" for i in range(n)]
    moe_ffn = c.get("moe_intermediate_size")
    mtp = c.count("num_nextn_predict_layers", default=0)
    return dict(
        _gqa_common(c),
        layers=_layers(mlps),
        ffn_hidden_size=c.read("ffn_hidden_size", "intermediate_size"),
        **_moe(c, "ernie"),
        moe_shared_expert_intermediate_size=c.get("moe_num_shared_experts", default=0) * moe_ffn,
        moe_shared_experts=c.get("moe_num_shared_experts", default=0),
        mtp_num_layers=mtp,
        mtp_layer_kind=LayerKind(mixer="gqa", mlp="moe") if mtp else None,
    )


# Megatron's hybrid layer symbols (Megatron-Core ssm/mamba_hybrid_layer_allocation.py Symbols) -> the layer's mixer
# and MLP; a config gives them as hybrid_override_pattern ("MEM*E...")
HYBRID_SYMBOLS = {"M": ("mamba", "none"), "*": ("gqa", "none"), "E": ("none", "moe"), "-": ("none", "dense")}
# transformers 5 writes the pattern as layers_block_type, one name per layer: the inverse of NemotronHConfig's
# _pattern_to_list (configuration_nemotron_h.py), with the names it still reads from older Hub configs
# (configuration_utils.py _LEGACY_LAYER_TYPE_REMAP: mamba -> linear_attention, attention -> full_attention)
BLOCK_TYPE_SYMBOLS = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "moe": "E",
                      "mlp": "-"}


def _hybrid_pattern(c: HfConfig) -> tuple[str, str]:
    """The layer pattern in Megatron's symbols, and the key it came from."""
    pattern = c.get("hybrid_override_pattern", default=None)
    if pattern is not None and not isinstance(pattern, str):
        raise MoetuneError(f"{c.origin}: field 'hybrid_override_pattern' ({pattern!r:.40}) must be a string of layer "
                           "symbols (M Mamba, * attention, E MoE, - MLP); fix the config.json")
    if bad := sorted(set(pattern or "") - set(HYBRID_SYMBOLS)):
        raise MoetuneError(f"{c.origin}: hybrid_override_pattern has unknown layer symbols {bad}; expected M * E -")
    blocks = c.text_list("layers_block_type")
    if bad := sorted(set(blocks) - set(BLOCK_TYPE_SYMBOLS)):
        raise MoetuneError(f"{c.origin}: layers_block_type has unknown layer type(s) {bad}; expected "
                           f"{', '.join(BLOCK_TYPE_SYMBOLS)}")
    listed = "".join(BLOCK_TYPE_SYMBOLS[b] for b in blocks)
    if listed and pattern and listed != pattern:  # transformers reads layers_block_type and drops the pattern
        raise MoetuneError(f"{c.origin}: layers_block_type ({listed}) and hybrid_override_pattern ({pattern}) "
                           "disagree; keep one")
    if not (listed or pattern):
        raise MoetuneError(f"{c.origin}: missing field 'hybrid_override_pattern' (or transformers 5's "
                           "layers_block_type), the layer pattern (model_type 'nemotron_h'); add it to the config.json")
    return (listed, "layers_block_type") if listed else (pattern, "hybrid_override_pattern")


def _read_nemotron_h(c: HfConfig) -> dict:
    """Nemotron-H / Nemotron-3: one layer per pattern symbol (M Mamba-2, * attention, E MoE, - MLP)."""
    pattern, key = _hybrid_pattern(c)
    n = c.count("num_hidden_layers", default=len(pattern), least=1)
    if n != len(pattern):
        raise MoetuneError(f"{c.origin}: {key} has {len(pattern)} layers but num_hidden_layers is {n}; one per layer")
    if "E" not in pattern:
        raise MoetuneError(f"{c.origin}: not a MoE model ({key} has no MoE layer, E); moetune plans MoE models")
    # Latent MoE (Nemotron-3 Super/Ultra): a hidden->latent and a latent->hidden projection around routed experts
    # that work in the latent width (Megatron-Core 0.16.1 transformer/moe/moe_layer.py:170-193, experts.py:544; HF
    # NemotronHMoE fc1/fc2_latent_proj). 0 or null: none, as Megatron's `if config.moe_latent_size` reads it.
    if latent := c.get("moe_latent_size", default=None):
        raise MoetuneError(f"{c.origin}: moe_latent_size ({latent}): latent MoE is not modelled (routed experts in "
                           "a latent width between two projections); moetune cannot plan this model yet")
    # Multi-token prediction after a hybrid stack: Megatron-Core 0.16.1's MambaModel builds no MTP block (HF ignores
    # the mtp.* weights, modeling_nemotron_h.py _keys_to_ignore_on_load_unexpected)
    if mtp := c.count("num_nextn_predict_layers", default=0):
        shape = next((f"{k} {c.data[k]!r:.40}" for k in ("mtp_hybrid_override_pattern", "mtp_layers_block_type")
                      if c.data.get(k) is not None), "its default *E")
        raise MoetuneError(f"{c.origin}: num_nextn_predict_layers ({mtp}): Nemotron-H multi-token prediction ({shape}) "
                           "is not modelled; set num_nextn_predict_layers to 0 to plan the model without it")
    mamba = MambaDims(**{field: c.get(key) for field, key in MAMBA_FIELDS.items()},
                      conv_bias=c.get("use_conv_bias", default=True))
    return dict(
        _gqa_common(c),
        layers=tuple(LayerKind(mixer=HYBRID_SYMBOLS[ch][0], mlp=HYBRID_SYMBOLS[ch][1]) for ch in pattern),
        mamba=mamba,
        gated_linear_unit=False,
        activation=c.name("mlp_hidden_act", default="relu2"),
        ffn_hidden_size=c.read("ffn_hidden_size", "intermediate_size"),
        **_moe(c, "deepseek"),
        moe_shared_expert_intermediate_size=c.get("moe_shared_expert_intermediate_size", default=0),
        moe_router_score_function="sigmoid",
        moe_router_score_correction_bias=True,
        moe_router_topk_scaling_factor=_topk_scaling(c),
    )


READERS: dict[str, Callable[[HfConfig], dict]] = {
    "deepseek_v2": _read_deepseek,
    "deepseek_v3": _read_deepseek,
    "kimi_k2": _read_deepseek,
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
    "nemotron_h": _read_nemotron_h,
}


# Ports that ship no model_type (hpcai-tech's Grok-1 uses remote code keyed by architecture).
ARCHITECTURE_ALIASES = {"Grok1ModelForCausalLM": "grok-1"}
