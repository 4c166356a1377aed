"""The token mixers' own dimensions (MLA, DeepSeek Sparse Attention, gated delta-net, Mamba-2), each with the widths
Megatron-Core builds the mixer's projections at, under Megatron-Core's names where it has one, so the parameter, FLOP,
activation and communication formulas (walls/) read one definition of each (specs/model.py holds the spec they hang
off).
"""

from dataclasses import dataclass


@dataclass(kw_only=True, slots=True, frozen=True)
class MlaDims:
    """Multi-head latent attention (DeepSeek-V2/V3); Megatron's MLATransformerConfig names."""

    q_lora_rank: int | None  # None: a plain q projection (DeepSeek-V2-Lite, Moonlight? no: see configs)
    kv_lora_rank: int
    qk_head_dim: int  # the "nope" part of each query/key head
    qk_pos_emb_head_dim: int  # the rotary part, shared by all heads for keys
    v_head_dim: int

    # the widths MLASelfAttention builds its projections at (megatron/core/transformer/multi_latent_attention.py)
    @property
    def q_head_dim(self) -> int:
        """One query (and key) head, its nope and rotary parts: MLASelfAttention.q_head_dim."""
        return self.qk_head_dim + self.qk_pos_emb_head_dim

    @property
    def kv_down_dim(self) -> int:
        """linear_kv_down_proj's output, the compressed KV latent and the rotary key all heads share (DSA's latent
        key)."""
        return self.kv_lora_rank + self.qk_pos_emb_head_dim

    @property
    def kv_up_head_dim(self) -> int:
        """linear_kv_up_proj's output per head: the key's nope part and the value."""
        return self.qk_head_dim + self.v_head_dim


@dataclass(kw_only=True, slots=True, frozen=True)
class DsaDims:
    """DeepSeek Sparse Attention on top of MLA (DeepSeek-V3.2, GLM-5): the lightning indexer's heads and head dim and
    the keys each query attends to; Megatron-Core's dsa_indexer_* names (transformer_config.py @ core_v0.19.0)."""

    index_n_heads: int
    index_head_dim: int
    index_topk: int
    index_topk_freq: int = 1  # GLM-5.2: one indexer per this many layers, the others reuse its top-k
    index_skip_topk_offset: int = 0  # the first layers that all run an indexer
    # the indexer's KL loss and its top-k-only form: training settings, at what Megatron Bridge's GLM-5 provider sets
    # (glm5_bridge.py dsa_indexer_loss_coeff 0.001, dsa_indexer_use_sparse_loss True); Bridge's FLOP count reads them
    indexer_loss: bool = True
    sparse_loss: bool = True


@dataclass(kw_only=True, slots=True, frozen=True)
class GdnDims:
    """Gated delta-net linear attention (Qwen3-Next), HF Qwen3NextGatedDeltaNet names."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int

    # the widths GatedDeltaNet builds its projections at, under its names (megatron/core/ssm/gated_delta_net.py)
    @property
    def qk_dim(self) -> int:
        """All key heads (the query's too): GatedDeltaNet.qk_dim."""
        return self.key_head_dim * self.num_key_heads

    @property
    def v_dim(self) -> int:
        """All value heads, out_proj's input: GatedDeltaNet.v_dim."""
        return self.value_head_dim * self.num_value_heads

    @property
    def in_proj_dim(self) -> int:
        """in_proj's output, q, k, v, the gate z, beta and alpha: GatedDeltaNet.in_proj_dim."""
        return 2 * self.qk_dim + 2 * self.v_dim + 2 * self.num_value_heads

    @property
    def conv_dim(self) -> int:
        """The channels conv1d runs over, q, k and v: GatedDeltaNet.conv_dim."""
        return 2 * self.qk_dim + self.v_dim


@dataclass(kw_only=True, slots=True, frozen=True)
class MambaDims:
    """Mamba-2 mixer (Nemotron-H family), HF NemotronHMamba2Mixer names."""

    num_heads: int
    head_dim: int
    state_size: int
    n_groups: int
    conv_kernel: int
    conv_bias: bool

    # the widths MambaMixer builds its projections at (megatron/core/ssm/mamba_mixer.py)
    @property
    def d_inner(self) -> int:
        """The inner width, heads x head_dim, out_proj's input: MambaMixer.d_inner."""
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """The channels conv1d runs over, x, B and C: MambaMixer's conv_dim (whole, not a TP rank's)."""
        return self.d_inner + 2 * self.n_groups * self.state_size

    @property
    def in_proj_dim(self) -> int:
        """in_proj's output, z, x, B, C and dt: MambaMixer's in_proj output size."""
        return 2 * self.d_inner + 2 * self.n_groups * self.state_size + self.num_heads
