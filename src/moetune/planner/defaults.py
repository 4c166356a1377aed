"""Platform defaults for knobs the user leaves out (data/platform_defaults.toml)."""

import tomllib
from functools import cache
from importlib import resources

from moetune.errors import UnsupportedPrecision
from moetune.layout.ranks import hybridep_spans, job_nvlink_domain
from moetune.specs.hardware import NVL72_DOMAIN, GpuSpec


@cache
def _table() -> dict:
    return tomllib.loads((resources.files("moetune") / "data" / "platform_defaults.toml").read_text())


# Grace-Blackwell superchips: Megatron Bridge runs DeepEP only on GPUs named B200/B300 among Blackwells
# (training/flex_dispatcher_backend.py apply_flex_dispatcher_backend), so these take HybridEP whatever NVLink domain a
# cluster file gives them.
GRACE_BLACKWELL = ("gb200", "gb300")


def platform_of(gpu: GpuSpec) -> str:
    if gpu.arch == "blackwell" and (gpu.nvlink_domain >= NVL72_DOMAIN or gpu.key in GRACE_BLACKWELL):
        return "blackwell-nvl72"
    return gpu.arch if gpu.arch in _table() else "ampere"


def platform_defaults(gpu: GpuSpec) -> dict:
    """{knob: value} plus 'source' for this GPU's platform."""
    return dict(_table()[platform_of(gpu)])


def default_precision(gpu: GpuSpec) -> str:
    """The platform's recipe, or BF16 on a GPU without its Tensor Core format (a cluster file's fp8_tflops = 0):
    plan searches BF16 alone there, and a default the GPU refuses would be an error the user did not make."""
    recipe = platform_defaults(gpu)["precision"]
    try:
        gpu.peak_tflops(recipe)
    except UnsupportedPrecision:
        return "bf16"
    return recipe


def default_dispatcher(gpu: GpuSpec, ep: int, etp: int = 1, world: int | None = None) -> str:
    """The dispatcher a knob left out takes: the platform's where experts spread over EP ranks, alltoall at EP 1
    (no all-to-all to accelerate) and where the platform's HybridEP cannot span the EP group (past the job's NVLink
    domain on NVL72: Bridge refuses HybridEP beyond the 72-rank rack and runs DeepEP on no Grace-Blackwell; rule
    dispatcher.hybridep_ep_exceeds_domain)."""
    backend = platform_defaults(gpu)["dispatcher"]
    if backend == "hybridep" and world is not None and not hybridep_spans(
            ep, etp, gpu.nvlink_domain, job_nvlink_domain(world, gpu.gpus_per_node, gpu.nvlink_domain)):
        return "alltoall"
    return backend if ep > 1 else "alltoall"


def with_mamba(spec, scope: tuple[str, ...]) -> tuple[str, ...]:
    """A TE graph scope with a hybrid's Mamba mixers captured too, as every Nemotron-3 Nano recipe does
    (published_runs.csv: attn mamba moe_router moe_preprocess); an empty scope (eager) stays empty."""
    if spec.mamba is None or not scope or "mamba" in scope or "full_iteration" in scope:
        return scope
    return ("attn", "mamba") + tuple(x for x in scope if x != "attn")


def default_scope(spec, gpu: GpuSpec) -> tuple[str, ...]:
    """The CUDA-graph scope a knob left out takes for this model on this platform."""
    return with_mamba(spec, tuple(platform_defaults(gpu)["cuda_graph_scope"]))
