"""The traces' GPU against the GPU a run is priced on (--gpu, or a compared plan's).

An architecture names a family, not a part: an H20 and an H100 are both Hopper (compute capability 9.0), but the H20
has 78 SMs to the H100's 132 and a seventh of its BF16 rate, so an H100 trace diagnosed as ``--gpu h20`` (or a plan for
one GPU compared with traces of the other) prices every prediction and capacity on the wrong part. Kineto writes the
device's name, SM count and memory in ``deviceProperties`` (libkineto CudaDeviceProperties.cpp); a name that names
another catalog GPU, or an SM count the catalog's GPU does not have, is another part: refused with the fix, unless
--force-gpu. Memory alone is a note: one part ships in several memory sizes (the A100 40 GB and 80 GB).
"""

from collections.abc import Sequence

from moetune.errors import MoetuneError
from moetune.profile.rank_trace import RankTrace
from moetune.profile.walls import arch
from moetune.specs.hardware import GpuSpec, catalog, model_of
from moetune.specs.platform import platform_of
from moetune.units import GIB

# A trace's device memory this far from the GPU's (either way) is another memory size: the catalog's memory_gib is
# what a process sees, within 2% of totalGlobalMem on the parts it lists (78 GiB against an 80 GB part's 79.15).
# 10% is moetune's tolerance, five times that gap and well inside the step to the nearest other size of a part
# (A100 40 vs 80 GB, H100 80 vs H200 141)
MEMORY_SLACK = 1.10


def _same_arch(recorded: RankTrace | None, gpu: GpuSpec, force: bool) -> None:
    """--gpu names the GPU the run used: the first trace that records a compute capability (``recorded``), of another
    architecture, is another machine's, which --force-gpu (another part of the traced architecture) does not force."""
    if recorded is not None and arch(recorded.compute_capability) != gpu.arch:
        forced = "; --force-gpu forces another part of the traced architecture, not another architecture" * force
        raise MoetuneError(f"--gpu {gpu.key} is {gpu.arch} but {recorded.path} ran on {recorded.device_name} "
                           f"({arch(recorded.compute_capability)}, compute capability "
                           f"{'.'.join(map(str, recorded.compute_capability))}){forced}; drop --gpu or pass the run's "
                           "GPU")


def _sms(count: int | None) -> str:
    return f" ({count} SMs)" if count else ""


def _other_part(t: RankTrace, gpu: GpuSpec, who: str, force: bool) -> str | None:
    """The line saying the traced GPU is another part than ``gpu``: its name names another catalog GPU, or its SM
    count is not the GPU's (both known); None where neither. Refused with the fix unless ``force``."""
    traced, ours = model_of(t.device_name), model_of(gpu.name) or gpu.key
    named = traced in catalog() and traced != ours
    if not named and not (t.device_sms and gpu.sms and t.device_sms != gpu.sms):
        return None
    line = f"{t.path} ran on {t.device_name}{_sms(t.device_sms)} but {who} is {gpu.name}{_sms(gpu.sms)}"
    if force:
        return f"{line}: priced as {gpu.name} all the same (--force-gpu)"
    target = f"--gpu {traced}" if named else (f"--gpu a cluster .toml describing it (gpu = \"{gpu.key}\", sms = "
                                              f"{t.device_sms} and the figures that differ)")
    fix = f"pass {target}" if who.startswith("--gpu") else f"compare a plan made with {target}"
    raise MoetuneError(f"{line}, another part (its own speeds, which the prediction would not have): {fix}, or "
                       f"--force-gpu to price it as {gpu.name} all the same")


def _other_name(t: RankTrace, gpu: GpuSpec, who: str) -> str | None:
    """A traced GPU the catalog lacks (an H800 as --gpu h100): the same SMs, but its own links and clocks."""
    traced = model_of(t.device_name)
    if traced is None or traced in catalog() or traced == (model_of(gpu.name) or gpu.key):
        return None
    return (f"{t.path} ran on {t.device_name}, which the catalog lacks: priced as {gpu.name} ({who}); a cluster .toml "
            "with its own figures prices it as itself")


def _other_memory(t: RankTrace, gpu: GpuSpec, who: str) -> str | None:
    """A memory size other than the GPU's (an A100 40 GB as --gpu a100, the 80 GB part): a note, not a refusal."""
    mem = t.device_memory_bytes
    if not mem or 1 / MEMORY_SLACK <= mem / gpu.capacity_bytes <= MEMORY_SLACK:
        return None
    return (f"{t.path} ran on {t.device_name} with {mem / GIB:.1f} GiB of memory but {who} is {gpu.name} with "
            f"{gpu.memory_gib:g} GiB, which memory is counted against (a cluster .toml with gpu = \"{gpu.key}\" and "
            f"memory_gib = {mem / GIB:.0f} counts the traced GPU's)")


def _other_platform(traces: Sequence[RankTrace], gpu: GpuSpec, notes: list[str]) -> list[str]:
    """notes, saying where the catalog GPU the traced device names is on another platform (specs/platform.py
    platform_of) than --gpu: a B200 trace as a cluster file's 72-GPU NVLink domain, a GB200 trace as --gpu b200
    --force-gpu. The advice is --gpu's platform's (profile/walls.py _platform_gpu): a device name names a part, not its
    NVLink domain or the variant the user means. Said in the note on the part where there is one, so once."""
    t = next((t for t in traces if t.device_name), None)
    traced = catalog().get(model_of(t.device_name)) if t is not None else None
    if traced is None or platform_of(traced) == platform_of(gpu):
        return notes
    said = (f"advised on --gpu {gpu.ref}'s platform ({platform_of(gpu)}), not the {platform_of(traced)} the "
            f"catalog's {traced.key} is on")
    if notes and notes[0].startswith(f"{t.path} ran on "):
        return [f"{notes[0]}; {said}", *notes[1:]]
    return [f"{t.path} ran on {t.device_name}: {said}", *notes]


def _part_notes(traces: Sequence[RankTrace], gpu: GpuSpec, who: str, force: bool) -> list[str]:
    """What differs between the traced GPU (the first trace that records one; _same_run made them agree) and ``gpu``
    of the same architecture, as notes; another part is one error line unless ``force``."""
    t = next((t for t in traces if t.device_name or t.device_sms), None)
    if t is None:
        return []
    lines = (_other_part(t, gpu, who, force), _other_name(t, gpu, who), _other_memory(t, gpu, who))
    return [line for line in lines if line]


def gpu_notes(traces: Sequence[RankTrace], gpu: GpuSpec | None, priced_on: GpuSpec | None = None,
              force: bool = False) -> list[str]:
    """--gpu (``gpu``) and a compared prediction's GPU (``priced_on``) against the traces': another architecture than
    --gpu's, or another part than either, is one error line (another part a note with ``force``); a prediction of
    another architecture is planner/compare.same_run's to name."""
    notes: list[str] = []
    recorded = next((t for t in traces if t.compute_capability is not None), None)
    if gpu is not None:
        _same_arch(recorded, gpu, force)
        notes = _other_platform(traces, gpu, _part_notes(traces, gpu, f"--gpu {gpu.ref}", force))
    cc = recorded.compute_capability if recorded is not None else None
    if priced_on is not None and priced_on != gpu and priced_on.arch == arch(cc):
        notes += _part_notes(traces, priced_on, f"--plan's GPU {priced_on.ref}", force)
    return notes
