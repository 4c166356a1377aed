"""What every Hugging Face family reader shares (hf_readers.py, hf_hybrid.py): where each family keeps its MoE
fields and linear-mixer dimensions, the layer list, the attention fields of a GQA model and the router's softmax and
scaling."""

from moetune.errors import MoetuneError
from moetune.specs.hf_access import HfConfig, short
from moetune.specs.model import LayerKind

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


def moe_fields(c: "HfConfig", family: str) -> dict:
    experts, topk, width = MOE_FIELDS[family]
    return dict(num_moe_experts=c.read("num_moe_experts", *experts), moe_router_topk=c.read("moe_router_topk", *topk),
                moe_ffn_hidden_size=c.read("moe_ffn_hidden_size", *width))


def shared_experts(c: HfConfig, count_key: str) -> dict:
    """Shared experts counted by `count_key` (n_shared_experts, ERNIE's moe_num_shared_experts), each as wide as a
    routed expert (moe_intermediate_size): Megatron builds them as one MLP of their summed width (Megatron-Bridge
    src/megatron/bridge/models/deepseek/deepseek_v2_bridge.py: moe_shared_expert_intermediate_size =
    moe_intermediate_size x n_shared_experts)."""
    n = c.get(count_key, default=0)
    return dict(moe_shared_experts=n, moe_shared_expert_intermediate_size=n * c.get("moe_intermediate_size"))


def layer_kinds(mlps: list[str], mixers: list[str] | str = "gqa") -> tuple[LayerKind, ...]:
    if isinstance(mixers, str):
        mixers = [mixers] * len(mlps)
    return tuple(LayerKind(mixer=x, mlp=m) for x, m in zip(mixers, mlps, strict=True))


def gqa_common(c: HfConfig) -> dict:
    return dict(
        hidden_size=c.get("hidden_size"),
        vocab_size=c.get("vocab_size"),
        num_attention_heads=c.get("num_attention_heads"),
        num_query_groups=c.read("num_query_groups", "num_key_value_heads", "num_attention_heads"),
        kv_channels=c.head_dim(),
        untie_embeddings_and_output_weights=not c.get("tie_word_embeddings", default=False),
    )


def pre_softmax(c: HfConfig) -> bool:
    """A softmax router whose HF model keeps the softmax over every expert as the top-k weights (norm_topk_prob
    false: DeepSeek-V2, Qwen1.5/Qwen2-MoE, OLMoE) is Megatron's moe_router_pre_softmax; norm_topk_prob true
    renormalizes the top k, which is Megatron's default softmax over the top-k logits. Read where the config states
    it (every built-in config does)."""
    return c.get("norm_topk_prob", default=None) is False


def topk_scaling(c: HfConfig) -> float | None:
    """HF routed_scaling_factor multiplies the routed experts' top-k weights (DeepSeek-V2 16, DeepSeek-V3 and GLM-4.5
    2.5, Kimi-K2 2.827): Megatron's moe_router_topk_scaling_factor, whose None is HF's 1.0."""
    value = c.get("routed_scaling_factor", default=None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e6:
        raise MoetuneError(f"{c.origin}: routed_scaling_factor ({short(value)}) must be a positive number")
    return None if value == 1 else float(value)


def mtp_fields(mtp: int, kind: LayerKind, shipped: bool = True) -> dict:
    """The MTP depth a config.json names, each layer shaped as `kind`, and the modules its checkpoint ships (all of
    them where `shipped`; ModelSpec.mtp_checkpoint_layers)."""
    return {"mtp_num_layers": mtp, "mtp_checkpoint_layers": mtp if shipped else 0,
            "mtp_layer_kind": kind if mtp else None}
