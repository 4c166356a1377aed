"""The platform family a GPU belongs to and its knob defaults (data/platform_defaults.toml): the one statement of
which dispatcher, FP8 recipe and CUDA-graph scope the seeds start each platform on, read by the planner's defaults
and by the rules' recommended backend alike."""

from functools import cache

from moetune.files import shipped_toml
from moetune.specs.hardware import GpuSpec


@cache
def _table() -> dict:
    return shipped_toml("platform_defaults.toml")


# Grace-Blackwell superchips: Megatron Bridge runs DeepEP only on GPUs named B200/B300 among Blackwells
# (training/flex_dispatcher_backend.py apply_flex_dispatcher_backend), so these take HybridEP whatever NVLink domain a
# cluster file gives them.
GRACE_BLACKWELL = ("gb200", "gb300")
NVL72_PLATFORM = "blackwell-nvl72"  # the seeds' NVL72 row (data/platform_defaults.toml)


def platform_of(gpu: GpuSpec) -> str:
    """The platform family: Blackwell on a rack-scale NVLink domain (or a Grace-Blackwell) is the seeds' NVL72 row,
    an architecture without a row starts where A100 does (safe bring-up)."""
    if gpu.arch == "blackwell" and (gpu.rack_scale or gpu.key in GRACE_BLACKWELL):
        return NVL72_PLATFORM
    return gpu.arch if gpu.arch in _table() else "ampere"


def on_nvl72(gpu: GpuSpec) -> bool:
    """Whether the GPU is on the seeds' NVL72 row (platform_of): diagnose's gpu.nvl72 fact reads it too."""
    return platform_of(gpu) == NVL72_PLATFORM


def platform_defaults(gpu: GpuSpec) -> dict:
    """{knob: value} plus 'source' for this GPU's platform."""
    return dict(_table()[platform_of(gpu)])


def deepep_runs(gpu: GpuSpec) -> bool:
    """Whether Megatron Bridge runs DeepEP on this GPU: Ampere, Hopper and Blackwell but the Grace-Blackwell superchips
    (training/flex_dispatcher_backend.py apply_flex_dispatcher_backend: B200/B300 only among Blackwells)."""
    return gpu.arch in ("ampere", "hopper") or (gpu.arch == "blackwell" and gpu.key not in GRACE_BLACKWELL)


def hybridep_runs(gpu: GpuSpec) -> bool:
    """Whether HybridEP runs on this GPU: NVIDIA's sm80, sm90 and sm100 (training/flex_dispatcher_backend.py)."""
    return gpu.arch in ("ampere", "hopper", "blackwell")


def spanning_backend(backend: str | None, ep: int, hybridep_spans: bool, deepep: bool) -> str | None:
    """The flex backend to run this EP group with, from the platform's (`backend`), or None where alltoall is the one
    to run: at EP 1 (no all-to-all to accelerate), on a platform without a flex default, and where HybridEP does not
    span the group (`hybridep_spans`, layout/ranks.py: past the job's domain on a rack, where Bridge refuses it) and
    DeepEP does not run (`deepep`, deepep_runs: not on Grace-Blackwell; a B200 cluster file with a rack-scale domain
    takes DeepEP there). One place decides it for the knob defaults (planner/defaults.py) and the rules' recommended
    backend (rules/derive.py)."""
    if ep == 1 or backend in (None, "alltoall"):
        return None
    if backend == "hybridep" and not hybridep_spans:
        return "deepep" if deepep else None
    return backend
