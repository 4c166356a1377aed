"""The parallel sizes a dotted config (configio's normalized form: `model.tensor_model_parallel_size`, ...) sets, read
where both configio and profile need them; layout sits below both (tests/test_layering.py)."""

import math
from typing import Any

ATTENTION_MESH = ("model.tensor_model_parallel_size", "model.context_parallel_size",
                  "model.pipeline_model_parallel_size")


def parallel_size(config: dict[str, Any], key: str, *, zero_is_one: bool = True) -> int:
    """A parallel size as the config sets it, Megatron's 1 where it is silent. zero_is_one: a 0 reads as 1 too
    (data_parallel_size divides by it); configio's Layout reader passes False, leaving a 0 for Layout to refuse in one
    line. A normalized config holds neither a 0 nor a non-integer (configio normalize.AT_LEAST_ONE, types._int)."""
    value = config.get(key)
    return 1 if value is None or zero_is_one and not value else int(value)


def data_parallel_size(config: dict[str, Any]) -> int | None:
    """world / (TP x CP x PP), or None where the world is unknown or the attention mesh does not tile it."""
    world = config.get("cluster.num_gpus")
    attn = math.prod(parallel_size(config, key) for key in ATTENTION_MESH)
    return int(world) // attn if world and int(world) % attn == 0 else None
