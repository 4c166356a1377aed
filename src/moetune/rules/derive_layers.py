"""Derived facts about the layers a config builds: whether it builds dense MLP layers, its context-parallel exchange
and the head splits CP needs (attention, Mamba-2, gated delta-net), the 4K-shard CP, and whether its pipeline split
holds at VPP 2. Read by rules/derive.py, which assembles every ``derived.*`` fact."""

from __future__ import annotations

import math
from typing import Any

from moetune.configio.finalize import sequence_parallel
from moetune.configio.layout_map import UNEVEN_SPLIT, layout_settings
from moetune.configio.names import NO_DEFAULT, is_megatron_lm, names
from moetune.errors import MoetuneError
from moetune.layout.cp_sizing import attention_share, shard_cp, undersharded_cp
from moetune.layout.gemm_shapes import Widths, gemm_refusal, token_fix
from moetune.layout.layout import Layout
from moetune.layout.pipeline import pipeline_chunks
from moetune.layout.ranks import members_in_domain
from moetune.layout.validate import gdn_cp_refusal, mamba_cp_refusal
from moetune.specs.hf_hybrid import HYBRID_SYMBOLS
from moetune.specs.model import count_attention_mixers
from moetune.walls.cp_legal import a2a_splits, hcp_groups, hcp_largest_group, heads_per_rank
from moetune.walls.host import GRAPH_PART, mixer_part

# experimental_attention_variant's names of gated delta-net (Megatron-LM arguments.py choices, Bridge's providers)
GDN_VARIANTS = ("gated_delta_net", "gdn", "gdn2")
# a hybrid_layer_pattern symbol -> its layer's token mixer: specs/hf_hybrid.py HYBRID_SYMBOLS' M * E - and the ones
# core_v0.19.0 adds (models/hybrid/hybrid_layer_allocation.py:17-23: G gated delta-net, D DeepSeek sparse attention,
# + MLA, both softmax attention over the MLA projections)
PATTERN_MIXERS = {symbol: mixer for symbol, (mixer, _) in HYBRID_SYMBOLS.items()} | {"G": "gdn", "D": "mla", "+": "mla"}


def value(config: dict[str, Any], name: str, fallback: Any = None) -> Any:
    """The config's value, else Megatron's default, else ``fallback``."""
    if name in config:
        return config[name]
    default = names().default(name)
    return fallback if default is NO_DEFAULT else default


def dense_mlp(config: dict[str, Any], is_moe: bool, freq: Any, hybrid_pattern: Any) -> bool | None:
    """Whether the config builds dense MLP layers (ffn_hidden_size split over TP, rule shape.ffn_divisible_by_tp):
    every layer without experts, the 0s of a moe_layer_freq list, all but every N-th layer (an int N > 1); None
    where the config leaves its experts to a recipe (Bridge overrides; a Megatron-LM launch without experts is
    dense). A Mamba hybrid builds one only for each '-' of its hybrid_layer_pattern (Megatron-Core
    hybrid_layer_allocation.py): the 0s of its moe_layer_freq are Mamba and attention layers."""
    if isinstance(hybrid_pattern, str) and hybrid_pattern:
        return "-" in hybrid_pattern
    if not is_moe:
        return True if "model.num_moe_experts" in config or is_megatron_lm(config) else None
    return 0 in freq if isinstance(freq, list) else isinstance(freq, int) and freq > 1


def cp_exchange(config: dict[str, Any], d: dict[str, Any]) -> None:
    """The CP exchange (Megatron hands TE p2p when cp_comm_type is unset) and the largest CP an all-to-all's head
    split allows: heads and KV groups of each TP rank must divide (MLA: every head is its own group)."""
    kind = value(config, "model.cp_comm_type") or "p2p"
    d["cp_comm_type"] = "per-layer list" if isinstance(kind, list) else kind
    # every exchange an all-gather (a per-layer list too), spelled as Megatron-Core's DSA check takes it (all_gather)
    d["cp_all_allgather"] = all(str(k).replace("_", "").lower() == "allgather"
                                for k in (kind if isinstance(kind, list) else [kind]))
    sizes = value(config, "model.hierarchical_context_parallel_sizes")
    d["hcp_sizes"] = list(sizes) if sizes else None
    d["hcp_sizes_product"] = math.prod(sizes) if sizes else None
    heads = value(config, "model.num_attention_heads")
    groups = heads if value(config, "model.multi_latent_attention", False) else value(config, "model.num_query_groups")
    d["attn_heads"], d["kv_groups"] = heads, groups
    if heads and groups and heads % d["tp"] == 0 and (groups % d["tp"] == 0 or d["tp"] % groups == 0):
        # the largest a2a over CP ranks: a group a2a+p2p runs with (hcp_groups), the ring of one where it is CP
        d["cp_a2a_limit"] = max(hcp_groups(*_rank_heads(d), d["cp"]))
        _hcp_a2a_group(d)
    d["softmax_sinks"] = (value(config, "model.softmax_type", "vanilla") or "vanilla") != "vanilla"


