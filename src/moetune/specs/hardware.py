"""GPUs and clusters: the catalog in moetune/data/hardware.toml, or a user's own TOML file.

A cluster file looks like::

    gpu = "h100"            # a catalog name, or a [gpu] table with every GpuSpec field (another GPU: it is
                            # modelled with the fitted constants of its architecture's catalog GPU, FAMILY_KEY)
    gpus_per_node = 8       # optional overrides of the catalog's figures
    nvlink_domain = 8
    nic_gbps = 400
"""

import math
import re
import tomllib
from dataclasses import dataclass, fields, replace
from functools import cache, lru_cache
from pathlib import Path

from moetune.errors import MoetuneError, UnsupportedPrecision
from moetune.files import read_toml, shipped_text
from moetune.units import GIB
from moetune.words import closest

BLACKWELL_ONLY = ("mxfp8", "nvfp4")
WHOLE = ("nvlink_domain", "gpus_per_node", "gemm_tile", "sms")  # counts, not rates
OPTIONAL = {"host_memory_gib", "nic_gbps_observed", "sms"}  # a [gpu] table may leave these out
# Figures whose 0 says "no such format" or "no figure" (the optional ones' 0: unknown, not checked)
NO_FORMAT = ("fp8_tflops", "fp4_tflops", "tdp_w")
ZERO_IS_NONE = (*NO_FORMAT, *sorted(OPTIONAL))
# Ceilings a cluster file's figures must stay under, about 10x the catalog's largest (hardware.toml: 278 GiB, an NVL72
# domain, 15,000 TFLOP/s dense FP4, NVLink 5 at 900 GB/s a direction, 800 Gb/s NICs): room for parts to come, none for
# a figure typed with a digit too many.
UPPER = {"memory_gib": 4096, "nvlink_domain": 1152, "gpus_per_node": 1152, "bf16_tflops": 50_000, "fp8_tflops": 100_000,
         "fp4_tflops": 200_000, "hbm_tbps": 100, "nvlink_gbps": 20_000, "nic_gbps": 20_000, "host_memory_gib": 65_536}
# Floors, about a tenth of the catalog's smallest (hardware.toml: 78 GiB, H20's 148 TFLOP/s, A100's 2.0 TB/s HBM and
# 300 GB/s NVLink, 200 Gb/s NICs, a 32 GB/s host link): room for older or smaller parts, none for a figure in another
# unit (nic_gbps = 0.4 meaning Tb/s, hbm_tbps = 3350 meaning GB/s is the ceiling's) or a fraction typed for a whole
LOWER = {"memory_gib": 8, "bf16_tflops": 10, "hbm_tbps": 0.2, "nvlink_gbps": 10, "nic_gbps": 10, "host_link_gbps": 2}
ARCHS = ("ampere", "hopper", "blackwell")  # what the model has constants and rules for
# Architectures a [gpu] table may name without fitted constants: earlier NVIDIA ones and AMD CDNA parts
PRIOR_ARCHS = ("volta", "turing", "ada", "cdna2", "cdna3", "cdna4")
# A GPU described by a [gpu] table takes the fitted constants, rules and defaults of the catalog GPU of its
# architecture (by key): the file's name says nothing about the hardware. An NVL72-class Blackwell domain takes
# GB200's (its HybridEP constants), any other Blackwell B200's.
FAMILY_KEY = {"ampere": "a100", "hopper": "h100", "blackwell": "b200"}
NVL72_KEY, NVL72_DOMAIN = "gb200", 36  # an NVLink domain this wide is a rack (NVL36/NVL72): rack_scale_domain


def rack_scale_domain(nvlink_domain: int) -> bool:
    """Whether an NVLink domain this wide is a rack (NVL36/NVL72): the one answer to "is this GPU on rack-scale
    NVLink?" that the platform family (specs/platform.py platform_of, the seeds' NVL72 row), HybridEP's reach (Megatron
    Bridge keeps it inside such a domain: layout/ranks.py hybridep_spans), the search's note on it and a [gpu] table's
    family (_family) all read. Whether a domain holds several nodes is another question (spans_nodes): a 16-GPU domain
    of 8-GPU nodes does, and is no rack."""
    return nvlink_domain >= NVL72_DOMAIN


def spans_nodes(nvlink_domain: int, gpus_per_node: int) -> bool:
    """Whether one NVLink domain holds several nodes (multi-node NVLink, Bridge's USE_MNNVL): what the rank arithmetic
    of a job's domain turns on (layout/ranks.py job_nvlink_domain, job_gpu), whether or not the domain is a rack."""
    return nvlink_domain > gpus_per_node


