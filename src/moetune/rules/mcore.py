"""Megatron-Core's own TransformerConfig validation, run on the model fields of a normalized config.

Optional: when megatron-core is not importable the check is skipped without a finding. It needs no GPU:
TransformerConfig.__post_init__ only checks field combinations. Bridge applies mixed_precision.* and
comm_overlap.* onto the model before Megatron-Core validates it, so those are passed in too.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import re
import traceback
import warnings
from typing import Any, NamedTuple

from moetune.configio.finalize import expert_tensor_parallel_size, quantized_params, sequence_parallel
from moetune.layout.modules import RECOMPUTE_MODULES, UNMODELLED_RECOMPUTE
from moetune.rules.derive import graph_modules
from moetune.rules.engine import Finding

RULE = "mcore.transformer_config"
SOURCE = "Megatron-LM megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__"
REQUIRED = ("num_layers", "hidden_size", "num_attention_heads")
# The rules of rules.yaml whose fault TransformerConfig refuses too (transformer_config.py __post_init__;
# pipeline_parallel_layer_layout.py), each with the change to TransformerConfig's fields that puts that fault right
# and leaves the fields other checks read alone ({} where the config cannot have the fault). A refusal is the rule's
# fault when, given the change, Megatron-Core gets past the check that refused (same_fault): its finding names the
# rule in same_as, and check leaves it out where the fault is said already (cli/check_cmd.py said_once). Matched by
# what puts the fault right, not by the refusal's words, which differ between releases. Only these: TransformerConfig
# checks no FFN width or expert count against TP/ETP/EP, and its refusals that name such a field are other faults
# ("num_moe_experts (60) should be divisible by moe_router_num_groups (7)" beside a 60-expert EP 8 error).
_SAME_FAULT = {
    # a head count TP divides, the query groups as they are (their own check follows)
    "shape.heads_divisible_by_tp": lambda kw: {
        "num_attention_heads": kw["num_attention_heads"] * kw["tensor_model_parallel_size"]}
    if (kw.get("tensor_model_parallel_size") or 1) > 1 else {},
    "shape.query_groups_vs_tp": lambda kw: {"num_query_groups": None},  # Megatron-Core's default: a group a head
    "pipeline.vpp_matches_layout": lambda kw: {"virtual_pipeline_model_parallel_size": None}  # VPP from the string
    if kw.get("pipeline_model_parallel_layout") else {},
    # PipelineParallelLayerLayout.__init__ asserts PP divides the stages; one pipeline rank takes any string
    "pipeline.layout_stages_divisible": lambda kw: {"pipeline_model_parallel_size": 1}
    if kw.get("pipeline_model_parallel_layout") else {},
    "precision.fp8_params_without_fp8": lambda kw: {"fp8_param": False} if kw.get("fp8_param") else {},
    "fit.full_recompute_needs_method": lambda kw: {"recompute_method": "uniform", "recompute_num_layers": 1}
    if kw.get("recompute_granularity") == "full" else {},
    "fit.unknown_recompute_module": lambda kw: {"recompute_modules": [
        m for m in kw["recompute_modules"] if m in RECOMPUTE_MODULES or m in UNMODELLED_RECOMPUTE]}
    if isinstance(kw.get("recompute_modules"), list) else {},
    "dispatcher.ncclep_needs_flex": lambda kw: {"moe_token_dispatcher_type": "flex"}
    if kw.get("moe_flex_dispatcher_backend") == "ncclep" else {},
    "cudagraph.full_iteration_scope_te": lambda kw: {"cuda_graph_scope": [
        s for s in graph_modules(kw.get("cuda_graph_scope")) if s != "full_iteration"]}
    if kw.get("cuda_graph_impl") == "transformer_engine" else {},
}
# Checks that depend on the machine (Transformer Engine, torch or CUDA builds), not on the config:
# reported as info, never as a config error.
_ENVIRONMENT = re.compile(r"Transformer Engine|\bTE\b|te_version|torch version|install|not available|"
                          r"apex|CUDA(?![ _]graph)|cuda device|No module|'NoneType' and 'Version'", re.IGNORECASE)
# Checks the installed megatron-core makes that the Megatron-LM main Bridge's recipes run (verified at d98e8a6) no
# longer makes: when the condition holds, the fields given take the values that let the rest of the check go on.
# megatron-core 0.16 refuses any CUDA graph but TE-scoped ones under EP overlap; main refuses only TE-scoped
# moe/mlp graphs, so full-iteration (local) graphs run with EP overlap (transformer_config.py; Megatron-LM
# PR #3820; Bridge's GB200/GB300 full-iteration recipes).
# megatron-core 0.16 also asserts PP > 1 for EP overlap with an MTP layer; core_v0.18.0 released it (Megatron-LM
# 286445c28a, PR #4796), and rule ep_overlap.mtp_pp1_needs_mcore_018 warns those on older containers instead.
_NEWER_MEGATRON_ACCEPTS = {
    "CUDA graph scope on moe and mlp is not supported with overlap_moe_expert_parallel_comm":
        (lambda kw: kw.get("cuda_graph_impl") == "local", {"cuda_graph_impl": "none"}),
    "Pipeline model parallel size must be larger than 1 when enabling overlap_moe_expert_parallel_comm with MTP "
    "layer.": (lambda kw: kw.get("mtp_num_layers") == 1, {"mtp_num_layers": None}),
    # megatron-core 0.16 refuses CP on gated delta-net layers ("coming soon"); Megatron-LM main runs it, splitting the
    # key heads over CP (megatron/core/ssm/gated_delta_net/common.py; the assert is gone from transformer_config.py)
    "Gated delta net does not support context parallel for now": (
        lambda kw: (kw.get("context_parallel_size") or 1) > 1, {"context_parallel_size": 1}),
    # megatron-core 0.16 knows cuda_graph_impl none/local/transformer_engine; Megatron-LM main adds full_iteration
    # (transformer_config.py cuda_graph_impl Literal), which Bridge's perf recipes set (perf_recipes/qwen/common.py)
    "Invalid cuda graph implementation: full_iteration": (
        lambda kw: kw.get("cuda_graph_impl") == "full_iteration",
        {"cuda_graph_impl": "none", "cuda_graph_scope": None}),
    # main lets the flex dispatcher drive the shared-expert overlap too (transformer_config.py "alltoall or flex";
    # moe/token_dispatcher.py MoEFlexTokenDispatcher), as the ModelZoo's DeepEP launches of DeepSeek-V2 run it
    "moe_shared_expert_overlap only works with alltoall token dispatcher": (
        lambda kw: kw.get("moe_token_dispatcher_type") == "flex", {"moe_shared_expert_overlap": False}),
    # main runs DSA attention under CP with the all-gather exchange (transformer_config.py "DSAttention context
    # parallelism currently supports cp_comm_type=allgather only"; Bridge perf_recipes/glm_moe_dsa/gb200/glm5.py)
    "Currently context parallelism is not supported by DSAttention": (
        lambda kw: str(kw.get("cp_comm_type") or "").replace("_", "").lower() == "allgather",
        {"context_parallel_size": 1}),
    # main's aux-loss-free expert bias takes sqrtsoftplus scores as well as sigmoid ones (DeepSeek-V4's bridge)
    "Expert bias for aux-loss-free routing only supports": (
        lambda kw: kw.get("moe_router_score_function") == "sqrtsoftplus", {"moe_router_score_function": "sigmoid"}),
}


def _newer_accepts(text: str):
    """The entry of _NEWER_MEGATRON_ACCEPTS whose message `text` starts with (messages may end in the values)."""
    return next((v for k, v in _NEWER_MEGATRON_ACCEPTS.items() if text.startswith(k)), None)
# Options Megatron-Core gates on the installed Transformer Engine version (is_te_min_version compares
# None with a Version when TE is absent, so the error names no field).
_TE_VERSION_GATED = ("moe_grouped_gemm",)
# Fields whose validation imports optional kernels (TE fused permutation): switched off for the check.
_NEEDS_KERNELS = {"moe_permute_fusion": False}
_PRECISION = ("bf16", "fp16", "fp8", "fp8_recipe", "fp4", "fp4_recipe", "params_dtype", "fp8_param_gather",
              "first_last_layers_bf16", "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16")
_OVERLAP = ("overlap_moe_expert_parallel_comm", "delay_wgrad_compute", "tp_comm_overlap")


def _kwargs(config: dict[str, Any], fields: set[str]) -> dict[str, Any]:
    import torch

    kw = {k[len("model."):]: v for k, v in config.items() if k.startswith("model.") and k[len("model."):] in fields}
    for name in _PRECISION:
        if f"mixed_precision.{name}" in config and name in fields:
            kw[name] = config[f"mixed_precision.{name}"]
    # TransformerConfig's fp8_param is the FP8-weights switch, read as the estimate reads it (configio/finalize.py)
    param = quantized_params(config, "fp8")
    if "fp8_param" in fields and param is not None:
        kw["fp8_param"] = bool(param)
    for name in _OVERLAP:
        if f"comm_overlap.{name}" in config and name in fields:
            kw[name] = config[f"comm_overlap.{name}"]
    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    for name in ("params_dtype", "pipeline_dtype", "autocast_dtype"):
        if isinstance(kw.get(name), str):
            kw[name] = dtypes[kw[name]]
    if kw.get("pipeline_model_parallel_size", 1) > 1 and kw.get("pipeline_dtype") is None:
        # Bridge sets pipeline_dtype from the precision recipe (mixed_precision.py); mirror that.
        kw["pipeline_dtype"] = torch.bfloat16 if kw.get("bf16") else torch.float16 if kw.get("fp16") else torch.float32
    kw.update({k: v for k, v in _NEEDS_KERNELS.items() if k in kw})
    # what the launcher fills in before Megatron-Core validates (Bridge's finalize: SP off at TP 1, ETP 1 under EP)
    if "sequence_parallel" in kw:
        kw["sequence_parallel"] = bool(sequence_parallel(config))
    if "expert_tensor_parallel_size" in fields and kw.get("expert_model_parallel_size", 1) > 1:
        kw["expert_tensor_parallel_size"] = expert_tensor_parallel_size(config)
    return kw


def mcore_findings(config: dict[str, Any]) -> list[Finding]:
    """Findings from constructing Megatron-Core's TransformerConfig; [] when megatron-core is absent."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig
    except Exception:  # megatron-core (or torch) not installed: the check is optional
        return []
    missing = [f for f in REQUIRED if f"model.{f}" not in config]
    if missing:
        return [Finding(rule="mcore.skipped", severity="info", source=SOURCE,
                        message=f"Megatron-Core TransformerConfig validation skipped: the config has no "
                                f"{', '.join('model.' + m for m in missing)} (architecture comes from the recipe).")]
    cls = MLATransformerConfig if config.get("model.multi_latent_attention") else TransformerConfig
    kw = _kwargs(config, {f.name for f in dataclasses.fields(cls)})
    skipped: list[str] = []
    switched: set[str] = set()
    for _ in range(8):  # switch off, one at a time, kernel options this machine cannot validate
        refusal = _construct(cls, kw)
        if refusal is None:
            break
        text, is_env = refusal.text, refusal.machine
        newer = _newer_accepts(text)
        if newer and newer[0](kw):
            kw.update(newer[1])
            switched.update(newer[1])
            skipped.append(f"{text} (the installed megatron-core; Megatron-LM main accepts this config)")
            continue
        culprit = next((k for k, v in kw.items() if v is True and re.search(rf"\b{k}\b", text)), None)
        if culprit is None and "Version" in text:
            culprit = next((k for k in _TE_VERSION_GATED if kw.get(k) is True), None)
        if not is_env and not any(re.search(rf"\b{k}\b", text) for k in switched):
            return [Finding(rule=RULE, severity="error", source=SOURCE,
                            message=f"Megatron-Core rejects the model config: {text}",
                            same_as=same_fault(cls, kw, refusal))]
        if culprit is None or culprit in switched:  # nothing more to switch, or a consequence of a switch
            skipped.append(text)
            break
        kw[culprit] = False
        switched.add(culprit)
        skipped.append(text)
    if not skipped:
        return []
    return [Finding(rule="mcore.environment", severity="info", source=SOURCE,
                    message="Megatron-Core checks that depend on this machine's libraries (not the config) were "
                            f"skipped: {'; '.join(skipped)}")]


