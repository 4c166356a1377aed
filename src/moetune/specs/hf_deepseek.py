"""DeepSeek-family readers: MLA, first-k-dense, shared experts, MTP (DeepSeek-V2/V3/R1, Kimi-K2, Moonlight), and the
same stack with DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2, GLM-5: deepseek_v32, glm_moe_dsa)."""

from dataclasses import replace

from moetune.errors import MoetuneError
from moetune.specs import hf_common as common
from moetune.specs.hf_access import HfConfig
from moetune.specs.mixer_dims import DsaDims, MlaDims
from moetune.specs.model import LayerKind


def read_deepseek(c: HfConfig) -> dict:
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
    glm = c.get("model_type") == "glm_moe_dsa"
    # GlmMoeDsaConfig's qk_head_dim is the whole query/key head (nope + rope: 256 for GLM-5); transformers may rewrite
    # qk_rope_head_dim, so Megatron Bridge's glm5_bridge.py takes qk_head_dim - qk_nope_head_dim for the rope part
    whole = c.get("qk_head_dim", default=None) if glm else None
    if whole is not None:
        if not isinstance(whole, int) or whole <= mla.qk_head_dim:
            raise MoetuneError(f"{c.origin}: qk_head_dim ({whole}) must be a whole number above qk_nope_head_dim "
                               f"({mla.qk_head_dim}): GLM's qk_head_dim is nope + rope; fix the config.json")
        mla = replace(mla, qk_pos_emb_head_dim=whole - mla.qk_head_dim)
    mtp = c.count("num_nextn_predict_layers", default=0)
    # HF DeepseekV2/V3 MoE gates: scoring_func softmax (V2) or sigmoid (V3); topk_method greedy /
    # group_limited_greedy (V2) or noaux_tc (V3, the e_score_correction_bias). GLM-5's bridge sets a sigmoid router
    # with the expert bias whatever the config says (glm5_bridge.py provider_bridge)
    sigmoid = glm or c.choice("scoring_func", ("softmax", "sigmoid"), "softmax") == "sigmoid"
    method = "noaux_tc" if glm else c.choice("topk_method", ("greedy", "group_limited_greedy", "noaux_tc"), "greedy")
    return dict(
        common.gqa_common(c),
        num_query_groups=c.read("num_query_groups", "num_attention_heads"),  # MLA: a K,V per query head
        kv_channels=mla.q_head_dim,
        layers=common.layer_kinds(mlps, "mla"),
        mla=mla,
        ffn_hidden_size=c.read("ffn_hidden_size", "intermediate_size"),
        **common.moe_fields(c, "deepseek"),
        **common.shared_experts(c, "n_shared_experts"),
        moe_router_score_function="sigmoid" if sigmoid else "softmax",
        moe_router_pre_softmax=not sigmoid and common.pre_softmax(c),
        moe_router_score_correction_bias=method == "noaux_tc",
        moe_router_topk_scaling_factor=common.topk_scaling(c),
        moe_router_num_groups=c.read("moe_router_num_groups", "n_group", default=1),
        moe_router_group_topk=c.read("moe_router_group_topk", "topk_group", default=1),
        **common.mtp_fields(mtp, LayerKind(mixer="mla", mlp=mlps[-1])),
    )


def indexer_layers(n: int, freq: int, offset: int) -> tuple[bool, ...]:
    """Which of n layers run their own indexer: Megatron-LM dsa.py is_dsa_skip_topk_layer @ core_v0.19.0 (layers
    numbered from 1; the first max(offset, 1) all compute, then one in every freq)."""
    first = max(offset, 1)
    return tuple(max(layer - first, 0) % freq == 0 for layer in range(1, n + 1))


def read_deepseek_dsa(c: HfConfig) -> dict:
    """DeepSeek-V3.2 and GLM-5 (5.1, 5.2): the DeepSeek stack with DeepSeek Sparse Attention. Megatron Bridge's
    glm5_bridge.py maps index_n_heads / index_head_dim / index_topk to dsa_indexer_*, and index_topk_freq /
    index_skip_topk_offset (1 and 0 where absent) to the index sharing Megatron-Core builds: a layer that shares
    holds no indexer (dsa.py DSAttention.__init__). Each MTP layer is a layer 1 of its own, so it has one."""
    fields = read_deepseek(c)
    dsa = DsaDims(index_n_heads=c.get("index_n_heads"), index_head_dim=c.get("index_head_dim"),
                  index_topk=c.get("index_topk"),
                  index_topk_freq=c.count("index_topk_freq", default=1, least=1),
                  index_skip_topk_offset=c.count("index_skip_topk_offset", default=0))
    kinds = fields["layers"]
    own = indexer_layers(len(kinds), dsa.index_topk_freq, dsa.index_skip_topk_offset)
    _agree(c, "indexer_types", own, ("full", "shared"), "index_topk_freq and index_skip_topk_offset")
    _agree(c, "mlp_layer_types", tuple(k.mlp == "dense" for k in kinds), ("dense", "sparse"), "first_k_dense_replace")
    fields.update(dsa=dsa, layers=tuple(replace(k, indexer=i) for k, i in zip(kinds, own, strict=True)))
    if fields["mtp_layer_kind"] is not None:
        fields["mtp_layer_kind"] = replace(fields["mtp_layer_kind"], indexer=True)
    return fields


def _agree(c: HfConfig, key: str, built: tuple[bool, ...], names: tuple[str, str], rule: str) -> None:
    """A per-layer list the config spells out must be what Megatron builds from `rule` (Bridge reads only that)."""
    listed = c.text_list(key)
    if not listed:
        return
    if bad := sorted(set(listed) - set(names)):
        raise MoetuneError(f"{c.origin}: {key} has unknown value(s) {bad}; expected {' or '.join(names)}")
    want = [names[0] if b else names[1] for b in built]
    if listed != want:
        at = next((i for i, (a, b) in enumerate(zip(listed, want)) if a != b), min(len(listed), len(want)))
        raise MoetuneError(f"{c.origin}: {key} disagrees with {rule} at layer {at} (or in length): Megatron builds "
                           f"the layers from {rule} alone; fix {key} or {rule} to match")
