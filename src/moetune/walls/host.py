"""The host wall: the CPU work of issuing a layer's kernels, what CUDA-graph scopes capture of it, and how long the
GPU waits for the host beside its own work (step.layer_time uses these per layer)."""

from moetune.specs.model import LayerKind

# Host CPU work of a layer by part, as shares of a standard attention + MoE layer (host_us_per_layer covers
# one such layer). Hybrid stacks (Nemotron-H) split a block into mixer-only and MLP-only layers, so each of
# their layers costs only its part. Our estimates from the modules' kernel counts: no published breakdown.
PART_SHARE = {"mixer": 0.45, "moe": 0.55, "dense": 0.3}
# CUDA-graph scope -> (the part it captures, share of that part's launches). TE-scoped graphs (seeds/000
# "CUDA Graphs For MoE"): attn and mamba capture their mixer, mlp the dense MLP, moe the whole MoE block,
# moe_router and moe_preprocess 15% of it each (router GEMM + top-k + aux loss; permutation metadata and token
# counts), while the dispatch and the per-expert grouped-GEMM launches stay eager. Our estimate was a quarter each
# from kernel counts; the published host-bound runs say less: of 0.27, 0.15 and 0.08 each, 0.15 and 0.08 put 112 of
# the 123 complete runs within 15% against 110 (Qwen3-30B-A3B eager on H100, R011, and with these two graphs on B200,
# R028/R046, need one host cost), and 0.15 is the nearer to the kernel count. full_iteration captures the whole step
# (0.95: the optimizer step and logging stay eager).
GRAPH_CAPTURE = {"attn": ("attention", 0.9), "mamba": ("mamba", 0.9), "mlp": ("dense", 0.9), "moe": ("moe", 0.8),
                 "moe_router": ("moe", 0.15), "moe_preprocess": ("moe", 0.15)}
FULL_ITERATION_CAPTURE = 0.95


def layer_cpu_share(kind: LayerKind, scopes: tuple[str, ...]) -> float:
    """Host CPU work of one layer of this kind left eager under these graph scopes, in standard layers."""
    if "full_iteration" in scopes:
        scopes, left = (), 1 - FULL_ITERATION_CAPTURE
    else:
        left = 1.0
    # a gated delta-net layer is a TransformerLayer whose self_attention is the GatedDeltaNet (Megatron-Core
    # experimental_attention_variant_module_specs.py), which the attn scope captures (transformer_layer.py
    # _get_submodules_under_cudagraphs: self.self_attention); Mamba layers have a scope of their own
    mixer = {"gqa": "attention", "mla": "attention", "gdn": "attention"}.get(kind.mixer, kind.mixer)
    parts = {p: PART_SHARE[key] for p, key in ((mixer, "mixer"), (kind.mlp, kind.mlp)) if p != "none"}
    for scope in scopes:
        part, share = GRAPH_CAPTURE.get(scope, ("", 0.0))
        if part in parts:
            parts[part] *= 1 - share
    return left * sum(parts.values())


# A layer takes the 4-norm of its CPU and GPU times: a smooth maximum. Near the knee the two overlap
# imperfectly (a host sync each MoE layer, launch jitter), so GPU work still shows partly (19% above the
# max when they are equal); far from it the larger wins. 4 is a modelling choice, not a fitted constant:
# of 2, 4 and the hard maximum it gave the lowest held-out error (`moetune calibrate`) while keeping the
# measured order of EP overlap, graph scopes and recompute sets on host-heavy small-model runs.
HOST_NORM = 4.0


def host_wait(cpu, gpu_s):
    """Seconds the GPU waits for the host beside `gpu_s` of its own work (the HOST_NORM smooth maximum)."""
    return (cpu ** HOST_NORM + gpu_s ** HOST_NORM) ** (1 / HOST_NORM) - gpu_s
