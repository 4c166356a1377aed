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


def mixer_part(mixer: str) -> str:
    """The GRAPH_PART name of a layer's token mixer (LayerKind.mixer). A gated delta-net layer is a TransformerLayer
    whose self_attention is the GatedDeltaNet (Megatron-Core experimental_attention_variant_module_specs.py), which the
    attn scope captures (transformer_layer.py _get_submodules_under_cudagraphs: self.self_attention); Mamba layers have
    a scope of their own."""
    return "attention" if mixer in ("gqa", "mla", "gdn") else mixer


def scope_captures(kinds, scopes: tuple[str, ...]) -> bool:
    """Whether these graph scopes capture any part of a layer of these kinds. Megatron-Core graphs a layer only where
    the scope names a module it has (transformer/cuda_graphs.py _layer_is_graphable @core_v0.19.0: mamba a MambaLayer,
    attn a layer with self-attention, mlp a dense MLP, moe/moe_router/moe_preprocess a MoELayer), so `mamba` on a
    model without Mamba layers, or `mlp` on one whose every layer is MoE, captures nothing; a full-iteration graph
    captures the whole step."""
    if "full_iteration" in scopes:
        return True
    parts = {p for kind in kinds for p in (mixer_part(kind.mixer), kind.mlp)}
    return any(GRAPH_PART.get(scope) in parts for scope in scopes)


def layer_cpu_share(kind: LayerKind, scopes: tuple[str, ...], eff: dict) -> float:
    """Host CPU work of one layer of this kind left eager under these graph scopes, in standard layers."""
    if "full_iteration" in scopes:
        scopes, left = (), 1 - eff["graph_capture_full_iteration"]
    else:
        left = 1.0
    parts = {p: eff[f"host_part_{key}"] for p, key in ((mixer_part(kind.mixer), "mixer"), (kind.mlp, kind.mlp))
             if p != "none"}
    for scope in scopes:
        part = GRAPH_PART.get(scope, "")
        if part in parts:
            parts[part] *= 1 - eff[f"graph_capture_{scope}"]
    return left * sum(parts.values())


def host_wait(cpu, gpu_s, norm: float):
    """Seconds the GPU waits for the host beside `gpu_s` of its own work: the NORM-norm of the two, a smooth maximum
    (efficiency.toml host_norm), less the GPU's own time."""
    return (cpu ** norm + gpu_s ** norm) ** (1 / norm) - gpu_s