@dataclass(kw_only=True, slots=True, frozen=True)
class GpuSpec:
    key: str  # catalog short name, e.g. "h100"
    name: str
    arch: str  # ampere | hopper | blackwell
    bf16_tflops: float  # dense peak
    fp8_tflops: float  # dense peak, 0 if unsupported
    fp4_tflops: float  # dense peak, 0 if unsupported
    memory_gib: float  # device memory a process sees
    hbm_tbps: float
    nvlink_gbps: float  # per GPU, per direction (GB/s)
    nvlink_domain: int  # GPUs reachable over NVLink
    gpus_per_node: int
    nic_gbps: float  # scale-out per GPU, Gb/s
    host_link_gbps: float  # GPU <-> host memory per direction, GB/s (PCIe or NVLink-C2C)
    gemm_tile: int  # rows of a GEMM output tile (weight dimensions round up to it: tile quantization)
    tdp_w: float
    # host memory per GPU (the node's, or a Grace's, divided among its GPUs), GiB; 0: unknown, not checked. What the
    # optimizer's CPU offload keeps there must fit in it (model_state.offloaded_host_bytes)
    host_memory_gib: float = 0.0
    # scale-out Gb/s a GPU the published runs of this GPU read as, where it is below the datasheet's nic_gbps (0: none
    # below it); the track record prices a run whose traffic crosses nodes at it too (planner/track_record.py)
    nic_gbps_observed: float = 0.0
    # streaming multiprocessors the device reports (cudaDeviceProp.multiProcessorCount, a Kineto trace's numSms); 0:
    # unknown, not checked. Parts of one architecture differ in it (H20 78, H100 132): diagnose tells them apart by it
    sms: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            value, whole = getattr(self, f.name), f.name in WHOLE
            if f.type in (float, int) and (isinstance(value, bool) or not isinstance(value, int | float)
                                                or not math.isfinite(value) or (whole and value != int(value))):
                kind = "whole number" if whole else "finite number"
                raise MoetuneError(f"gpu '{self.key}': {f.name} ({value!r}) must be a {kind}")

        for name in ("bf16_tflops", "memory_gib", "hbm_tbps", "nvlink_gbps", "nvlink_domain", "gpus_per_node",
                     "nic_gbps", "host_link_gbps", "gemm_tile"):
            if getattr(self, name) <= 0:
                raise MoetuneError(f"gpu '{self.key}': {name} ({getattr(self, name)}) must be positive")
        for name, most in UPPER.items():  # a typo's digits (memory_gib = 1e9) would plan on hardware no one has
            if getattr(self, name) > most:
                raise MoetuneError(f"gpu '{self.key}': {name} ({getattr(self, name):,g}) is past the {most:,} moetune "
                                   "plans for: lower it (a digit too many?)")
        for name in NO_FORMAT:  # 0: the GPU has no such format (or no figure)
            if getattr(self, name) < 0:
                raise MoetuneError(f"gpu '{self.key}': {name} ({getattr(self, name)}) must be 0 or more")
        if not isinstance(self.name, str) or not isinstance(self.arch, str):
            raise MoetuneError(f"gpu '{self.key}': name and arch must be text")
        domain, node = self.nvlink_domain, self.gpus_per_node
        if (domain % node if domain >= node else node % domain) != 0:
            raise MoetuneError(f"gpu '{self.key}': nvlink_domain ({domain}) and gpus_per_node ({node}) must divide one "
                               "another: a domain is whole nodes (NVL72: 18 of 4) or a node holds whole domains")
        if not 0 <= self.nic_gbps_observed <= self.nic_gbps:
            raise MoetuneError(f"gpu '{self.key}': nic_gbps_observed ({self.nic_gbps_observed}) must be between 0 "
                               f"(none) and nic_gbps ({self.nic_gbps})")
        if self.sms < 0:
            raise MoetuneError(f"gpu '{self.key}': sms ({self.sms}) must be positive (or 0: unknown, not checked)")
        if self.host_memory_gib < 0:
            raise MoetuneError(f"gpu '{self.key}': host_memory_gib ({self.host_memory_gib}) must be positive (or 0: "
                               "unknown, not checked)")


    @property
    def rack_scale(self) -> bool:
        """The GPU's NVLink domain is a rack (NVL36/NVL72): rack_scale_domain."""
        return rack_scale_domain(self.nvlink_domain)

    @property
    def ref(self) -> str:
        """What load_gpu takes back: the cluster file it came from, else its catalog name."""
        return self.source if self.source.endswith(".toml") else self.key

    @property
    def capacity_bytes(self) -> int:
        return int(self.memory_gib * GIB)

    @property
    def host_capacity_bytes(self) -> int | None:
        """Host memory a GPU's rank may fill, or None where the catalog does not know it."""
        return int(self.host_memory_gib * GIB) if self.host_memory_gib > 0 else None

    def peak_tflops(self, precision: str) -> float:
        """Dense peak for the GEMM precision; FP8 recipes use the FP8 rate, NVFP4 the FP4 rate."""
        if precision in BLACKWELL_ONLY and self.arch != "blackwell":
            instead = "fp8-blockwise" if self.fp8_tflops > 0 else "bf16 (it has no FP8 Tensor Cores)"
            raise UnsupportedPrecision(f"--precision {precision} needs a Blackwell GPU (MXFP8/NVFP4 block scaling is a "
                               f"Blackwell Tensor Core feature); {self.name} is {self.arch}: use {instead}")
        if precision == "bf16":
            return self.bf16_tflops
        rate = self.fp4_tflops if precision == "nvfp4" else self.fp8_tflops
        if rate <= 0:
            raise UnsupportedPrecision(f"{self.name} has no {precision} Tensor Core rate; use --precision bf16")
        return rate


