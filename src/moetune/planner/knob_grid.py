"""The knob sets the planner crosses every legal layout with (enumerate.py): precision x dispatcher x recompute x
CUDA-graph scope x EP overlap x optimizer offload, pins honoured. Knobs that only save time in the step model
(delayed wgrad with EP overlap, the MXFP8 LM head, TP comm overlap) ride along with what they need rather than
doubling the search.
"""

from itertools import product

from moetune.errors import MoetuneError
from moetune.layout.knobs import FP8_OUTPUT_PROJ_PRECISION, Knobs
from moetune.layout.modules import unsaved_offloads
from moetune.planner.defaults import with_mamba
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import ModelSpec
from moetune.specs.platform import deepep_runs, hybridep_runs


def recompute_sets(spec: ModelSpec) -> list[tuple[str, frozenset[str]]]:
    """none, the useful selective sets for this model (seeds/000 Phase 1: selective before full), full."""
    moe = spec.num_moe_layers > 0
    sets = [frozenset({"moe_act"}) if moe else frozenset({"mlp"}),
            frozenset({"layernorm", "moe_act"}) if moe else frozenset({"layernorm", "mlp"})]
    if spec.mla:
        sets.append(frozenset({"mla_up_proj", "moe_act", "layernorm"}))
    if spec.moe_shared_expert_intermediate_size:
        sets.append(frozenset({"shared_experts", "moe_act", "layernorm"}))
    if spec.num_dense_layers and moe:
        sets.append(frozenset({"mlp", "moe_act", "layernorm"}))
    if moe:
        sets.append(frozenset({"moe", "layernorm"}))
    return [("none", frozenset())] + [("selective", s) for s in sets] + [("full", frozenset())]


def supported_dispatchers(gpu: GpuSpec) -> list[str]:
    """alltoall everywhere; DeepEP / HybridEP where Megatron Bridge accepts them on this GPU (specs/platform.py:
    flex_dispatcher_backend.py validate_flex_dispatcher_backend)."""
    return ["alltoall"] + ["deepep"] * deepep_runs(gpu) + ["hybridep"] * hybridep_runs(gpu)


def _delay_wgrad(ep_overlap: bool, fixed: dict) -> bool:
    """delay_wgrad_compute rides along with EP overlap (seeds/003 Enablement: "delayed wgrad for additional
    overlap"); it only adds hidden time in the step model, so it is paired rather than searched, and a result keeps it
    only where it saves time (ranking.without_idle_delay_wgrad). Where the rule table refuses it (attention CUDA
    graphs on biased attention), planner/legal.py drops it again."""
    return ep_overlap and fixed.get("delay_wgrad", True)


def _fp8_output_proj(precision: str, fixed: dict) -> bool:
    """The LM head under MXFP8 wherever the recipe is MXFP8, as Megatron Bridge's tuned GB200/GB300 DeepSeek-V3 and
    gpt-oss recipes set it (perf_recipes/deepseek/common.py, gpt_oss/common.py); it only saves time in the step model,
    so it is paired with the precision, not searched; --fix fp8_output_proj=false keeps the head in BF16."""
    return precision == FP8_OUTPUT_PROJ_PRECISION and fixed.get("fp8_output_proj", True)


NO_USERBUFFERS = ("fp8-blockwise", "nvfp4")  # rules.yaml overlap.tp_comm_quantizer


def _tp_comm_overlap(precision: str, fixed: dict) -> bool:
    """tp_comm_overlap (seeds/000 Dispatcher And Overlap Guidance: --tp-comm-overlap) rides along wherever Transformer
    Engine's Userbuffers take the recipe's GEMM inputs (rules.yaml overlap.tp_comm_quantizer: not blockwise FP8 or
    NVFP4). It only hides TP time in the step model and costs its buffers in memory (memory.userbuffer_bytes), so it is
    paired rather than searched; a result on TP 1 carries it off, as Megatron Bridge turns it off there. --fix
    tp_comm_overlap=false keeps it off."""
    return precision not in NO_USERBUFFERS and fixed.get("tp_comm_overlap", True)