class _Refusal(NamedTuple):
    text: str
    machine: bool  # depends on this machine's libraries, not on the config
    site: tuple  # where it was raised: (file, line) of each frame, which tells one check from another


def same_fault(cls, kw: dict[str, Any], refusal: _Refusal) -> tuple[str, ...]:
    """The rules (_SAME_FAULT) whose change gets Megatron-Core past the check that raised `refusal`."""
    out = []
    for rule, change in _SAME_FAULT.items():
        changed = {k: v for k, v in change(kw).items() if kw.get(k) != v}
        # a copy: __post_init__ may append to the config's lists (cuda_graph_scope), and each try starts from kw
        if changed and getattr(_construct(cls, copy.deepcopy({**kw, **changed})), "site", None) != refusal.site:
            out.append(rule)
    return tuple(out)


def _construct(cls, kw: dict[str, Any]) -> _Refusal | None:
    """None when Megatron-Core accepts ``kw``; else its refusal.
    Transformer Engine version gates (is_te_min_version) are answered as if a current TE were installed:
    they are facts about the training machine, not about the config."""
    import sys
    from unittest import mock

    module = sys.modules[cls.__module__]
    gate = mock.patch.object(module, "is_te_min_version", lambda *a, **k: True) \
        if hasattr(module, "is_te_min_version") else contextlib.nullcontext()
    try:
        with warnings.catch_warnings(), gate:
            warnings.simplefilter("ignore")
            cls(**dict(kw))
    except (ValueError, AssertionError, TypeError, ImportError, RuntimeError, KeyError, ZeroDivisionError) as err:
        text = " ".join(str(err).split()) or type(err).__name__
        site = tuple((frame.f_code.co_filename, line) for frame, line in traceback.walk_tb(err.__traceback__))
        return _Refusal(text, isinstance(err, ImportError) or bool(_ENVIRONMENT.search(text)), site)
    return None