@cache
def catalog() -> dict[str, GpuSpec]:
    text = shipped_text("hardware.toml")
    return {key: GpuSpec(key=key, **row) for key, row in tomllib.loads(text).items()}


# A product's model number in a device or catalog name (moetune's reading of NVIDIA's device names, as the shared
# traces' deviceProperties and the catalog spell them): "NVIDIA H100 80GB HBM3" -> h100, "NVIDIA GB200" -> gb200,
# "NVIDIA H20-3e" -> h20, "A100 80GB SXM4" -> a100; not a board code inside a word ("A100-PG509-200" -> a100)
_MODEL = re.compile(r"(?<![A-Za-z0-9])(G?[A-Za-z]\d{2,3})(?![0-9])")


def model_of(name: str | None) -> str | None:
    """The model number a GPU name carries, in lower case (the catalog's keys are its parts' model numbers)."""
    m = _MODEL.search(name or "")
    return m.group(1).lower() if m else None


def load_gpu(name_or_path: str) -> GpuSpec:
    """A catalog name (h100, gb200, ...) or a path to a cluster TOML file."""
    key = name_or_path.lower()
    if key in catalog():
        return catalog()[key]
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        return load_cluster_file(path)
    raise MoetuneError(f"unknown GPU '{name_or_path}': use one of {', '.join(catalog())}, or describe it in a cluster "
                       ".toml file: gpu = \"<the nearest of them>\" with the fields that differ (memory_gib = ...), "
                       "or a [gpu] table of every field (`moetune hardware b200 --json` lists them)")


def _family(table: dict, path: Path) -> str:
    """The catalog key a [gpu] table's GPU is modelled as (FAMILY_KEY); its own name stays in `name`. Another
    architecture (an AMD CDNA part) has no fitted constants: it runs on the [default] priors of efficiency.toml under
    the file's name, and the rules treat it as the platform it is. A name that is a catalog GPU's (an MI300X table
    in h100.toml) takes the architecture beside it: under the bare name it ran on H100's fitted constants and showed
    H100's published runs as its track record."""
    arch = table.get("arch")
    if arch not in ARCHS:
        if arch not in PRIOR_ARCHS:
            raise MoetuneError(f"{path}: arch ({arch!r}) must be one of {', '.join(ARCHS)} (fitted constants) or "
                               f"{', '.join(PRIOR_ARCHS)} (run on the priors of efficiency.toml), in lower case")
        return f"{path.stem}-{arch}" if path.stem.lower() in catalog() else path.stem
    domain = table.get("nvlink_domain", 0)
    return NVL72_KEY if arch == "blackwell" and isinstance(domain, int | float) and rack_scale_domain(domain) \
        else FAMILY_KEY[arch]


def load_cluster_file(path: Path) -> GpuSpec:
    """A cluster file's GPU, parsed once per version of the file: config_gpu asks it of every knob set a plan checks
    (139 reads in one 256-GPU plan) and of each step of emit and diagnose. The key is the path as given (a [gpu]
    table's family reads its stem) and resolved, with the file's inode, mtime and size, so an edited or replaced
    file is read again; GpuSpec is frozen, so no caller can change the copy the cache hands the next one."""
    try:
        stat = path.stat()
    except OSError:  # missing or unreadable: the read names it in one line
        return _parse_cluster_file(path)
    return _cached_cluster_file(path, path.resolve(), stat.st_ino, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=32)
def _cached_cluster_file(path: Path, _resolved: Path, *_version: int) -> GpuSpec:
    return _parse_cluster_file(path)


