"""The run's GPU as a config states it: `cluster.gpu` (a catalog name or a cluster file) with the config's own
cluster.nvlink_domain / cluster.gpus_per_node over it, so check's rules and estimate price the same machine."""

from dataclasses import replace
from typing import Any

from moetune.errors import MoetuneError
from moetune.specs.hardware import GpuSpec, load_gpu, node_domain

OVERRIDDEN = ("nvlink_domain", "gpus_per_node")


def config_gpu(config: dict[str, Any]) -> GpuSpec:
    """The GPU of `config` (which names cluster.gpu); GpuSpec refuses, in one line, an override whose NVLink domain
    is not whole nodes."""
    gpu = load_gpu(str(config["cluster.gpu"]))
    given = {k: int(config[f"cluster.{k}"]) for k in OVERRIDDEN if config.get(f"cluster.{k}") is not None}
    given = node_domain(gpu, given)  # an HGX node's NVLink stops at the node, as a cluster file's does
    changed = {k: v for k, v in given.items() if getattr(gpu, k) != v}
    try:
        return replace(gpu, **changed) if changed else gpu
    except MoetuneError as err:  # name the setting the user gave, not only the GPU it changed
        raise MoetuneError(f"{' '.join(f'cluster.{k}={v}' for k, v in changed.items())}: {err}") from None
