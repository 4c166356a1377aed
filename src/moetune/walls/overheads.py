"""What a rank holds beside its model and activations: the CUDA context, NCCL and dispatcher buffers, the CUDA-graph
pool, and the allocator's fragmentation, as memory_overheads.toml gives them (with where each comes from) and a user's
--overheads file overrides them, checked key by key."""

import math
from functools import cache

from moetune.errors import MoetuneError
from moetune.files import shipped_toml
from moetune.layout.knobs import Knobs
from moetune.units import GIB
from moetune.walls.host import scope_captures


@cache
def default_overheads() -> dict[str, float]:
    return shipped_toml("memory_overheads.toml")


MAX_OVERHEAD_GIB = 1e6  # a PiB: more than any GPU or node holds


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past a float's range
        return False


def check_overheads(user: dict, where: str = "overheads") -> dict[str, float]:
    """A user's overhead figures, each a known key of memory_overheads.toml holding a number: GiB >= 0, or the
    fragmentation fraction in [0, 1); anything else is one error line naming the key (`where`: the file)."""
    known = default_overheads()
    for key, value in user.items():
        if key not in known:
            what = "a section" if isinstance(value, dict) else "unknown key"
            raise MoetuneError(f"{where}: {what} '{key}'; the file holds flat keys, one of {', '.join(known)}")
        number = isinstance(value, int | float) and not isinstance(value, bool) and _finite(value)
        high = 1.0 if key == "fragmentation_fraction" else MAX_OVERHEAD_GIB  # past it, byte counts overflow
        if not number or not 0 <= value < high:
            span = "in [0, 1)" if high == 1.0 else f"in [0, {MAX_OVERHEAD_GIB:g}) (GiB)"
            raise MoetuneError(f"{where}: {key} = {value!r} must be a number {span}")
    return user


def merged_overheads(user: dict | None) -> dict[str, float]:
    """memory_overheads.toml with a user's --overheads figures on top."""
    return {**default_overheads(), **check_overheads(user or {})}


def overhead_bytes(knobs: Knobs, overheads: dict[str, float], kinds) -> dict[str, int]:
    """The overheads a rank holds under these knobs, for a model of these layer kinds (ModelSpec.layer_kinds): the
    graph pool only where the scope captures some layer (host.scope_captures; its static buffers are per captured
    layer, memory_overheads.toml), as the host wall credits only what a scope captures."""
    items = {"cuda_context": overheads["cuda_context_gib"], "nccl_buffers": overheads["nccl_gib"]}
    if knobs.dispatcher in ("deepep", "hybridep"):
        items[f"{knobs.dispatcher}_buffers"] = overheads[f"{knobs.dispatcher}_buffer_gib"]
    if knobs.cuda_graph_scope and scope_captures(kinds, knobs.cuda_graph_scope):
        full = "full_iteration" in knobs.cuda_graph_scope
        items["cuda_graph_pool"] = overheads["cuda_graph_full_gib" if full else "cuda_graph_partial_gib"]
    return {k: round(v * GIB) for k, v in items.items()}
