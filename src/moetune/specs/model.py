"""The model spec: every architectural number that parameter, FLOP and memory formulas need.

Field names follow Megatron-Core's ``TransformerConfig`` where one exists
(megatron/core/transformer/transformer_config.py), so a reader can hold this file next to it.
A model is a stack of layers; each layer has a token *mixer* (attention of some kind, or a
Mamba/gated-delta-net block) and an *mlp* (dense, MoE or none, as in hybrid Mamba models). A spec checks its own
numbers when built (specs/spec_checks.py); its mixers' dimensions, with the widths Megatron-Core derives from them,
are specs/mixer_dims.py's.
"""

from dataclasses import dataclass, field, fields, replace
from typing import Literal

from moetune.specs.mixer_dims import DsaDims, GdnDims, MambaDims, MlaDims
from moetune.specs.spec_checks import check_spec

Mixer = Literal["gqa", "mla", "gdn", "mamba"]
Mlp = Literal["dense", "moe", "none"]
# the mixers that are softmax attention, keeping keys and values per token (Mamba-2 and gated delta-net keep a
# fixed-size state); MLA's sparse DSA layers and sliding windows are MLA and GQA layers here
SOFTMAX_MIXERS = frozenset({"gqa", "mla"})


def count_attention_mixers(mixers) -> tuple[int, int]:
    """(softmax-attention token mixers, all token mixers) among decoder layers' MIXERS ("none": a hybrid's MLP-only
    layer, which has none): the one count of ModelSpec.attention_mixers and of a config's (rules/derive_layers.py
    attention_mixers), so a transformer is (layers, layers) whichever it is read from."""
    mixers = [m for m in mixers if m != "none"]
    return sum(m in SOFTMAX_MIXERS for m in mixers), len(mixers)


@dataclass(kw_only=True, slots=True, frozen=True)
class LayerKind:
    """One decoder layer: its token mixer and its MLP ("none" for a mixer-only hybrid layer)."""

    mixer: Mixer | Literal["none"]
    mlp: Mlp
    window: int | None = None  # sliding-window attention (gpt-oss's alternate layers); None: full causal
    # a DeepSeek Sparse Attention layer that runs its own lightning indexer (and holds its weights); a DSA layer that
    # reuses an earlier layer's top-k (GLM-5.2's index sharing) has none (Megatron-LM dsa.py DSAttention.__init__)
    indexer: bool = False


