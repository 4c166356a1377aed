"""The Mamba hybrids' reader (Nemotron-H, and Nemotron-3 Nano under it): the layer pattern in Megatron's hybrid
symbols, the Mamba-2 dimensions, and the fields moetune refuses (latent MoE, Nemotron-H multi-token prediction)."""

from moetune.errors import MoetuneError
from moetune.specs.hf_access import HfConfig, short
from moetune.specs.hf_common import MAMBA_FIELDS, gqa_common, moe_fields, topk_scaling
from moetune.specs.mixer_dims import MambaDims
from moetune.specs.model import LayerKind

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
        raise MoetuneError(f"{c.origin}: field 'hybrid_override_pattern' ({short(pattern)}) must be a string of layer "
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


def read_nemotron_h(c: HfConfig) -> dict:
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
        shape = next((f"{k} {short(c.data[k])}" for k in ("mtp_hybrid_override_pattern", "mtp_layers_block_type")
                      if c.data.get(k) is not None), "its default *E")
        raise MoetuneError(f"{c.origin}: num_nextn_predict_layers ({mtp}): Nemotron-H multi-token prediction ({shape}) "
                           "is not modelled; set num_nextn_predict_layers to 0 to plan the model without it")
    mamba = MambaDims(**{field: c.get(key) for field, key in MAMBA_FIELDS.items()},
                      conv_bias=c.get("use_conv_bias", default=True))
    return dict(
        gqa_common(c),
        layers=tuple(LayerKind(mixer=HYBRID_SYMBOLS[ch][0], mlp=HYBRID_SYMBOLS[ch][1]) for ch in pattern),
        mamba=mamba,
        gated_linear_unit=False,
        activation=c.name("mlp_hidden_act", default="relu2"),
        ffn_hidden_size=c.read("ffn_hidden_size", "intermediate_size"),
        **moe_fields(c, "deepseek"),
        moe_shared_expert_intermediate_size=c.get("moe_shared_expert_intermediate_size", default=0),
        moe_router_score_function="sigmoid",
        moe_router_score_correction_bias=True,
        moe_router_topk_scaling_factor=topk_scaling(c),
    )