def cp_sizing(config: dict[str, Any], d: dict[str, Any]) -> None:
    """The 4K-shard CP (_cp_sizing) and whether the CP group leaves the job's NVLink domain."""
    _cp_sizing(config, d)
    if "job_nvlink_domain" in d:
        d["cp_crosses_nvlink"] = bool(members_in_domain(d["cp"], d["tp"], d["job_nvlink_domain"]) < d["cp"])


def _rank_heads(d: dict[str, Any]) -> tuple[int, int]:
    """(heads, KV groups) of one TP rank's attention (walls/cp_legal.py heads_per_rank)."""
    return heads_per_rank(d["attn_heads"], d["kv_groups"], d["tp"])


def _rank_a2a(d: dict[str, Any]):
    """Whether an all-to-all over `size` CP ranks splits each TP rank's heads and KV groups (walls/cp_legal.py
    a2a_splits)."""
    heads_tp, groups_tp = _rank_heads(d)
    return lambda size: bool(a2a_splits(heads_tp, groups_tp, size))


def _hcp_a2a_group(d: dict[str, Any]) -> None:
    """Whether a2a+p2p's a2a group (hierarchical_context_parallel_sizes[0]) splits each TP rank's heads and KV groups,
    as Transformer Engine's all-to-all inside it needs (rule cp.hcp_a2a_heads), and the sizes the fixes of
    cp.hcp_sizes and cp.hcp_a2a_heads offer: the largest group below CP, of every divisor, that runs inside the job's
    NVLink domain (walls/cp_legal.py hcp_largest_group), estimate's own pick (hcp_inner_size; Megatron-Bridge
    docs/training/hierarchical-context-parallel.md: "a2a (fast, head-parallel) on intra-node links with p2p ... on
    inter-node links"), else past it; the p2p ring the rest (a group of 1 leaves the ring alone; one of CP, a ring of
    1, runs too, as plain a2a, but then a2a+p2p says nothing a2a would not)."""
    def largest(domain: int | None) -> int:
        return int(hcp_largest_group(*_rank_heads(d), d["cp"], d["tp"], domain))

    domain = d.get("job_nvlink_domain")  # None where the cluster is unknown: no domain bound
    best = largest(domain)
    if best == 1 and domain is not None:  # none inside the domain: the largest past it
        best = largest(None)
    d["hcp_fit_sizes"] = [best, d["cp"] // best]
    sizes = d["hcp_sizes"]
    if sizes and len(sizes) == 2 and _count(sizes[0]):
        d["hcp_a2a_size"], d["hcp_a2a_splits"] = sizes[0], _rank_a2a(d)(sizes[0])


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def linear_mixer_heads(config: dict[str, Any], d: dict[str, Any]) -> None:
    """Why CP cannot split the Mamba-2 and gated delta-net mixers a config builds, None where it can (rules
    cp.mamba_heads, cp.gdn_heads; the facts are set only where the config builds such layers): CP splits their heads
    whole per TP rank. Mamba layers where hybrid_layer_pattern has an M, with MambaMixer's heads (mamba_num_heads,
    else 2 x hidden_size / mamba_head_dim: expand 2, megatron/core/ssm/mamba_mixer.py) and groups; gated delta-net
    where experimental_attention_variant names it; the refusals are layout/validate.py's, as a layout's validation
    asks."""
    pattern = value(config, "model.hybrid_layer_pattern")
    if isinstance(pattern, str) and "M" in pattern:
        heads = value(config, "model.mamba_num_heads")
        hidden, head_dim = value(config, "model.hidden_size"), value(config, "model.mamba_head_dim")
        if heads is None and _count(hidden) and _count(head_dim):
            heads = 2 * hidden // head_dim
        counts = _count(heads), _count(value(config, "model.mamba_num_groups"))
        if None not in counts:
            d["mamba_cp_refusal"] = mamba_cp_refusal(*counts, d["tp"], d["cp"])
    if str(value(config, "model.experimental_attention_variant") or "") in GDN_VARIANTS:
        counts = (_count(value(config, "model.linear_num_key_heads")),
                  _count(value(config, "model.linear_num_value_heads")))
        if None not in counts:
            d["gdn_cp_refusal"] = gdn_cp_refusal(*counts, d["tp"], d["cp"])


def _cp_sizing(config: dict[str, Any], d: dict[str, Any]) -> None:
    """The 4K-shard CP (rule longctx.cp_sizing) over the CPs this config's own fields allow: the sequence rules under
    its sequence parallelism (a recipe's, on with TP > 1, where it is silent), the world, and with attention sinks
    a2a's head split (the only exchange they run); the shard weighed by the config's attention share of its token
    mixers (attention_mixers). The estimator supplies the model's every check on top (planner/rule_findings.py
    cp_sizing_facts: linear-attention heads, the layer split, the batch)."""
    d.update(attention_facts(attention_mixers(config)))
    seq = value(config, "model.seq_length")
    if not seq:
        return
    world = config.get("cluster.num_gpus")
    tp = d["tp"]
    # one KV group a rank past the groups: CP 1 alone
    runs = _rank_a2a(d) if d["softmax_sinks"] and d.get("cp_a2a_limit") is not None else None
    d["cp_shard_target"] = shard_cp(int(seq), tp, d["pp"], int(world) if world else None, runs,
                                    sp=sequence_parallel(config), share=d["attention_share"])
    d["cp_undersharded"] = undersharded_cp(int(seq), tp, d["cp"], d["cp_shard_target"], d["attention_share"])


def attention_facts(mixers: tuple[int, int] | None) -> dict[str, Any]:
    """The attention mixers as rule facts: the counts, their share (cp_sizing.attention_share), and what
    longctx.cp_sizing's message adds where the share weighs the shard (empty for an all-attention stack)."""
    share = attention_share(mixers)
    weighing = "" if share == 1 else (
        f", weighed by the attention share of a hybrid: {mixers[0]} of its {mixers[1]} token mixers are attention, the "
        f"others Mamba-2 or gated delta-net, which keep no keys and values per token, so CP ~= {mixers[0]}/{mixers[1]} "
        "x seq_len / (4096 x TP)")
    return {"attention_mixers": list(mixers) if mixers else None, "attention_share": share,
            "cp_shard_weighing": weighing}


def attention_mixers(config: dict[str, Any]) -> tuple[int, int] | None:
    """(softmax-attention token mixers, all token mixers) the config builds, counted as the model's are
    (specs/model.py count_attention_mixers): a transformer's every layer; None where the config does not say."""
    mixers = layer_mixers(config)
    return count_attention_mixers(mixers) if mixers is not None else None


def layer_mixers(config: dict[str, Any]) -> list[str] | None:
    """Each decoder layer's token mixer as Megatron-Core builds the config, None where it does not say. A hybrid's
    hybrid_layer_pattern symbol by symbol (PATTERN_MIXERS; '|' stage cuts and an MTP part after '/' left out; None
    with a symbol Megatron-Core does not have). Otherwise the linear-attention pattern of get_linear_attention_pattern
    (models/gpt/experimental_attention_variant_module_specs.py:402-436 @core_v0.19.0): for a gated delta-net stack,
    one softmax layer every N for an int linear_attention_freq N, a list's 0s softmax; for any other stack, every one
    of num_layers softmax (MLA or GQA)."""
    pattern = value(config, "model.hybrid_layer_pattern")
    if isinstance(pattern, str) and pattern:
        main = pattern.split("/")[0].replace("|", "")
        return [PATTERN_MIXERS[ch] for ch in main] if set(main) <= set(PATTERN_MIXERS) else None
    if value(config, "model.is_hybrid_model"):  # a hybrid whose pattern is left out (a layout-free probe's config)
        return None
    freq, layers = value(config, "model.linear_attention_freq"), _count(value(config, "model.num_layers"))
    if str(value(config, "model.experimental_attention_variant") or "") in GDN_VARIANTS:
        if isinstance(freq, list) and freq and all(f in (0, 1) for f in freq):
            return ["gdn" if f else "gqa" for f in freq]
        every = _count(freq)
        return ["gqa" if (i + 1) % every == 0 else "gdn" for i in range(layers)] if every and layers else None
    softmax = "mla" if value(config, "model.multi_latent_attention") else "gqa"
    return [softmax] * layers if layers else None


def idle_graph_scopes(config: dict[str, Any], d: dict[str, Any]) -> list[str] | None:
    """The graph scopes of d['graph_modules'] that name no module the config builds, and so capture nothing: Megatron-
    Core graphs a layer only where a scope names its Mamba mixer (mamba), its self-attention (attn), its MoELayer (moe,
    moe_router, moe_preprocess) or its dense MLP (mlp) (transformer/cuda_graphs.py _layer_is_graphable,
    transformer_layer.py create_mcore_cudagraph_manager @core_v0.19.0), the parts the host wall credits a scope with
    (walls/host.py GRAPH_PART, scope_captures). None where the config leaves its layers to a recipe."""
    mixers = layer_mixers(config)
    if mixers is None or d["dense_mlp"] is None:
        return None
    blocks = {p for p, built in (("dense", d["dense_mlp"]), ("moe", d["is_moe"])) if built}
    parts = {mixer_part(m) for m in mixers} | blocks
    return [scope for scope in d["graph_modules"] if scope in GRAPH_PART and GRAPH_PART[scope] not in parts]


def vpp2_runs(config: dict[str, Any], d: dict[str, Any]) -> bool | None:
    """Whether this pipeline split holds at VPP 2 (the fix rules scale.pp_without_vpp and ep_overlap.pp_needs_vpp
    offer): uneven first/last stages and the layers between must each split into two chunks (layout/pipeline.py);
    None where the config does not say how many layers there are. The uneven split is the config's own, read as
    the planner reads a config's layout (configio/layout_map.py)."""
    layers = _count(value(config, "model.num_layers"))
    if layers is None or d["pp"] <= 1:
        return None
    if value(config, "model.is_hybrid_model") or value(config, "model.hybrid_layer_pattern"):
        return False  # a hybrid's stages come from its pattern's '|'; Bridge refuses VPP on one (rules scale.hybrid_*)
    split = {k: v for k, v in layout_settings(config).items() if k in UNEVEN_SPLIT}
    try:
        pipeline_chunks(Layout(world_size=d["pp"], pp=d["pp"], vpp=2, **split), layers)
    except (MoetuneError, ValueError):
        return False
    return True


def gemm_shapes(config: dict[str, Any], d: dict[str, Any]) -> None:
    """The GEMM shape an FP8/FP4 recipe refuses in this config (rule precision.gemm_shapes; layout/gemm_shapes.py,
    as estimate's validation asks it), with the sequence length and MBS that run its layout. Set only where the
    config states its precision, sequence and micro-batch; the Hopper-only alignments need its GPU."""
    seq, mbs = _count(value(config, "model.seq_length")), _count(value(config, "train.micro_batch_size"))
    precision = "nvfp4" if d.get("fp4") else f"FP8 ({d.get('fp8_recipe')})" if d.get("fp8") else None
    if precision is None or seq is None or mbs is None:
        return
    sp = sequence_parallel(config)
    shape = {"seq": seq, "mbs": mbs, "tp": d["tp"], "cp": d["cp"], "sp": d["tp"] > 1 if sp is None else bool(sp)}
    if seq * mbs % (d["cp"] * (d["tp"] if shape["sp"] else 1)):
        return  # the sequence rules' fault (sp.seq_divisible_by_tp, longctx.cp_seq_divisible)
    widths = Widths(mla=bool(value(config, "model.multi_latent_attention", False)),
                    dense_ffn=_count(value(config, "model.ffn_hidden_size")) if d["dense_mlp"] else None,
                    shared_ffn=_count(value(config, "model.moe_shared_expert_intermediate_size")),
                    expert_ffn=_count(d["expert_ffn"]) if d["is_moe"] else None)
    d["gemm_refusal"] = why = gemm_refusal(widths, precision, d.get("arch"), etp=d["etp"], **shape)
    d["gemm_fix_seq"] = None
    if why and "tokens" in why:  # a token count: the sequence or the micro-batch makes it whole multiples
        d["gemm_fix_seq"], fix_mbs = token_fix(widths, precision, d.get("arch"), **shape)
        d["gemm_fix"] = f"set seq_length {d['gemm_fix_seq']} or micro_batch_size {fix_mbs}, or train in BF16"
    elif why:
        d["gemm_fix"] = "use a smaller TP (expert TP for the expert width), or train in BF16"
