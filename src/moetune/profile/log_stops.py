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