@dataclass(kw_only=True, slots=True, frozen=True)
class ModelSpec:
    """A Mixture-of-Experts decoder, as read from a Hugging Face config.json."""

    name: str  # short name, e.g. "deepseek-v3"
    model_type: str  # the HF model_type it was read from
    hidden_size: int
    vocab_size: int  # unpadded; Megatron pads it (see walls/params.py)
    layers: tuple[LayerKind, ...]
    # --- attention (GQA/MHA) ---
    num_attention_heads: int
    num_query_groups: int  # key/value heads
    kv_channels: int  # per-head dim
    attention_output_gate: bool = False  # Qwen3-Next: q projection doubled for a sigmoid gate
    add_qkv_bias: bool = False
    add_proj_bias: bool = False  # bias on the attention output projection
    qk_layernorm: Literal["none", "head", "full"] = "none"  # per-head norm (Megatron) or full width (OLMoE)
    softmax_sinks: bool = False  # gpt-oss learnable per-head softmax offset
    tp1_only: str = ""  # why its Megatron build trains at TP 1 only ('': any TP); layout/validate.py refuses more
    # Llama 4's attention_chunk_size: Megatron Bridge attends within chunks of it on every layer once the sequence is
    # longer (models/llama/llama4_utils.py Llama4SelfAttention: chunkify); None: full causal attention
    attention_chunk: int | None = None
    # Llama 4's other attention and routing semantics, under Megatron-Core's names (transformer_config.py): a weightless
    # L2 norm of q and k (HF use_qk_norm), every no_rope_freq-th layer without RoPE (HF no_rope_layers), and the router
    # probability applied to the expert's input instead of its output (HF Llama4TextMoe)
    qk_l2_norm: bool = False
    no_rope_freq: int | None = None
    moe_apply_probs_on_input: bool = False
    mla: MlaDims | None = None
    dsa: DsaDims | None = None  # DeepSeek Sparse Attention on the MLA layers (LayerKind.indexer: which run an indexer)
    gdn: GdnDims | None = None
    mamba: MambaDims | None = None
    # --- MLPs ---
    ffn_hidden_size: int  # dense-layer width
    gated_linear_unit: bool = True  # SwiGLU-style fc1 of width 2*ffn
    activation: str = "silu"
    add_mlp_bias: bool = False  # dense MLP and expert biases (gpt-oss)
    num_moe_experts: int
    moe_router_topk: int
    moe_ffn_hidden_size: int
    moe_shared_expert_intermediate_size: int = 0  # all shared experts together
    # how many shared experts the config counts (DeepSeek's n_shared_experts, ERNIE's moe_num_shared_experts); None:
    # one, if there is a shared width (Qwen2-MoE's, Llama-4's, Nemotron-H's single wide shared expert)
    moe_shared_experts: int | None = None
    moe_shared_expert_gate: bool = False  # Qwen2-MoE / Qwen3-Next sigmoid gate (1 x h)
    moe_shared_expert_gated_linear_unit: bool | None = None  # None: same as routed experts
    moe_router_bias: bool = False  # gpt-oss router has a bias
    moe_router_score_correction_bias: bool = False  # DeepSeek-V3 e_score_correction_bias (a buffer in Megatron)
    moe_router_score_function: Literal["softmax", "sigmoid"] = "softmax"
    # top-k weights from the softmax over every expert, not renormalized (HF norm_topk_prob false; Megatron's
    # moe_router_pre_softmax): the routing function, not a shape
    moe_router_pre_softmax: bool = False
    moe_router_topk_scaling_factor: float | None = None  # HF routed_scaling_factor on the top-k weights (None: 1)
    # Group-limited routing (DeepSeek-V2/V3 n_group / topk_group; Megatron moe_router_num_groups / group_topk):
    # experts fall into this many contiguous groups and a token picks its experts inside its best few groups.
    moe_router_num_groups: int = 1
    moe_router_group_topk: int = 1
    # --- norms, embeddings, heads ---
    normalization: Literal["RMSNorm", "LayerNorm"] = "RMSNorm"
    norm_has_bias: bool = False  # LayerNorm with bias (Phi-3.5-MoE)
    extra_norms_per_layer: int = 0  # Grok-1: post-attention and post-MoE norms
    untie_embeddings_and_output_weights: bool = True
    output_layer_bias: bool = False  # Phi-3.5-MoE lm_head bias
    mtp_num_layers: int = 0
    mtp_layer_kind: LayerKind | None = None
    # MTP modules the checkpoint ships (num_nextn_predict_layers, MiniMax's num_mtp_modules, Qwen3-Next's one its
    # config.json leaves out; none for a config that is not a checkpoint's): Megatron-Core builds mtp_num_layers modules
    # whatever it holds, and Bridge's import leaves those past it at random initialisation (model_bridge.py
    # build_conversion_tasks: "No mapping found"; rule model.mtp_beyond_checkpoint)
    mtp_checkpoint_layers: int = 0
    # Megatron pads the vocabulary to a multiple of this x TP (make_vocab_size_divisible_by): a launch setting. A
    # config.json's model takes its Megatron Bridge bridge's (hf_config.bridge_vocab_divisor); a launch config's own
    # value, or Megatron-LM's default 128 under its arguments, replaces it (from_config.trained_model)
    vocab_divisor: int = 128
    # The FLOP counter of the launcher whose log the TFLOP/s/GPU compares with (walls/model_flops.py conventions):
    # Bridge unless the launch is Megatron-LM arguments (from_config.trained_model)
    flops_convention: str = "bridge"
    source: str = ""  # where the config came from
    notes: tuple[str, ...] = field(default=())
    # the hash, computed once: a spec keys the per-model caches (walls/rank_params.py) on every estimate, and hashing
    # its dozens of layer kinds each time was a fifth of a time-only estimate
    _hash: int = field(init=False, repr=False, compare=False, default=0)
    # the layer counts and kinds, counted once: the rule facts, walls and estimates ask them thousands of times a plan,
    # and each was a pass over the layers
    _counts: tuple = field(init=False, repr=False, compare=False, default=())

    def __hash__(self) -> int:
        return self._hash

    def __post_init__(self) -> None:
        # equal layer kinds as one object each: the walls count and look up layers by kind, and a dict finds the same
        # object without comparing field by field
        kinds: dict[LayerKind, LayerKind] = {}
        object.__setattr__(self, "layers", tuple(kinds.setdefault(k, k) for k in self.layers))
        if self.mtp_layer_kind is not None:
            object.__setattr__(self, "mtp_layer_kind", kinds.get(self.mtp_layer_kind, self.mtp_layer_kind))
        object.__setattr__(self, "_hash", hash(tuple(getattr(self, f.name) for f in fields(self) if f.compare)))
        object.__setattr__(self, "_counts", (
            sum(layer.mlp == "moe" for layer in self.layers), sum(layer.mlp == "dense" for layer in self.layers),
            frozenset(self.layers) | ({self.mtp_layer_kind} if self.mtp_num_layers else frozenset()),
            count_attention_mixers(layer.mixer for layer in self.layers)))
        check_spec(self)

    def with_mtp(self, n: int) -> "ModelSpec":
        """The model trained with `n` MTP layers (Megatron's mtp_num_layers) instead of its config.json's count."""
        if n < 0:
            raise ValueError(f"the MTP depth ({n}) must be 0 or more")
        if n > self.num_layers:  # Megatron builds each as a whole transformer layer; trained models use 1-3
            raise ValueError(f"the MTP depth ({n}) exceeds the model's {self.num_layers} decoder layers; models train "
                             "with 1-3")
        if n == self.mtp_num_layers:
            return self
        if not n or self.mtp_layer_kind is not None:
            # the MTP layer's kind stays: the config.json has it, and a config that drops it must say so (to_config)
            return replace(self, mtp_num_layers=n)
        if any(k.mixer == "mamba" for k in self.layers):
            raise ValueError(f"{self.name} is a hybrid Mamba stack, and Megatron-Core's MambaModel builds no MTP "
                             "block (core_v0.16.0); train it with 0")
        # A model whose checkpoint ships no MTP module trains its MTP layers from scratch, each built as the decoder's
        # last layer (Megatron-LM gpt_builders.py: "Use spec of the last layer in decoder block as spec of the
        # transformer layer in MTP"; Megatron Bridge's providers take the same, gpt_provider.py mtp_block_spec)
        # (a DSA MTP layer is its block's layer 1, which always runs its own indexer: Megatron-LM dsa.py
        # is_dsa_skip_topk_layer, multi_token_prediction.py layer numbering @ core_v0.19.0)
        last = self.layers[-1]
        return replace(self, mtp_num_layers=n, mtp_layer_kind=replace(last, indexer=True) if self.dsa else last)

    # ---- derived facts -------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def layer_kinds(self) -> frozenset[LayerKind]:
        """Every kind of layer the model runs: its decoder layers' and its MTP layers'."""
        return self._counts[2]

    @property
    def num_moe_layers(self) -> int:
        return self._counts[0]

    @property
    def num_dense_layers(self) -> int:
        return self._counts[1]

    @property
    def attention_mixers(self) -> tuple[int, int]:
        """(softmax-attention token mixers, all token mixers) of the decoder layers: equal for a transformer (sliding
        windows included); Nemotron-3 Nano's pattern has 6 attention layers among 29 mixers, the rest Mamba-2, and
        Qwen3-Next 12 among 48, the rest gated delta-net (rule longctx.cp_sizing weighs its shard by them)."""
        return self._counts[3]  # counted once (__post_init__): the planner's rule table reads it for every knob set

    @property
    def attention(self) -> str:
        """A one-word description of the attention: gqa, mha, mla, hybrid-linear (GDN), hybrid-mamba."""
        mixers = {layer.mixer for layer in self.layers}
        if "mamba" in mixers:
            return "hybrid-mamba"
        if "gdn" in mixers:
            return "hybrid-linear"
        if "mla" in mixers:
            return "mla"
        return "mha" if self.num_query_groups == self.num_attention_heads else "gqa"

    @property
    def kv_groups(self) -> int:
        """K,V head groups the attention kernel sees: MLA up-projects a K,V per query head."""
        return self.num_attention_heads if self.mla else self.num_query_groups

    @property
    def query_projection_size(self) -> int:
        """All query heads, heads x kv_channels (linear_proj's input): Megatron-Core transformer/attention.py
        Attention.query_projection_size."""
        return self.kv_channels * self.num_attention_heads

    @property
    def kv_projection_size(self) -> int:
        """K (or V) of all query groups, groups x kv_channels: attention.py Attention.kv_projection_size."""
        return self.kv_channels * self.num_query_groups

    @property
    def qkv_widths(self) -> tuple[int, int]:
        """(query, key + value) widths of a GQA layer's fused QKV projection output: the query doubled where a sigmoid
        output gate rides with it (Qwen3-Next's attention_output_gate), K and V one head each per group."""
        return self.query_projection_size * (2 if self.attention_output_gate else 1), 2 * self.kv_projection_size

    @property
    def moe_ffn_per_token(self) -> int:
        """The expert FFN width one token of a MoE layer runs through, its top-k routed experts' and the shared
        experts': Megatron-LM training/training.py num_floating_point_operations, moe_ffn_hidden_size x
        num_experts_routed_to + shared_expert_ffn_hidden_size."""
        return self.moe_ffn_hidden_size * self.moe_router_topk + self.moe_shared_expert_intermediate_size

    @property
    def num_shared_experts(self) -> int:
        if self.moe_shared_experts is not None:
            return self.moe_shared_experts
        return int(self.moe_shared_expert_intermediate_size > 0)

    @property
    def shared_expert_gated(self) -> bool:
        if self.moe_shared_expert_gated_linear_unit is None:
            return self.gated_linear_unit
        return self.moe_shared_expert_gated_linear_unit
