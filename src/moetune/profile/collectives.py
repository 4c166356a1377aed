"""Name the collective behind an NCCL kernel that does not say which one it is.

Older PyTorch traces carry no ``Collective name`` on NCCL kernels, and NCCL runs all-to-all as
grouped send/recv (``ncclKernel_SendRecv_*``), so by name alone an EP all-to-all looks like
pipeline point-to-point. The CPU side knows: the kernel's launch call (same ``correlation``) happens
inside the c10d operator that issued it (``c10d::alltoall_base_``, ``c10d::_reduce_scatter_base_``,
``nccl:all_to_all``; torch/csrc/distributed/c10d/Ops.cpp and ProcessGroupNCCL's record_function
names). We take the innermost such operator on the launching thread.
"""

from bisect import bisect_right

from moetune.profile.kernels import classify


def _index(collective_ops: list[tuple]) -> dict[object, tuple[list[float], list[tuple]]]:
    by_tid: dict[object, list[tuple]] = {}
    for op in collective_ops:
        by_tid.setdefault(op[0], []).append(op)
    return {tid: ([o[1] for o in ops], ops) for tid, ops in ((t, sorted(v, key=lambda o: o[1]))
                                                            for t, v in by_tid.items())}


def _enclosing(index: dict, tid: object, ts: float) -> str | None:
    starts, ops = index.get(tid, ([], []))
    for i in range(bisect_right(starts, ts) - 1, -1, -1):  # latest start first = innermost
        _, start, end, what = ops[i]
        if start <= ts <= end:
            return what
        if ts - start > 60e6:  # no collective op lasts a minute; stop scanning back
            return None
    return None


def attribute(ops: list, launches: dict[int, float], launch_tid: dict[int, object], collective_ops: list) -> int:
    """Reclassify communication ops whose kernel args lack a collective name; returns how many."""
    if not collective_ops:
        return 0
    index = _index(collective_ops)
    changed = 0
    for op in ops:
        sig = op.signature
        if sig is None or sig[1] != "None" or op.correlation not in launches:
            continue
        what = _enclosing(index, launch_tid.get(op.correlation), launches[op.correlation])
        if what is None:
            continue
        op.cls = classify(sig[0], "kernel", what)
        op.signature = (sig[0], what, *sig[2:])
        changed += 1
    return changed
