"""What the training engine takes, from a normalized config: Bridge overrides, Megatron-LM arguments,
environment variables and torchrun / Slurm launch scripts."""

from __future__ import annotations

import textwrap
from typing import Any

from moetune.configio.release_context import target
from moetune.configio.written_for import other_releases, written_for
from moetune.emit.bridge import bridge_config, dotted_overrides, python_snippet
from moetune.emit.launch import env_sh, numa_bind_sh, run_planned_py, sbatch_sh, torchrun_sh
from moetune.emit.mlm import megatron_lm_args
from moetune.rules.derive import derive

FILES = ("bridge_overrides.py", "run_planned.py", "overrides.txt", "megatron_lm_args.txt", "env.sh", "torchrun.sh",
         "numa_bind.sh", "sbatch.sh")


def describe(config: dict[str, Any]) -> str:
    """One line naming the layout, for file headers."""
    d = derive(config)
    vpp = f" VPP{d['vpp']}" if d.get("vpp") else ""
    gpu = config.get("cluster.gpu", "?")
    return (f"moetune emit: {config.get('cluster.num_gpus', '?')} x {gpu}; attention TP{d['tp']} x CP{d['cp']} x "
            f"DP{d.get('data_parallel_size', '?')} x PP{d['pp']}{vpp}; experts ETP{d['etp']} x EP{d['ep']} x "
            f"EDP{d.get('expert_data_parallel_size', '?')} x PP{d['pp']}")


# Megatron-Core runs moe_router_force_load_balancing on random router logits, "only for benchmark"
# (transformer_config.py:812-814, router.py:856-858 @core_v0.19.0): files that carry it say so first
BENCHMARK = ("BENCHMARK launch (moetune emit --benchmark): force-balanced routing (moe_router_force_load_balancing)",
             "routes tokens by random router logits, Megatron-Core's benchmark-only setting: measure throughput with",
             "these files, never train from them.")


def force_balanced(config: dict[str, Any]) -> bool:
    return bool(config.get("model.moe_router_force_load_balancing"))


def header(config: dict[str, Any]) -> str:
    """The lines every file opens with: the layout (describe), the release its names are for and how to write for
    another, and that it is a benchmark launch where it is one."""
    release = textwrap.wrap(f"Written for {written_for(target())}; for another release, emit again with "
                            f"{other_releases()}.", width=114)
    return "\n".join([describe(config), *release, *(BENCHMARK if force_balanced(config) else ())])


def emit_all(config: dict[str, Any]) -> dict[str, str]:
    """File name -> text for every output (see FILES)."""
    if config.get("train.train_samples") is not None and "train.train_iters" not in config:
        # Bridge allows one of train_iters / train_samples (training/config.py) and the recipes set train_iters
        config = {**config, "train.train_iters": None}
    head, bridge = header(config), bridge_config(config)
    return {
        "bridge_overrides.py": python_snippet(bridge, head),
        "run_planned.py": run_planned_py(head),
        "overrides.txt": dotted_overrides(bridge, head),
        "megatron_lm_args.txt": megatron_lm_args(config, head),
        "env.sh": env_sh(config, head),
        "torchrun.sh": torchrun_sh(config, head),
        "numa_bind.sh": numa_bind_sh(head),
        "sbatch.sh": sbatch_sh(config, head),
    }


__all__ = ["FILES", "emit_all", "force_balanced"]
