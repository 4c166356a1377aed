"""The checks a ModelSpec makes of itself when built (ModelSpec.__post_init__), and SpecError, what a failed one raises:
whole, positive sizes, heads that divide into their groups, a router's top-k and groups that fit its experts, and no
more parameters than MOST_PARAMS."""

from dataclasses import fields
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from moetune.specs.model import ModelSpec


class SpecError(ValueError):
    """A failed ModelSpec check. Its text writes each field it names as {field}: str() spells them as ModelSpec does
    (Megatron's TransformerConfig names, as a launch config has them), `render` as the config.json a reader took them
    from (hf_config.spec_from_hf: num_key_value_heads, not num_query_groups)."""

    def __init__(self, model: str, text: str):
        self.model, self.text = model, text
        super().__init__(f"{model}: {self.render()}")

    def render(self, keys: Mapping[str, str] | None = None) -> str:
        return self.text.format_map(_Keys(keys or {}))


class _Keys(dict):
    def __missing__(self, field: str) -> str:  # a field the reader took from a key of its own name
        return field


def _literal(value) -> str:
    """A value shown inside a SpecError text (its braces are not field names)."""
    return repr(value).replace("{", "{{").replace("}", "}}")


# A thousand times the largest model trained (~1T parameters): sizes past it are no model anyone could run, and
# their parameter counts would overflow the 64-bit integers the planner's numpy layouts hold (walls/rank_params.py,
# bytes and all)
MOST_PARAMS = 10**15


def check_spec(spec: "ModelSpec") -> None:
    """Raise SpecError naming the first field of `spec` that no model can have."""
    for f in fields(spec):  # sizes are whole numbers (a config.json's 2048.5 or "2048" is an error, not a size)
        value = getattr(spec, f.name)
        if f.type is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise SpecError(spec.name, f"{{{f.name}}} ({_literal(value)}) must be a whole number")
    _check_positive(spec, ("hidden_size", "vocab_size", "num_attention_heads", "num_query_groups", "vocab_divisor"))
    if not spec.layers:
        raise SpecError(spec.name, "the model has no layers (num_hidden_layers must be at least 1)")
    if spec.num_attention_heads % spec.num_query_groups:
        raise SpecError(spec.name, f"{{num_attention_heads}} ({spec.num_attention_heads}) must be a multiple of "
                                   f"{{num_query_groups}} ({spec.num_query_groups})")
    if spec.num_moe_experts and not spec.num_moe_layers:
        raise SpecError(spec.name, f"{spec.num_moe_experts} experts but no MoE layer among the {spec.num_layers} "
                                   "(the family's MoE-layer fields make them all dense: first_k_dense_replace, "
                                   "mlp_only_layers, decoder_sparse_step, moe_layers, moe_layer_start_index ...)")
    if spec.num_moe_layers:
        _check_positive(spec, ("moe_ffn_hidden_size",))
    if spec.mla is not None:
        _check_positive(spec.mla, ("kv_lora_rank", "qk_head_dim", "v_head_dim"), spec.name)
        _check_positive(spec.mla, ("q_lora_rank",) if spec.mla.q_lora_rank is not None else (), spec.name)
    if spec.dsa is not None:  # Megatron-Core builds DSA inside MLA only (experimental_attention_variant_module_specs)
        if spec.mla is None:
            raise SpecError(spec.name, "DeepSeek Sparse Attention needs MLA ({kv_lora_rank})")
        _check_positive(spec.dsa, ("index_n_heads", "index_head_dim", "index_topk", "index_topk_freq"), spec.name)
        _check_mtp_indexers(spec)
    if spec.num_moe_layers and not (0 < spec.moe_router_topk <= spec.num_moe_experts):
        raise SpecError(spec.name, f"{{moe_router_topk}} ({spec.moe_router_topk}) must be in "
                                   f"1..{{num_moe_experts}} ({spec.num_moe_experts})")

    groups, top = spec.moe_router_num_groups, spec.moe_router_group_topk
    if groups > 1 and not (spec.num_moe_experts % groups == 0 and 0 < top <= groups):
        raise SpecError(spec.name, f"{{moe_router_num_groups}} ({groups}) must divide {{num_moe_experts}} "
                                   f"({spec.num_moe_experts}) and {{moe_router_group_topk}} ({top}) must be in "
                                   f"1..{groups}")
    if (ceiling := _params_ceiling(spec)) > MOST_PARAMS:
        raise SpecError(spec.name, f"its sizes allow up to {ceiling:.1e} parameters, past {MOST_PARAMS:.0e} (a "
                                   "thousand times the largest model trained); check {hidden_size}, "
                                   "{ffn_hidden_size}, {moe_ffn_hidden_size}, {num_moe_experts} and the layer "
                                   "count")


def _check_mtp_indexers(spec: "ModelSpec") -> None:
    """Megatron-Core numbers MTP layers 1, 2, ... (multi_token_prediction.py @ core_v0.19.0), and under index
    sharing MTP layer max(offset, 1) + 1 is a skip layer with no indexer (dsa.py is_dsa_skip_topk_layer), as
    Bridge's flop_utils.py count_indexer_layers(mtp_num_layers) counts it @067f987. ModelSpec shapes every MTP layer
    as one kind (mtp_layer_kind, with its own indexer), so a deeper MTP stack would be counted with one too many."""
    d = spec.dsa
    first = max(d.index_skip_topk_offset, 1)
    if d.index_topk_freq > 1 and spec.mtp_num_layers > first:
        raise SpecError(spec.name, f"{spec.mtp_num_layers} MTP layers: under DSA index sharing "
                                   f"({{index_topk_freq}} {d.index_topk_freq}, {{index_skip_topk_offset}} "
                                   f"{d.index_skip_topk_offset}) MTP layer {first + 1} reuses an earlier MTP layer's "
                                   f"top-k and holds no indexer, which moetune does not model; use at most {first} "
                                   "MTP layers")


def _params_ceiling(spec: "ModelSpec") -> int:
    """More parameters than the model can hold, from its sizes alone: each MLP, shared and routed expert at most 3
    hidden x width matrices (a gated fc1 and fc2), the router one per expert; the mixer at most 8 matrices square in
    its widest dimension (MLA's 5 projections, a Mamba in-projection of up to 5 widths); the MTP projection (2 square
    ones), the embedding and the output layer."""
    h = spec.hidden_size
    widths = [h, spec.query_projection_size]
    if (m := spec.mla) is not None:
        widths += [m.q_lora_rank or 0, m.kv_down_dim, spec.num_attention_heads * (m.q_head_dim + m.v_head_dim)]
    if (i := spec.dsa) is not None:  # the indexer's q projection: 3 more matrices at most, within the 8
        widths += [i.index_n_heads * i.index_head_dim]
    if (g := spec.gdn) is not None:
        widths += [g.qk_dim, g.v_dim]
    if (b := spec.mamba) is not None:
        widths += [b.d_inner + b.n_groups * b.state_size + b.num_heads]
    d = max(widths)
    mlps = spec.ffn_hidden_size + spec.moe_shared_expert_intermediate_size + spec.num_moe_experts * (
        spec.moe_ffn_hidden_size + 1)
    layer = 8 * d * d + 3 * h * mlps
    return (spec.num_layers + spec.mtp_num_layers) * (layer + 2 * d * d) + 2 * spec.vocab_size * d


def _check_positive(spec, names: tuple[str, ...], model: str | None = None) -> None:
    for name in names:
        if getattr(spec, name) <= 0:
            raise SpecError(model or spec.name, f"{{{name}}} ({getattr(spec, name)}) must be positive")
