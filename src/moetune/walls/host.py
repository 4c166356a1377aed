"""The host wall: the CPU work of issuing a layer's kernels, what CUDA-graph scopes capture of it, and how long the
GPU waits for the host beside its own work (layer_time.layer_time uses these per layer)."""

from moetune.specs.model import LayerKind

# CUDA-graph scope -> the part of a layer whose launches it captures (TE-scoped graphs, seeds/000 "CUDA Graphs For
# MoE"): attn and mamba their mixer, mlp the dense MLP, moe the whole MoE block, moe_router and moe_preprocess a share
# of it each while the dispatch and the per-expert grouped-GEMM launches stay eager. The share each scope captures
# (efficiency.toml graph_capture_<scope>) and each part's share of a layer's CPU work (host_part_<part>) are constants
# of the model, named with the others in efficiency.toml.
GRAPH_PART = {"attn": "attention", "mamba": "mamba", "mlp": "dense", "moe": "moe", "moe_router": "moe",
              "moe_preprocess": "moe"}


def layer_cpu_share(kind: LayerKind, scopes: tuple[str, ...], eff: dict) -> float:
    """Host CPU work of one layer of this kind left eager under these graph scopes, in standard layers."""
    if "full_iteration" in scopes:
        scopes, left = (), 1 - eff["graph_capture_full_iteration"]
    else:
        left = 1.0
    # a gated delta-net layer is a TransformerLayer whose self_attention is the GatedDeltaNet (Megatron-Core
    # experimental_attention_variant_module_specs.py), which the attn scope captures (transformer_layer.py
    # _get_submodules_under_cudagraphs: self.self_attention); Mamba layers have a scope of their own
    mixer = {"gqa": "attention", "mla": "attention", "gdn": "attention"}.get(kind.mixer, kind.mixer)
    parts = {p: eff[f"host_part_{key}"] for p, key in ((mixer, "mixer"), (kind.mlp, kind.mlp)) if p != "none"}
    for scope in scopes:
        part = GRAPH_PART.get(scope, "")
        if part in parts:
            parts[part] *= 1 - eff[f"graph_capture_{scope}"]
    return left * sum(parts.values())


def host_wait(cpu, gpu_s, norm: float):
    """Seconds the GPU waits for the host beside `gpu_s` of its own work: the NORM-norm of the two, a smooth maximum
    (efficiency.toml host_norm), less the GPU's own time."""
    return (cpu ** norm + gpu_s ** norm) ** (1 / norm) - gpu_s
