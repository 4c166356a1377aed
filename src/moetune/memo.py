"""A bounded memo for the functions the planner asks again, with the same arrays, for every knob set of a layout batch
(the CP exchange of a layer, the fused all-to-all's copy counts, a group's members inside one NVLink domain)."""

import numpy as np


def array_key(x) -> object:
    """A hashable stand-in for a scalar or an array argument: its shape and bytes."""
    if isinstance(x, np.ndarray):
        return x.shape, x.dtype.str, x.tobytes()
    return x


_ABSENT = object()  # what remembered's lookup finds where the key is not stored (None may be a stored answer)


def remembered(store: dict, key: tuple, compute, limit: int):
    """store[key], computing it with compute() the first time (nothing is stored where it raises); the store is
    emptied past `limit` entries. Arrays in the result are made read-only: every later caller shares them. The key is
    looked up once where it is stored: a key holding knobs hashes each of their fields every time it is hashed."""
    out = store.get(key, _ABSENT)
    if out is _ABSENT:
        if len(store) > limit:
            store.clear()
        out = compute()
        for x in out if isinstance(out, tuple) else (out,):
            if isinstance(x, np.ndarray):
                x.flags.writeable = False
        store[key] = out
    return out


STAGES_HELD = 4096  # entries an inner memo of remembered_stages keeps (a bound: each re-split move adds a few)


def remembered_stages(store: dict, key: tuple, compute, limit: int):
    """remembered(), for an entry of inner memos by pipeline stage (walls/step.py, memory.py, rank_params.py: a layout's
    stages by what each holds, under a key of all else they read), each dict of it emptied past STAGES_HELD entries."""
    entry = remembered(store, key, compute, limit)
    for inner in entry if isinstance(entry, tuple) else (entry,):
        if isinstance(inner, dict) and len(inner) > STAGES_HELD:
            inner.clear()
    return entry
