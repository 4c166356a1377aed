"""Megatron's memory reports in a training log (profile/megatron_log.py reads them with the rest), and the
``key: value`` pairs its lines are made of.

Formats mirrored: Megatron-LM megatron/training/utils ``report_memory`` (MiB = 2**20 bytes): ``[Rank 0] (after 10
iterations) memory (MB) | allocated: ... | max allocated: ... | reserved: ... | max reserved: ...``; Megatron Bridge
train_utils ``report_memory`` (GB = 1e9 bytes, keys from torch.cuda.memory_stats renamed by MEMORY_KEYS): ``...
memory (GB) | mem-max-reserved-gigabytes: 71.3 | mem-alloc-retires: 0 | ...`` (sic: "retires" is how Bridge spells
it).
"""

import math
import re
from dataclasses import dataclass

from moetune.errors import MoetuneError

MEM = re.compile(r"\[Rank (\d{1,9})\]\s*\(after (\d{1,12}) iterations\)\s*memory \((MB|GB)\)\s*\|(.*)$")
NUM = re.compile(r"^[-+]?\d+(\.\d*)?([eE][-+]?\d+)?$")
# Memory report keys -> our names; MB keys from Megatron-LM, *-gigabytes keys from Megatron Bridge.
MEM_KEYS = {
    "allocated": "allocated", "max allocated": "max_allocated", "reserved": "reserved",
    "max reserved": "max_reserved", "mem-allocated-gigabytes": "allocated",
    "mem-max-allocated-gigabytes": "max_allocated", "mem-reserved-gigabytes": "reserved",
    "mem-max-reserved-gigabytes": "max_reserved", "mem-alloc-retires": "alloc_retries",
    "mem-alloc-retries": "alloc_retries",
}
UNIT_BYTES = {"MB": 2**20, "GB": 1e9}


@dataclass(kw_only=True, slots=True)
class MemoryReport:
    rank: int
    after_iteration: int
    allocated_bytes: float | None
    max_allocated_bytes: float | None
    reserved_bytes: float | None
    max_reserved_bytes: float | None
    alloc_retries: int | None


def pairs(text: str) -> dict[str, float | str]:
    """A log line's `` | ``-separated ``key: value`` pairs (iteration lines and memory reports alike), a value that
    reads as a number as a float."""
    out: dict[str, float | str] = {}
    for part in text.split("|"):
        key, sep, value = part.partition(":")
        if sep:
            value = value.strip()
            out[key.strip()] = float(value) if NUM.match(value) else value
    return out


def memory_report(m: re.Match, where: str = "memory report") -> MemoryReport:
    unit = UNIT_BYTES[m.group(3)]
    vals = {MEM_KEYS[k]: v for k, v in pairs(m.group(4)).items() if k in MEM_KEYS and isinstance(v, float)}
    bad = next((k for k, v in vals.items() if not (math.isfinite(v) and v >= 0)), None)
    if bad:  # a byte count or retry count below 0 or past a float is no measurement
        raise MoetuneError(f"{where}: {bad} ({vals[bad]:g}) must be a finite number >= 0; pass the log as Megatron "
                           "wrote it")

    def size(key: str) -> float | None:
        return vals[key] * unit if key in vals else None

    retries = vals.get("alloc_retries")
    return MemoryReport(
        rank=int(m.group(1)), after_iteration=int(m.group(2)), allocated_bytes=size("allocated"),
        max_allocated_bytes=size("max_allocated"), reserved_bytes=size("reserved"),
        max_reserved_bytes=size("max_reserved"), alloc_retries=int(retries) if retries is not None else None,
    )
