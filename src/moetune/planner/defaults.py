"""Platform defaults for knobs the user leaves out (data/platform_defaults.toml)."""

from moetune.errors import UnsupportedPrecision
from moetune.layout.layout import Layout
from moetune.layout.ranks import hybridep_spans_on
from moetune.planner.knob_fields import DISPATCHER, PRECISION
from moetune.specs.hardware import GpuSpec
from moetune.specs.platform import deepep_runs, platform_defaults, spanning_backend


def default_precision(gpu: GpuSpec) -> str:
    """The platform's recipe, or BF16 on a GPU without its Tensor Core format (a cluster file's fp8_tflops = 0):
    plan searches BF16 alone there, and a default the GPU refuses would be an error the user did not make."""
    recipe = platform_defaults(gpu)["precision"]
    try:
        gpu.peak_tflops(recipe)
    except UnsupportedPrecision:
        return "bf16"
    return recipe


def default_dispatcher_and_why(gpu: GpuSpec, layout: Layout) -> tuple[str, str | None]:
    """The dispatcher a knob left out takes on this layout, and why it is not the platform's (None where it is):
    explain names the reason beside the default, so a user is not left wondering why a GB200 run shows alltoall."""
    platform = platform_defaults(gpu)["dispatcher"]
    spans = hybridep_spans_on(gpu, layout.world_size, layout.ep, layout.etp)
    runs = spanning_backend(platform, layout.ep, spans, deepep_runs(gpu)) or "alltoall"
    if runs == platform:
        return runs, None
    if layout.ep == 1:
        return runs, f"at EP 1, no all-to-all to accelerate; the platform's is {platform}"
    return runs, f"{platform} cannot span EP {layout.ep} past the job's NVLink domain (rule " \
                 "dispatcher.hybridep_ep_exceeds_domain)"


def default_dispatcher(gpu: GpuSpec, layout: Layout) -> str:
    """The default that runs on this layout, not the platform's alone: alltoall at EP 1, where nothing is left to
    accelerate, and where no flex backend spans the EP group (default_dispatcher_and_why)."""
    return default_dispatcher_and_why(gpu, layout)[0]


def with_mamba(spec, scope: tuple[str, ...]) -> tuple[str, ...]:
    """A TE graph scope with a hybrid's Mamba mixers captured too, as every Nemotron-3 Nano recipe does
    (published_runs.csv: attn mamba moe_router moe_preprocess); an empty scope (eager) stays empty."""
    if spec.mamba is None or not scope or "mamba" in scope or "full_iteration" in scope:
        return scope
    return ("attn", "mamba") + tuple(x for x in scope if x != "attn")


def default_scope(spec, gpu: GpuSpec) -> tuple[str, ...]:
    """The CUDA-graph scope a knob left out takes for this model on this platform."""
    return with_mamba(spec, tuple(platform_defaults(gpu)["cuda_graph_scope"]))


def mapping_rules(defaults: dict, mamba: bool, narrowed: list[str] = ()) -> dict:
    """The seed rule each default mapping comes from (data/platform_defaults.toml), a hybrid's Mamba scope included,
    and the cudagraph rules that narrow the scope for this model (`narrowed`: DeepSeek Sparse Attention's)."""
    graphs = defaults["cuda_graph_scope_source"] + ("; a hybrid's Mamba mixers captured too, as every Nemotron-3 "
                                                    "Nano recipe runs them (data/published_runs.csv)" if mamba else "")
    if narrowed:
        graphs += f"; narrowed to what this model's layers capture (rule {', '.join(narrowed)})"
    return {"dispatcher": defaults["dispatcher_source"], "fp8_recipe": defaults["precision_source"],
            "cuda_graph_scope": graphs}


def mapping_fields(dispatcher: str, precision: str, scope: tuple[str, ...]) -> dict:
    """The default mappings as Megatron Bridge spells them (planner/knob_fields.py, as plan's overrides write them)."""
    kind, backend = DISPATCHER[dispatcher]
    return {"model.moe_token_dispatcher_type": kind,
            **({"model.moe_flex_dispatcher_backend": backend} if backend else {}),
            **{k: v for k, v in PRECISION[precision].items() if v is not None},
            "model.cuda_graph_impl": "transformer_engine" if scope else "none",
            **({"model.cuda_graph_scope": list(scope)} if scope else {})}
