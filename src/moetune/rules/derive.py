"""Derived facts (``derived.*``) the rules read: mesh sizes, platform facts, effective knobs.

Computed from the normalized config (Megatron Bridge dotted names + cluster.* + env.*), with Megatron's
defaults for names the config leaves out. The planner/estimator may add its own facts on top (see
EXTERNAL); a rule that needs a fact nobody supplied skips.
"""

from __future__ import annotations

from typing import Any

from moetune.configio.cluster import OVERRIDDEN, config_gpu
from moetune.configio.finalize import (
    distributed_optimizer,
    dropout_rate,
    expert_tensor_parallel_size,
    fsdp_impl,
    gathers_param_shards,
    layer_wise_optimizer,
    megatron_fsdp_strategy,
    quantized_params,
)
from moetune.configio.names import is_megatron_lm
from moetune.configio.release_context import target
from moetune.configio.releases import core_at_least
from moetune.layout.knobs import HYBRIDEP_UNSET_FROM, MEGATRON_FLEX_SMS, unset_flex_sms
from moetune.layout.layout import hybrid_segments, layout_stages_or_none
from moetune.layout.modules import RECOMPUTE_MODULES, UNMODELLED_RECOMPUTE, did_you_mean, unsaved_offloads
from moetune.layout.param_gather import offload_refuses_params
from moetune.layout.validate import ep_first_sizes
from moetune.rules.derive_cluster import cluster_facts
from moetune.rules.derive_layers import (
    cp_exchange,
    cp_sizing,
    dense_mlp,
    gemm_shapes,
    idle_graph_scopes,
    linear_mixer_heads,
    value,
    vpp2_runs,
)
from moetune.specs.platform import deepep_runs, hybridep_runs, platform_defaults, platform_of
from moetune.words import closest

# Facts moetune's estimator / profiler supply (not computed here). Rules on them skip when absent.
EXTERNAL = {
    "target_release": "str: the release --megatron-core / --megatron-bridge names (check, emit); absent: the newest",
    "fits": "bool: the config fits in GPU memory (memory wall)",
    "peak_bytes": "int: predicted peak bytes per rank",
    "capacity_bytes": "int: usable bytes per GPU",
    "fitting_layout": "dict: overrides of the smallest model parallelism that fits",
    "fits_with_selective_recompute": "bool: selective recompute alone is enough to fit",
    "fits_with_selective_without_offload": "bool: selective recompute with no offloading is enough to fit",
    "fits_with_less_model_parallel": "bool: a layout with less model parallelism also fits",
    "fits_with_default_dispatcher": "bool: the config fits on the fused dispatcher a plan defaults to on its layout",
    "less_model_parallel_layout": "dict: overrides of that layout",
    "less_model_parallel_note": "str: what the step model predicts of that layout, as rule scale.maximize_dp says it",
    "fits_at_kv_groups_tp": "bool: the layout at TP = the KV groups (rule scale.tp_past_kv_groups's fix) fits",
    "kv_groups_tp_note": "str: what that layout would need where it does not fit, as scale.tp_past_kv_groups says it",
    "host_unchecked_bytes": "int: host bytes a GPU's optimizer offload keeps, where the GPU's host memory is unknown",
    "dominant_wall": "str: memory | communication | host | compute (diagnose)",
    "cuda_graph_bytes": "int: CUDA-graph pool bytes already counted by the estimator",
    "mtp_checkpoint_layers": "int: MTP modules the model's checkpoint ships (specs: num_nextn_predict_layers, ...)",
    "attention_chunk": "int: the model's attention chunk (Llama 4's attention_chunk_size; 0: none)",
    "chunk_skipped_pct": "int: % of the counted FLOPs (whole-sequence attention) the chunks skip at this sequence",
    # computed here from the config too; the estimator's, over every check the model adds, win
    "cp_shard_target": "int: the 4K-shard CP among those the model runs at (planner/rule_findings.py cp_sizing)",
    "cp_undersharded": "bool: the config's CP is below cp_shard_target at long context",
    "attention_mixers": "list: [softmax-attention token mixers, all token mixers] (a transformer's both its layers)",
    "attention_share": "float: their share, which weighs the 4K shard (1 for a transformer)",
    "cp_shard_weighing": "str: what longctx.cp_sizing's message adds where that share weighs the shard",
}