def _precisions(defaults: dict, fixed: dict) -> list[str]:
    """BF16 and the platform's FP8 recipe, or the pinned ones; with tp_comm_overlap pinned on, only those whose inputs
    Userbuffers take."""
    precisions = fixed.get("precision", sorted({"bf16", defaults["precision"]}))
    if fixed.get("fp8_output_proj") is True:  # the LM head under MXFP8 needs an MXFP8 recipe (Knobs)
        precisions = [p for p in precisions if p == FP8_OUTPUT_PROJ_PRECISION]
        if not precisions:
            raise MoetuneError(f"--fix fp8_output_proj=true: the LM head runs in {FP8_OUTPUT_PROJ_PRECISION} only "
                               f"under an {FP8_OUTPUT_PROJ_PRECISION} recipe, on Blackwell; drop the pin or pin "
                               f"precision={FP8_OUTPUT_PROJ_PRECISION} on a Blackwell GPU")
    if fixed.get("tp_comm_overlap") is True:
        precisions = [p for p in precisions if p not in NO_USERBUFFERS]
        if not precisions:
            raise MoetuneError("--fix tp_comm_overlap=true: Transformer Engine's Userbuffers take no blockwise-FP8 or "
                               "NVFP4 inputs (rule overlap.tp_comm_quantizer); pin precision=bf16, fp8-current, "
                               "fp8-delayed or mxfp8, or drop the tp_comm_overlap pin")
    return precisions


TE_SCOPED = ("attn", "moe_router", "moe_preprocess")  # seeds/000: the graph scope for dropless MoE


def knob_grid(spec: ModelSpec, gpu: GpuSpec, defaults: dict, fixed: dict, routing: str,
              token_imbalance: float | None = None) -> list[Knobs]:
    """Precision x dispatcher x recompute x CUDA-graph scope x EP overlap (with delay_wgrad) x optimizer offload,
    each under the routing and dropless factor given (None: the default, layout/imbalance.py).
    Fine-grained activation offloading is searched only when pinned (--fix offload_modules=...): the seeds put
    offloading last, and each offload set would double the search."""
    precisions = _precisions(defaults, fixed)
    dispatchers = fixed.get("dispatcher", supported_dispatchers(gpu))
    # TE-scoped graphs are searched on every platform: one that defaults to none (A100's safe bring-up) runs them too
    scoped = with_mamba(spec, tuple(defaults["cuda_graph_scope"]) or TE_SCOPED)
    scopes = fixed.get("cuda_graph_scope", [(), scoped] + ([("full_iteration",)] if routing == "force-balance" else []))
    overlaps = fixed.get("ep_overlap", [False, True])
    if fixed.get("delay_wgrad") is True:  # Megatron-Core asserts EP overlap with it (planner/pins.py)
        overlaps = [o for o in overlaps if o]
    offloads = fixed.get("optimizer_offload_fraction", [0.0, 1.0])  # search.plan pins it to 0 under Muon
    recomputes = recompute_sets(spec)
    if "recompute_modules" in fixed:
        recomputes = [("selective", fixed["recompute_modules"])]
    elif "recompute" in fixed:
        recomputes = [r for r in recomputes if r[0] == fixed["recompute"]]
    grid = []
    for prec, disp, (rc, mods), scope, ov, off in product(precisions, dispatchers, recomputes, scopes, overlaps,
                                                          offloads):
        if ov and rc == "full" or unsaved_offloads(rc, mods, fixed.get("offload_modules", ())):
            continue  # seeds/003: full recompute is not a companion for the EP-overlap path
        grid.append(Knobs(precision=prec, dispatcher=disp, recompute=rc, recompute_modules=mods,
                          cuda_graph_scope=scope, ep_overlap=ov, delay_wgrad=_delay_wgrad(ov, fixed),
                          routing=routing, token_imbalance=token_imbalance, optimizer_offload_fraction=off,
                          optimizer=fixed.get("optimizer", "adam"),
                          main_grads_fp32=fixed.get("main_grads_fp32", True),
                          overlap_grad_reduce=fixed.get("overlap_grad_reduce", True),
                          overlap_param_gather=fixed.get("overlap_param_gather", True),
                          offload_modules=fixed.get("offload_modules", frozenset()),
                          megatron_fsdp=fixed.get("megatron_fsdp"),
                          fp8_output_proj=_fp8_output_proj(prec, fixed),
                          tp_comm_overlap=_tp_comm_overlap(prec, fixed),
                          # each layout's CP exchange is the legal one that costs least (walls/context_parallel.py)
                          cp_comm_type=fixed.get("cp_comm_type", "auto")))
    return grid
