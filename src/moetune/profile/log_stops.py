"""How a training log says its run stopped (profile/megatron_log.py reads them): an out-of-memory error, a hung
collective, a crash; and the prefix torchrun puts before a rank's lines."""

import re

# PyTorch's allocator message, and the CUDA runtime's own (what NCCL, cuBLAS or a dispatcher's buffer allocation raise)
OOM = re.compile(r"CUDA out of memory|OutOfMemoryError:|CUDA error: out of memory", re.IGNORECASE)
# How a hung collective says so: PyTorch's NCCL watchdog (c10d ProcessGroupNCCL.cpp "Watchdog caught collective
# operation timeout: WorkNCCL(SeqNum=..., OpType=ALLTOALL_BASE, ... Timeout(ms)=600000)"), then an abort on every rank:
# the root cause of the lines after it, which a stop note quotes first
HANG = re.compile(r"Watchdog caught collective operation timeout|collective operation timeout|"
                  r"NCCL (?:communicator|watchdog).*(?:timeout|timed out)", re.IGNORECASE)
# How a crashed job says so in its stdout: a Python exception's last line (torch.distributed.DistBackendError, an
# NCCL "unhandled system error"), torchrun's ChildFailedError, Slurm's "srun: error", a signal
FAILURE = re.compile(r"^\S*(Error|Exception)(: |$)|ChildFailedError|NCCL error|srun: error|Segmentation fault|"
                     r"\bKilled\b|CANCELLED|terminate called after throwing|SIGABRT|" + HANG.pattern, re.IGNORECASE)
# The GPU's whole memory as PyTorch's allocator states it on running out (c10/cuda/CUDACachingAllocator.cpp malloc:
# "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.02 GiB is free.",
# cudaMemGetInfo's total; older releases "(GPU 0; 79.15 GiB total capacity; ...)"), its size in format_size's units:
# two decimals of bytes, KiB, MiB or GiB (powers of 1024)
CAPACITY = re.compile(r"GPU \d+ has a total capacity of (\d+(?:\.\d+)?) (bytes|KiB|MiB|GiB)\b|"
                      r"GPU \d+; (\d+(?:\.\d+)?) (bytes|KiB|MiB|GiB) total capacity")
_SIZE = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
# the "[rank5]: " torchrun puts before each line of a rank's output (its Python errors included)
RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:\s*")

WATCHDOG = {"op": re.compile(r"OpType=(\w+)"), "group": re.compile(r"PG GUID \d+\(([^)]+)\)"),
             "ms": re.compile(r"Timeout\(ms\)=(\d+)"), "rank": re.compile(r"\bRank (\d+)\]")}


def hang_words(line: str) -> str | None:
    """A watchdog timeout line in words ('NCCL watchdog timeout: ALLTOALL_BASE on EXPERT_MODEL_PARALLEL_GROUP after
    600 s, rank 3'), where it is one and names its collective; its own text runs past what a note quotes."""
    if not HANG.search(line) or not (op := WATCHDOG["op"].search(line)):
        return None
    found = {k: m.group(1) for k, r in WATCHDOG.items() if (m := r.search(line))}
    group = f" on {found['group']}" if "group" in found else ""
    after = f" after {int(found['ms']) / 1000:g} s" if "ms" in found else ""
    rank = f", rank {found['rank']}" if "rank" in found else ""
    return f"NCCL watchdog timeout: {op.group(1)}{group}{after}{rank}"


def oom_words(lines: list[str]) -> str:
    """' and ran out of memory (its OOM line)' for a launch passed over, "" where it printed no OOM."""
    oom = next((x.strip()[:200] for x in lines if OOM.search(x)), None)
    return f" and ran out of memory ({oom})" if oom else ""


def stated_capacity(lines: list[str], start: int, end: int | None) -> tuple[int | None, float | None]:
    """(line number from 1, the GPU's total memory in bytes) from the first OOM message that states it (CAPACITY)
    among the figures' run's lines (lines[start:end]), else the log's (a launch passed over ran on the job's GPUs
    too); (None, None) where none does."""
    for i in [*range(len(lines))[start:end], *range(len(lines))]:
        if "capacity" in lines[i] and OOM.search(lines[i]) and (m := CAPACITY.search(lines[i])):  # cheap test first
            size, unit = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            if float(size) > 0:
                return i + 1, float(size) * _SIZE[unit]
    return None, None