# Byte facts the estimator supplies that messages quote in GiB too (peak_bytes -> peak_gib, ...)
GIB_FACTS = ("peak_bytes", "capacity_bytes", "host_unchecked_bytes")

# Where "very long context" starts, the sequence length rules longctx.sdpa_recompute and longctx.tp_lever_nvl72 fire
# from and fit.core_attn_fused_attention stops below (seeds/002_9e3c03e3c28f68e6.txt § Avoid SDPA-heavy recompute at
# very long context; § Use TP as another lever on NVL72 systems). The seed names no number: its long-context recipes
# are 128K-class and it leaves the 4K-class regime behind "well past" 4K; moetune reads 64K tokens and up.
LONG_CONTEXT_TOKENS = 65_536


def graph_modules(scope: Any) -> list[str]:
    """CUDA-graph scope names as Bridge reads them (utils/cuda_graph.py): 'full'/None -> whole layer."""
    if scope is None or scope == "full":
        return []
    items = scope.split(",") if isinstance(scope, str) else list(scope)
    return [str(i).rsplit(".", 1)[-1] for i in items if str(i) not in ("", "full")]


def _platform(config: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if config.get("cluster.gpu"):
        spec = config_gpu(config)  # the catalog's or a cluster file's, with the config's own domain over it
        out = {"platform": spec.name, "gpu_key": spec.key, "arch": spec.arch, "nvlink_domain": spec.nvlink_domain,
               "gpus_per_node": spec.gpus_per_node, "fp8_supported": spec.fp8_tflops > 0,
               "fp4_supported": spec.fp4_tflops > 0, "mxfp8_supported": spec.arch == "blackwell",
               "capacity_bytes": spec.capacity_bytes, "deepep_supported": deepep_runs(spec),
               "hybridep_supported": hybridep_runs(spec), "platform_family": platform_of(spec),
               # the platform's starting dispatcher, as the planner defaults it; narrowed to the EP group by
               # derive_cluster.py cluster_facts
               "recommended_backend": platform_defaults(spec)["dispatcher"]}
    else:  # a config without a GPU may still state its topology
        out.update({k: int(config[f"cluster.{k}"]) for k in OVERRIDDEN if f"cluster.{k}" in config})
    return out


def _mesh(config: dict[str, Any], d: dict[str, Any]) -> None:
    tp = int(value(config, "model.tensor_model_parallel_size", 1) or 1)
    d.update(tp=tp, cp=int(value(config, "model.context_parallel_size", 1) or 1),
             pp=int(value(config, "model.pipeline_model_parallel_size", 1) or 1),
             vpp=value(config, "model.virtual_pipeline_model_parallel_size"),
             ep=int(value(config, "model.expert_model_parallel_size", 1) or 1),
             etp=expert_tensor_parallel_size(config))  # as the launcher fills it in (configio/finalize.py)
    experts = value(config, "model.num_moe_experts")
    d["is_moe"] = bool(experts and experts > 1)
    # no interleaving where a pipeline could have it: EP overlap needs it, rule scale.pp_without_vpp offers it
    d["pp_without_vpp"] = d["pp"] > 1 and d["vpp"] is None
    _recompute(config, d)
    if d["is_moe"]:  # the EP the same expert ranks could run with the least expert TP (rule scale.prefer_ep_over_etp)
        d["ep_first_ep"], d["ep_first_etp"] = ep_first_sizes(int(experts), d["ep"], d["etp"])
    freq = value(config, "model.moe_layer_freq")  # a per-layer 0/1 list, or every N-th layer (an int)
    d["moe_freq_layers"] = len(freq) if isinstance(freq, list) else None
    d["dense_mlp"] = dense_mlp(config, d["is_moe"], freq, value(config, "model.hybrid_layer_pattern"))
    # each routed expert's FFN width: moe_ffn_hidden_size, else ffn_hidden_size where Megatron-LM runs the launch
    # (transformer_config.py takes it when unset); a Bridge config silent on it leaves it to its recipe
    mlm = is_megatron_lm(config)
    d["expert_ffn"] = config.get("model.moe_ffn_hidden_size") or (config.get("model.ffn_hidden_size") if mlm else None)
    # the string's virtual stages (rule pipeline.vpp_matches_layout); None where it does not parse
    d["layout_stages"] = layout_stages_or_none(value(config, "model.pipeline_model_parallel_layout"))
    pattern = value(config, "model.hybrid_layer_pattern")  # a Mamba hybrid's stages: its '|' segments
    segments = hybrid_segments(pattern) if isinstance(pattern, str) and "|" in pattern else None
    d["hybrid_stages"] = len(segments) if segments else None
    # segments of unequal length: a split Megatron-Core before 0.17 does not make (scale.hybrid_split_needs_mcore_017)
    d["hybrid_uneven"] = bool(segments) and len({len(seg) for seg in segments}) > 1


def _recompute(config: dict[str, Any], d: dict[str, Any]) -> None:
    """Recompute facts, named once for the rules that ask them (EP overlap, CUDA graphs and offloading each refuse
    some recompute: rules ep_overlap.*, cudagraph.*, fit.offload_inside_recomputed_moe)."""
    # the first selective set, which the fit rules' fixes write: moe_act with layernorm (Megatron-Core needs grouped
    # GEMMs for moe_act, transformer_config.py), else mlp with it. The seeds also name core_attn, but under Transformer
    # Engine's fused attention it frees nothing and pins the fused QKV output (rule fit.core_attn_fused_attention)
    d["first_selective_modules"] = ["layernorm", "moe_act"] if value(config, "model.moe_grouped_gemm") else \
        ["layernorm", "mlp"]
    granularity, modules = value(config, "model.recompute_granularity"), value(config, "model.recompute_modules")
    if isinstance(modules, list):  # what Megatron-Core's recompute_modules assert accepts (transformer_config.py)
        known = set(RECOMPUTE_MODULES) | set(UNMODELLED_RECOMPUTE)
        d["unknown_recompute_modules"] = [m for m in modules if m not in known]
        # each misspelling by the module it is closest to, where one is close; the others dropped (the rule's fix)
        meant = {m: m if m in known else closest(m, known, 0.7) for m in modules}
        d["known_recompute_modules"] = list(dict.fromkeys(v for v in meant.values() if v))
        d["recompute_module_hint"] = did_you_mean(d["unknown_recompute_modules"], sorted(known))
    # what Megatron-Core recomputes under selective: core_attn where recompute_modules is None, nothing for an empty
    # list (transformer_config.py @ core_v0.18.2), as Bridge's GB300 DeepSeek-V3 MXFP8 perf recipes set it (@067f987)
    d["recompute_modules_run"] = ["core_attn"] if modules is None else modules if isinstance(modules, list) else []
    # a recompute method or layer count is read by full recompute alone; Bridge's EP overlap refuses each
    d["full_recompute"] = granularity == "full" or value(config, "model.recompute_method") is not None or \
        value(config, "model.recompute_num_layers") is not None
    # 'moe' recomputes the whole MoE forward under one checkpoint, so nothing inside it is saved to offload
    # (Megatron-Core asserts, transformer_config.py "Cannot offload ... while recomputing the entire MoE layer")
    d["recomputes_moe"] = granularity == "selective" and isinstance(modules, list) and "moe" in modules
    offloaded = value(config, "model.offload_modules") if value(config, "model.fine_grained_activation_offloading") \
        else None
    d["offload_inside_recomputed_moe"] = unsaved_offloads("selective", modules, offloaded) \
        if d["recomputes_moe"] and isinstance(offloaded, list) else []
    d["recompute_modules_for_moe_offload"] = list(dict.fromkeys("moe_act" if m == "moe" else m for m in modules)) \
        if d["recomputes_moe"] else None


def _dispatcher(config: dict[str, Any], d: dict[str, Any]) -> None:
    dispatcher = value(config, "model.moe_token_dispatcher_type", "allgather")
    backend = value(config, "model.moe_flex_dispatcher_backend")
    d["flex_backend"] = backend if dispatcher == "flex" else None
    # whether the EP group lies in one NVLink domain, where the GPU is known (cluster_facts): HybridEP's own count
    one_domain = not d["ep_crosses_nvlink"] if "ep_crosses_nvlink" in d else None
    given = given_dispatcher_sms(config, backend)
    d["dispatcher_sms_given"] = given is not None
    # left out where it waits on the topology (HybridEP's own count, no GPU or a layout-free probe): not read as None
    if (sms := given if given is not None else _unset_sms(backend, one_domain)) is not None or backend != "hybridep":
        d["dispatcher_sms"] = sms


def given_dispatcher_sms(config: dict[str, Any], backend: str | None) -> int | None:
    """The SM count a config sets for a fused dispatcher's kernels: moe_flex_dispatcher_num_sms (Megatron routes the
    per-backend fields into it, and it wins), else the backend's own field; None where it sets none."""
    fields = ["model.moe_flex_dispatcher_num_sms"] + ([f"model.moe_{backend}_num_sms"] if backend in MEGATRON_FLEX_SMS
                                                      else [])
    for name in fields:
        if (sms := config.get(name)) is not None:
            return sms
    return None


def dispatcher_sms(config: dict[str, Any], backend: str | None, one_domain: bool | None) -> int | None:
    """SMs of a fused dispatcher's kernels: the count the config sets, else what runs unset under the release the
    command targets (knobs.unset_flex_sms; seeds/004 § Tuning Parameters: 20 for DeepEP, 16 for HybridEP before
    Megatron-Core 0.18, HybridEP's own 24 or 8 by `one_domain` from it; None where that is unknown)."""
    given = given_dispatcher_sms(config, backend)
    return given if given is not None else _unset_sms(backend, one_domain)


def _unset_sms(backend: str | None, one_domain: bool | None) -> int | None:
    """What a fused dispatcher runs with no SM count set, under the release the command targets."""
    return unset_flex_sms(backend, core_at_least(target(), HYBRIDEP_UNSET_FROM), one_domain)


def graph_setting(config: dict[str, Any]) -> tuple[str, list[str], bool]:
    """(implementation, scope modules, full-iteration) of a config's CUDA graphs, as Megatron-Core reads its fields:
    the legacy switches map to an implementation, and cuda_graph_impl 'full_iteration' (Bridge's current recipes) or
    a 'full_iteration' scope under 'local' capture the whole step."""
    impl = value(config, "model.cuda_graph_impl", "none") or "none"
    if impl == "none" and value(config, "model.enable_cuda_graph", False):
        impl = "local"  # legacy switch, mapped the same way by Megatron-Core
    if impl == "none" and value(config, "model.external_cuda_graph", False):
        impl = "transformer_engine"
    modules = graph_modules(value(config, "model.cuda_graph_scope"))
    return impl, modules, impl == "full_iteration" or (impl == "local" and "full_iteration" in modules)


def _graphs(config: dict[str, Any], d: dict[str, Any]) -> None:
    impl, modules, full = graph_setting(config)
    d.update(graph_impl=impl, graph_modules=[m for m in modules if m != "full_iteration"],
             full_iteration_graph=full, scoped_graph=impl in ("local", "transformer_engine") and not full,
             full_iteration_scope="full_iteration" in modules)
    # the scope as written, a list or one string (configio/types.py Scopes; None for a config no input wrote, a
    # plan's), and as the one string Megatron-Core before 0.16 takes (None where it names two or more)
    listed = getattr(value(config, "model.cuda_graph_scope"), "listed", None)
    d["graph_scope_listed"] = list(listed) if listed is not None else None
    d["graph_scope_string"] = modules[0] if len(modules) == 1 else None if modules else "full"
    # the scopes that capture no layer of this model (rule cudagraph.scope_captures_nothing)
    if d["graph_modules"] and (idle := idle_graph_scopes(config, d)) is not None:
        d["graph_scopes_idle"], d["graph_scopes_captured"] = idle, [m for m in d["graph_modules"] if m not in idle]
    shared = value(config, "model.moe_shared_expert_intermediate_size")
    # Megatron-Bridge training/comm_overlap.py: weight grads land inside a graph over attn, or over the
    # router when shared experts run inside the router's graph (shared-expert overlap off).
    d["wgrad_in_graph_scope"] = impl != "none" and (
        "attn" in d["graph_modules"] or ("moe_router" in d["graph_modules"] and shared is not None
                                         and not value(config, "model.moe_shared_expert_overlap", False)))


def _precision(config: dict[str, Any], d: dict[str, Any]) -> None:
    # FP8 or NVFP4 weights (the gather, else a lone {kind}_param, as Bridge hands them to Megatron-Core and the
    # estimate reads them: finalize.py quantized_params) and those the optimizer's CPU offload cannot step, as the
    # planner and the knobs test it (rules precision.fp8/fp4_params_with_optimizer_offload, fit.does_not_fit's
    # offload steps); off where nothing keeps them
    for kind in ("fp8", "fp4"):
        d[f"{kind}_params"] = bool(quantized_params(config, kind))
        d[f"offload_refuses_{kind}_params"] = offload_refuses_params(
            f"{kind}_param_gather", d[f"{kind}_params"], value(config, f"mixed_precision.{kind}_recipe"))
    # A Bridge override file without precision inherits the recipe's (unknown here): leave the facts out
    # so precision rules skip. The normalizer folds model.bf16/fp8/... into mixed_precision.*.
    if not any(k.startswith("mixed_precision.") for k in config):
        return
    for f in ("bf16", "fp16", "fp8", "fp8_recipe", "fp4", "fp4_recipe"):
        d[f] = value(config, f"mixed_precision.{f}")


def _training(config: dict[str, Any], d: dict[str, Any]) -> None:
    """Dropless routing, the optimizer and its data-parallel sharding, the overlaps, dropout and the launcher."""
    d["dropless"] = d["is_moe"] and value(config, "model.moe_expert_capacity_factor") is None
    d["optimizer"] = str(value(config, "optimizer.optimizer", "adam"))
    d["layer_wise_optimizer"] = layer_wise_optimizer(config)
    d["ep_overlap"] = bool(value(config, "comm_overlap.overlap_moe_expert_parallel_comm", False))
    d["delay_wgrad"] = bool(value(config, "comm_overlap.delay_wgrad_compute", False))
    d["tp_comm_overlap"] = bool(value(config, "comm_overlap.tp_comm_overlap", False))
    d["overlap_grad_reduce"] = bool(value(config, "ddp.overlap_grad_reduce", False))
    # as Bridge syncs ddp's and the optimizer's switches, a silent one its recipe's (configio/finalize.py), as the
    # estimate reads it: a rule asking the raw ddp field missed a config that set only the optimizer's
    d["distributed_optimizer"] = distributed_optimizer(config)
    d["fsdp"] = fsdp_impl(config)
    d["gathers_param_shards"] = gathers_param_shards(config)  # rule overlap.param_gather_needs_dist_opt's assert
    d["fsdp_sharding"] = megatron_fsdp_strategy(config) or ""  # Megatron FSDP's strategy, "" without it
    d["hidden_dropout"] = dropout_rate(config, "model.hidden_dropout")
    d["attention_dropout"] = dropout_rate(config, "model.attention_dropout")
    # a Megatron-LM launch (its arguments, or MODEL_ARGS YAML): the rules that mirror validate_args's asserts fire on
    # it alone, Bridge running none of them; a config that names no launcher is Bridge's
    d["megatron_lm"] = is_megatron_lm(config)
    d["vpp2_runs"] = vpp2_runs(config, d)
    d["long_context_tokens"] = LONG_CONTEXT_TOKENS  # a constant: the rules table has no constants of its own


# Each step adds its facts to those of the steps before it, which it may read. LAYOUT_STEPS add none that a rule of
# the planner's knob probe reads (planner/legal.py knob_rules: each reads the model, the platform and the knobs
# alone; tests/planner/test_legal_grid.py checks it on every rule case): the CP exchange and sizing, the groups past
# the NVLink domain, the batch, and the GEMM shapes of the layout's tokens and widths.
_STEPS = (_mesh, cluster_facts, cp_exchange, linear_mixer_heads, cp_sizing, _dispatcher, _graphs, _precision,
          gemm_shapes, _training)
LAYOUT_STEPS = frozenset({cluster_facts, cp_exchange, cp_sizing, gemm_shapes})


def derive(config: dict[str, Any], extra: dict[str, Any] | None = None, *, layout: bool = True) -> dict[str, Any]:
    """All derived facts for ``config``; ``extra`` (from the estimator/profiler) wins. ``layout=False`` leaves out
    the facts of LAYOUT_STEPS, which the planner's knob probe has no use for (planner/legal.py legal_grid), and the
    platform's recommended_backend unnarrowed to the EP group (derive_cluster.py)."""
    d: dict[str, Any] = _platform(config)
    for step in _STEPS:
        if layout or step not in LAYOUT_STEPS:
            step(config, d)
    d.update(extra or {})
    for key in GIB_FACTS:
        if d.get(key) is not None:
            d[key.replace("_bytes", "_gib")] = round(d[key] / 2**30, 1)
    return d
