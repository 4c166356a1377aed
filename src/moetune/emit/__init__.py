"""What the training engine takes, from a normalized config: Bridge overrides, Megatron-LM arguments,
environment variables and torchrun / Slurm launch scripts."""

from __future__ import annotations

from typing import Any

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


def emit_all(config: dict[str, Any]) -> dict[str, str]:
    """File name -> text for every output (see FILES)."""
    if config.get("train.train_samples") is not None and "train.train_iters" not in config:
        # Bridge allows one of train_iters / train_samples (training/config.py) and the recipes set train_iters
        config = {**config, "train.train_iters": None}
    header, bridge = describe(config), bridge_config(config)
    return {
        "bridge_overrides.py": python_snippet(bridge, header),
        "run_planned.py": run_planned_py(header),
        "overrides.txt": dotted_overrides(bridge, header),
        "megatron_lm_args.txt": megatron_lm_args(config, header),
        "env.sh": env_sh(config, header),
        "torchrun.sh": torchrun_sh(config, header),
        "numa_bind.sh": numa_bind_sh(header),
        "sbatch.sh": sbatch_sh(config, header),
    }


__all__ = ["FILES", "emit_all"]
