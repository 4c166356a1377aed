"""Environment variables a layout needs, each with the reason, on top of the user's own ``env.*``."""

from __future__ import annotations

from typing import Any

from moetune.rules.derive import derive
from moetune.specs.hardware import spans_nodes


def tp_cp_need_one_connection(d: dict[str, Any]) -> bool:
    """TP/CP > 1 without EP overlap or an FSDP before Blackwell: TP/CP kernels overlap GEMMs only through one hardware
    queue (Megatron-LM asserts CUDA_DEVICE_MAX_CONNECTIONS=1 there, arguments.py validate_args; Bridge sets it,
    scripts/performance/utils/overrides.py). Either FSDP asserts the opposite, whatever the layout (Megatron-LM
    arguments.py:622-623 and :687-688 @core_v0.16.0; Bridge training/config.py for Megatron FSDP), and validate_args
    only warns about TP/CP beside it (:930-937), so an FSDP run never gets 1."""
    return d.get("arch") != "blackwell" and (d["tp"] > 1 or d["cp"] > 1) and not d["ep_overlap"] and not d["fsdp"]


def op_fuser_fuses_glu(config: dict[str, Any], d: dict[str, Any]) -> bool:
    """The TE op fuser over TE grouped GLU experts (TEGroupedMLP, experts.py @core_v0.19.0), which Megatron-Core fuses
    only under NVTE_CUTEDSL_FUSED_GROUPED_MLP > 0."""
    return bool(config.get("model.use_transformer_engine_op_fuser") and d.get("is_moe")
                and config.get("model.moe_grouped_gemm") and config.get("model.gated_linear_unit")
                and config.get("model.transformer_impl", "transformer_engine") == "transformer_engine")


# Variables a GPU's own recipes set, whatever the layout: Megatron Bridge's B300 perf recipes (perf_recipes/*/b300/,
# and scripts/performance/perf_plugins.py since "b300_regression_fix_rel2606", PR #4431, for NeMo 26.06)
GPU_ENV: dict[str, dict[str, tuple[Any, str]]] = {
    "b300": {"NCCL_IGNORE_CPU_AFFINITY": (1, "B300: NCCL ignores the launcher's CPU binding, as Megatron Bridge's "
                                             "B300 recipes set (its 26.06 regression fix)")},
}


def environment(config: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """NAME -> (value, why). Values the config already sets (env.*) are kept as given."""
    d = derive(config)
    out: dict[str, tuple[Any, str]] = dict(GPU_ENV.get(d.get("gpu_key"), {}))
    domain = d.get("nvlink_domain")
    if d.get("flex_backend") == "hybridep" and domain:
        # Megatron-Bridge scripts/performance/utils/utils.py apply_target_topology_environment.
        out["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"] = (
            d["hybridep_ranks_per_domain"],
            f"HybridEP: min(EP={d['ep']}, the job's NVLink domain={d.get('job_nvlink_domain', domain)})")
        out["NVLINK_DOMAIN_SIZE"] = (domain, "HybridEP topology: GPUs in one NVLink domain")
        out["USE_MNNVL"] = (int(spans_nodes(domain, d.get("gpus_per_node", domain))), "1 on multi-node NVLink (NVL72)")
    # Megatron-Bridge scripts/performance/utils/overrides.py, in its order: 32 on Blackwell; else 1 when TP/CP
    # communication must overlap GEMMs without MoE overlap (Megatron-LM asserts it, arguments.py validate_args),
    # whatever the dispatcher; else 32 with DeepEP/HybridEP; else 8.
    if d.get("arch") == "blackwell":
        conns, why = 32, "Blackwell: many concurrent streams"
    elif tp_cp_need_one_connection(d):
        conns, why = 1, "TP/CP kernels queue behind GEMMs only with one hardware connection"
    elif d.get("flex_backend") in ("deepep", "hybridep"):
        conns, why = 32, "DeepEP/HybridEP: many concurrent streams"
    else:
        conns, why = 8, "default for this layout"
    out["CUDA_DEVICE_MAX_CONNECTIONS"] = (conns, why)
    if d.get("ep_overlap"):
        # TE's LayerNorm kernels leave SMs free for the all-to-all beside them: 20 in Bridge's overlapped perf recipes
        # (perf_recipes/deepseek/b200/deepseek_v3.py), 24 in Megatron-MoE-ModelZoo when A2A_OVERLAP=1
        # (sbatch_benchmarking.sh)
        for name in ("NVTE_FWD_LAYERNORM_SM_MARGIN", "NVTE_BWD_LAYERNORM_SM_MARGIN"):
            out[name] = (20, "EP overlap: SMs left to the all-to-all beside LayerNorm")
    if config.get("model.fine_grained_activation_offloading"):
        # Transformer Engine >= 2.10 offloads weights too unless told not to: Megatron-LM asserts the variable
        # (training/arguments.py) and Megatron Bridge raises without it (training/config.py)
        out["NVTE_CPU_OFFLOAD_V1"] = (1, "fine-grained activation offloading with Transformer Engine >= 2.10")
    if op_fuser_fuses_glu(config, d):
        # Megatron-Core core_v0.19.0 on fuses a GLU expert only through TE's CuTe DSL kernel (rule env.op_fuser_cutedsl)
        out["NVTE_CUTEDSL_FUSED_GROUPED_MLP"] = (1, "the TE op fuser over GLU experts (TE's CuTe DSL grouped MLP)")
    for key, value in config.items():
        name = key[len("env."):]
        # a planned config carries the values this derives (to_config writes them, so that check's env rules read
        # them); one it holds at the derived value keeps the reason, any other is the user's
        if key.startswith("env.") and out.get(name, (None,))[0] != value:
            out[name] = (value, "given")
    return dict(sorted(out.items()))