def _floors_kept(gpu: GpuSpec) -> GpuSpec:
    """GPU, where a cluster file's figures stay over LOWER: one in another unit (nic_gbps = 0.4 meaning Tb/s) would plan
    a machine a thousand times slow. Read at the file only: a plan's memory budget (the GPU less --headroom) may be
    small."""
    for name, least in LOWER.items():
        if getattr(gpu, name) < least:
            raise MoetuneError(f"gpu '{gpu.key}': {name} ({getattr(gpu, name):,g}) is under the {least:g} moetune "
                               "plans for: check its unit (GB/s, Gb/s, TB/s, GiB as hardware.toml has it)")
    return gpu


def _with_likely(unknown: list[str], known: set[str]) -> list[str]:
    """Each unknown field, with the known one it is likely a misspelling of: 'hbm_tbs (hbm_tbps?)'."""
    return [f"{u} ({m}?)" if (m := closest(u, known)) else u for u in unknown]


def _parse_cluster_file(path: Path) -> GpuSpec:
    data = read_toml(path, "cluster file")
    base = data.pop("gpu", None)
    if isinstance(base, str):
        if base.lower() not in catalog():
            raise MoetuneError(f"{path}: gpu = '{base}' is not in the catalog ({', '.join(catalog())})")
        gpu = catalog()[base.lower()]
    elif isinstance(base, dict):
        known = {f.name for f in fields(GpuSpec)} - {"key", "source"}
        missing, unknown = sorted(known - set(base) - OPTIONAL), sorted(set(base) - known)
        if missing or unknown:  # a typo is both: its unknown spelling said first, with the field it likely means
            said = [f"has unknown field(s) {', '.join(_with_likely(unknown, known))}"] if unknown else []
            raise MoetuneError(f"{path}: [gpu] table " + "; ".join(said + ([f"is missing {', '.join(missing)}"]
                                                                            if missing else []))
                               + f"; its fields: {', '.join(sorted(known))}")
        gpu = GpuSpec(key=_family(base, path), source=str(path), **base)
    else:
        raise MoetuneError(f"{path}: set gpu = \"h100\" (a catalog name) or a [gpu] table")
    if isinstance(base, str) and data.get("arch", gpu.arch) != gpu.arch:  # an H100 stays a Hopper GPU
        raise MoetuneError(f"{path}: arch ({data['arch']!r}) differs from {gpu.name}'s ({gpu.arch}); describe another "
                           "GPU with a [gpu] table of every field instead of gpu = \"name\"")
    allowed = {f.name for f in fields(GpuSpec)} - {"key", "source"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise MoetuneError(f"{path}: unknown field(s) {', '.join(_with_likely(unknown, allowed))}; allowed: "
                           f"{', '.join(sorted(allowed))}")
    if "nic_gbps" in data and "nic_gbps_observed" not in data:  # the file's own fabric: the catalog's reading is not
        data = {**data, "nic_gbps_observed": 0.0}  # of it (B300's published runs read 400 of the datasheet's 800)
    try:
        return _floors_kept(replace(gpu, source=str(path.resolve()), **node_domain(gpu, data)))  # absolute path
    except (TypeError, MoetuneError) as err:
        raise MoetuneError(f"{path}: {err}") from None


def node_domain(gpu: GpuSpec, data: dict) -> dict:
    """A cluster file's (or a config's) gpus_per_node is its NVLink domain too where the catalog GPU's domain is one
    node (HGX boards: NVLink stops at the node) and it names no domain of its own: an H100 file of 4-GPU nodes had
    kept the catalog's 8, and EP 8 ran over two nodes at NVLink speed. An NVL72-class domain spans nodes and stays."""
    node = data.get("gpus_per_node")
    if "nvlink_domain" in data or gpu.nvlink_domain != gpu.gpus_per_node or not isinstance(node, int) or node < 1:
        return data
    return {**data, "nvlink_domain": node}


def modelled_on(gpu: GpuSpec) -> str | None:
    """The catalog GPU whose fitted constants and published runs stand for a cluster file's GPU of its own name (a
    [gpu] table: _family gives it the catalog key, its name stays the file's), or None: a catalog GPU, a file that
    keeps one's name (gpu = "h100" with overrides), or an architecture with no fitted constants (the file's key)."""
    shipped = catalog().get(gpu.key)
    return gpu.key if shipped is not None and gpu.name != shipped.name else None


def catalog_unchanged(gpu: GpuSpec) -> bool:
    """The catalog GPU of its key with none of its figures changed (a cluster file may give gpu = "h100" alone, a
    config its own NVLink domain)."""
    shipped = catalog().get(gpu.key)
    return shipped is not None and replace(gpu, source=shipped.source) == shipped
