"""env.sh, torchrun.sh and a Slurm sbatch.sh for the planned node count.

torchrun.sh launches either engine: Megatron Bridge (scripts/training/run_recipe.py --recipe NAME, with
bridge_overrides.py applied to the recipe by run_planned.py) or Megatron-LM (pretrain_gpt.py, or
pretrain_hybrid.py for Mamba hybrids, with megatron_lm_args.txt). sbatch.sh runs torchrun.sh
once per node under srun, the pattern of Megatron-Bridge scripts/training/launch_with_sbatch.sh.
"""

from __future__ import annotations

import math
from typing import Any

from moetune.configio.release_context import target
from moetune.configio.releases import has
from moetune.emit import values
from moetune.emit.environment import environment, tp_cp_need_one_connection
from moetune.errors import MoetuneError
from moetune.layout.ranks import job_nvlink_domain
from moetune.rules.derive import derive


def whole_nodes(world: int, per_node: int) -> bool:
    """Whether WORLD GPUs are one node's or whole nodes of PER_NODE: what the launch runs, a torchrun a node with all
    its GPUs (sbatch.sh; Megatron Bridge's scripts/performance/utils/executors.py slurm_executor likewise)."""
    return world <= per_node or world % per_node == 0


def topology(config: dict[str, Any]) -> tuple[int, int]:
    """(nodes, GPUs per node) for the job."""
    world = config.get("cluster.num_gpus")
    if not world:
        raise MoetuneError("emit needs the GPU count for the launch scripts: pass --gpus N (cluster.num_gpus)")
    per_node = derive(config).get("gpus_per_node") or 8
    if world <= per_node:
        return 1, int(world)
    if not whole_nodes(world, per_node):
        # a saved result refuses another --gpus (it was priced for this count): name the fix that both take
        raise MoetuneError(f"cluster.num_gpus ({world}) is not a multiple of {per_node} GPUs per node: the launch "
                           f"runs whole nodes; use a multiple of {per_node} GPUs (for a saved result, plan that "
                           "count), or pass --set cluster.gpus_per_node=N with the GPUs each node runs")
    return math.ceil(world / per_node), int(per_node)


def env_sh(config: dict[str, Any], header: str) -> str:
    lines = ["# shellcheck shell=bash", values.comment(header),
             "# Sourced by torchrun.sh; values already in the environment win."]
    for name, (value, why) in environment(config).items():
        lines.append(f'export {name}="${{{name}:-{values.double_quoted(value)}}}"  # {why}')
    return "\n".join(lines) + "\n"


# shell words (quotes, comments) one a line, for `mapfile`: megatron_lm_args.txt's text and EXTRA_ARGS alike
READ_WORDS = ("python3 -c 'import shlex, sys; sys.stdout.write(\"\".join(w + chr(10) for w in "
              "shlex.split(sys.argv[1], comments=True)))'")


def mlm_connections(config: dict[str, Any]) -> str:
    """Megatron-LM asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with TP or CP > 1 before Blackwell unless EP overlap (or
    either FSDP) is on (arguments.py validate_args); env.sh may hold Bridge's 32 for DeepEP/HybridEP, so the
    Megatron-LM branch sets 1 itself there."""
    if tp_cp_need_one_connection(derive(config)):
        return ("\n  export CUDA_DEVICE_MAX_CONNECTIONS=1  # Megatron-LM asserts it with TP/CP > 1 before Blackwell "
                "(arguments.py)")
    return ""


def _target_has(name: str) -> bool:
    """Whether the release emit targets has NAME (a Bridge runner script, option or field: bridge_releases.csv);
    with none named, the newest does."""
    release = target()
    return release is None or has(release, name)


def bridge_runner() -> str:
    """What emit's Bridge launch runs on the targeted release: "hooks" (recipe_runner.py, from Bridge v0.6.0: its CLI
    overrides and its benchmark bootstrap are patched), "overrides" (run_recipe.py alone, v0.3-v0.5: the override
    function it imports is patched), or "none" (v0.2.x ships no training runner)."""
    if _target_has("scripts/training/recipe_runner.py"):
        return "hooks"
    return "overrides" if _target_has("scripts/training/run_recipe.py") else "none"


def entry_point(config: dict[str, Any]) -> str:
    """Megatron-LM's training script: pretrain_hybrid.py for Mamba hybrids (HybridModel), or pretrain_mamba.py on a
    target release without it (before core_v0.18.0: the release tables' script rows); else pretrain_gpt.py."""
    if not config.get("model.is_hybrid_model"):
        return "pretrain_gpt.py"
    release = target()
    return "pretrain_hybrid.py" if release is None or has(release, "pretrain_hybrid.py") else "pretrain_mamba.py"


def torchrun_sh(config: dict[str, Any], header: str) -> str:
    nodes, per_node = topology(config)
    aware = values.hydra(bool(config.get("optimizer.use_precision_aware_optimizer")))
    entry = entry_point(config)
    # --mode: run_recipe.py's option on Bridge v0.3.x and from v0.6.0; between them it infers the mode from the recipe
    mode = " --mode pretrain" if _target_has("run_recipe.py --mode") else ""
    no_runner = "" if bridge_runner() != "none" else (
        '\n  echo "this Megatron Bridge release ships no scripts/training/run_recipe.py (from v0.3.0): apply '
        'bridge_overrides.py in a script of your own, or run ENGINE=megatron-lm" >&2; exit 2')
    return f"""#!/usr/bin/env bash
{values.comment(header)}
# {nodes} node(s) x {per_node} GPUs. Run once per node (sbatch.sh does that with srun), e.g.
#   RECIPE=<bridge recipe function> NODE_RANK=0 MASTER_ADDR=<node0> ./torchrun.sh
#   ENGINE=megatron-lm MEGATRON_LM_DIR=/opt/Megatron-LM ./torchrun.sh
# RECIPE must be this model's own Megatron Bridge recipe: the overrides set the layout, knobs and parameter shapes,
# not what a recipe holds beside them (rotary base, activation, tokenizer). A model with none at Bridge HEAD
# (Mixtral, DBRX, Grok-1, Phi-3.5-MoE among the built-in ones) runs with ENGINE=megatron-lm and its MODEL_ARGS.
set -euo pipefail
HERE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
source "$HERE/env.sh"
NNODES="${{NNODES:-{nodes}}}"
NPROC_PER_NODE="${{NPROC_PER_NODE:-{per_node}}}"
NODE_RANK="${{NODE_RANK:-0}}"
MASTER_ADDR="${{MASTER_ADDR:-127.0.0.1}}"
MASTER_PORT="${{MASTER_PORT:-29500}}"
ENGINE="${{ENGINE:-bridge}}"  # bridge | megatron-lm
# each rank runs under numa_bind.sh, which binds it to its GPU's NUMA node (NUMA_BIND=0 turns that off)
LAUNCH=(torchrun --nnodes "$NNODES" --nproc-per-node "$NPROC_PER_NODE" --node-rank "$NODE_RANK"
        --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT"
        --no-python "$HERE/numa_bind.sh" "${{PYTHON:-python}}")
# EXTRA_ARGS: more arguments, quotes as a shell reads them (Bridge: dotted overrides; Megatron-LM: the model's
# MODEL_ARGS); empty arrays expand as ${{A[@]+"${{A[@]}}"}} for bash before 4.4 under set -u
mapfile -t EXTRA < <({READ_WORDS} "${{EXTRA_ARGS:-}}")
if [[ "$ENGINE" == "bridge" ]]; then{no_runner}
  : "${{RECIPE:?set RECIPE to the Megatron Bridge recipe function of this model, e.g. deepseek_v3_pretrain_config}}"
  export BRIDGE_DIR="${{BRIDGE_DIR:-/opt/Megatron-Bridge}}"
  # run_planned.py applies bridge_overrides.py to the recipe inside scripts/training/run_recipe.py (dotted
  # overrides cannot reach every recipe); the two named here keep run_recipe.py's benchmark defaults (a weak-scaled
  # global batch, the precision-aware optimizer) off the plan
  exec "${{LAUNCH[@]}}" "$HERE/run_planned.py" --recipe "$RECIPE"{mode} \\
    train.global_batch_size={config.get("train.global_batch_size")} \\
    optimizer.use_precision_aware_optimizer={aware} \\
    ${{EXTRA[@]+"${{EXTRA[@]}}"}}
else
  MEGATRON_LM_DIR="${{MEGATRON_LM_DIR:-/opt/Megatron-LM}}"{mlm_connections(config)}
  # the file is shell-quoted (a layout string holds '|' and '(' ); shlex reads it as a shell would, comments dropped
  mapfile -t ARGS < <({READ_WORDS} "$(cat "$HERE/megatron_lm_args.txt")")
  exec "${{LAUNCH[@]}}" "$MEGATRON_LM_DIR/{entry}" "${{ARGS[@]}}" ${{EXTRA[@]+"${{EXTRA[@]}}"}}
fi
"""


def run_planned_py(header: str) -> str:
    """Megatron Bridge's own runner (scripts/training/run_recipe.py) with bridge_overrides.apply_overrides applied to
    the recipe just before the runner's CLI overrides, as the targeted release runs it (bridge_runner). From v0.6.0,
    through recipe_runner's hooks: after the runner has recorded a benchmark recipe's canonical topology (its
    weak-scaling check reads it), and again in the process a benchmark recipe's environment bootstrap re-executes
    (recipe_runner.bootstrap_recipe_environment runs the script it is given, so it is given this one). Before it,
    through the override function run_recipe.py imports (omegaconf_utils.process_config_with_overrides, v0.3-v0.5: the
    v0.6.0 hooks had raised ModuleNotFoundError there). A recipe whose comm_overlap is None or whose mixed_precision is
    a preset name takes Python, not dotted overrides."""
    runner = bridge_runner()
    mode = " --mode pretrain" if _target_has("run_recipe.py --mode") else ""
    hooks = RUNNER_HOOKS[runner]
    return f'''"""{header}

Megatron Bridge's scripts/training/run_recipe.py, with this plan (bridge_overrides.apply_overrides) applied to the
recipe before the runner's dotted overrides. Run as run_recipe.py is run (torchrun.sh does):
    BRIDGE_DIR=/opt/Megatron-Bridge python run_planned.py --recipe <name>{mode} [dotted overrides]
"""

import os
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
SCRIPTS = Path(os.environ.get("BRIDGE_DIR", "/opt/Megatron-Bridge")) / "scripts"
sys.path[:0] = [str(SCRIPTS / "training"), str(SCRIPTS / "common"), str(HERE.parent)]
{hooks}
sys.argv[0] = str(SCRIPTS / "training" / "run_recipe.py")
runpy.run_path(sys.argv[0], run_name="__main__")
'''


# How run_planned.py puts apply_overrides in front of the runner's own overrides, by bridge_runner()
RUNNER_HOOKS = {
    "hooks": '''
import recipe_runner  # noqa: E402  (scripts/training/recipe_runner.py, which run_recipe.py imports these from)
from bridge_overrides import apply_overrides  # noqa: E402

_apply_cli_overrides = recipe_runner.apply_cli_overrides
recipe_runner.apply_cli_overrides = lambda cfg, overrides: _apply_cli_overrides(apply_overrides(cfg), overrides)
_bootstrap = recipe_runner.bootstrap_recipe_environment
recipe_runner.bootstrap_recipe_environment = lambda cfg, *, script_path, argv: _bootstrap(
    cfg, script_path=str(HERE), argv=argv)  # a benchmark recipe's re-exec runs this script again, not run_recipe.py''',
    "overrides": '''
# run_recipe.py imports its override function by name when it runs: patched first, it applies the plan before them
import megatron.bridge.training.utils.omegaconf_utils as omegaconf_utils  # noqa: E402
from bridge_overrides import apply_overrides  # noqa: E402

_process = omegaconf_utils.process_config_with_overrides
omegaconf_utils.process_config_with_overrides = lambda cfg, *args, **kw: _process(apply_overrides(cfg), *args, **kw)''',
    "none": '''
sys.exit("this Megatron Bridge release ships no scripts/training/run_recipe.py (it came in v0.3.0): apply "
         "bridge_overrides.apply_overrides to your recipe in your own script, or run ENGINE=megatron-lm")''',
}


def numa_bind_sh(header: str) -> str:
    """CPU affinity for one rank (seeds/000 Phase 3, Host overhead row: CPU affinity tuning; seeds/004: it can matter
    as much as the dispatcher on GB200/GB300): the rank's CPUs and memory on its GPU's NUMA node, as Megatron Bridge's
    performance launcher binds them (scripts/performance/utils/executors.py, numactl --cpunodebind --membind), found
    from the GPU's PCI address rather than a per-platform divisor. Runs the command unbound where numactl, nvidia-smi
    or the node is missing, saying so."""
    return f"""#!/usr/bin/env bash
{values.comment(header)}
# torchrun runs this once per rank (LOCAL_RANK set): exec the command bound to the NUMA node of GPU LOCAL_RANK.
set -euo pipefail
node=-1
# the rank's GPU as nvidia-smi names it: the LOCAL_RANK-th of CUDA_VISIBLE_DEVICES where that is set (an index or
# UUID, both of which -i takes), in PCI bus order as nvidia-smi counts (CUDA_DEVICE_ORDER below makes CUDA agree)
IFS=, read -ra visible <<< "${{CUDA_VISIBLE_DEVICES:-}}"
gpu="${{visible[${{LOCAL_RANK:-0}}]:-${{LOCAL_RANK:-0}}}}"
export CUDA_DEVICE_ORDER=PCI_BUS_ID
if [[ "${{NUMA_BIND:-1}}" == 1 ]] && command -v numactl >/dev/null && command -v nvidia-smi >/dev/null; then
  bus="$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i "$gpu" 2>/dev/null | tr 'A-F' 'a-f')" || bus=""
  if [[ -n "$bus" ]]; then
    node="$(cat "${{PCI_DEVICES:-/sys/bus/pci/devices}}/${{bus: -12}}/numa_node" 2>/dev/null || echo -1)"
  fi
fi
if [[ "$node" =~ ^[0-9]+$ ]]; then
  exec numactl --cpunodebind="$node" --membind="$node" "$@"
fi
[[ "${{NUMA_BIND:-1}}" == 1 ]] && echo "numa_bind.sh: rank ${{LOCAL_RANK:-0}} runs unbound (no numactl, nvidia-smi or \
NUMA node)" >&2
exec "$@"
"""


def _segment(config: dict[str, Any], nodes: int, per_node: int) -> str:
    """`#SBATCH --segment=N` where an NVLink domain spans nodes (NVL72): the nodes of one rack segment, as moetune
    placed the job's ranks (layout/ranks.py job_nvlink_domain) and Megatron Bridge's GB200 launcher asks Slurm."""
    domain = derive(config).get("nvlink_domain") or per_node
    if domain <= per_node:
        return ""
    return f"#SBATCH --segment={job_nvlink_domain(nodes * per_node, per_node, domain) // per_node}\n"


def sbatch_sh(config: dict[str, Any], header: str) -> str:
    nodes, per_node = topology(config)
    return f"""#!/bin/bash
{values.comment(header)}
#SBATCH --job-name=moetune
{_segment(config, nodes, per_node)}#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={per_node}
#SBATCH --exclusive
#SBATCH --time=04:00:00
# Submit from the directory holding the emitted files: RECIPE=<name> sbatch sbatch.sh
# Optional: CONTAINER_IMAGE=<image> CONTAINER_MOUNTS=<src:dst,...> (pyxis/enroot srun flags).
set -euo pipefail
HERE="${{SLURM_SUBMIT_DIR:-$(pwd)}}"
export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
export MASTER_PORT="${{MASTER_PORT:-29500}}"
export NNODES="$SLURM_JOB_NUM_NODES" NPROC_PER_NODE={per_node}
CONTAINER=()
if [[ -n "${{CONTAINER_IMAGE:-}}" ]]; then
  CONTAINER=(--container-image "$CONTAINER_IMAGE" --container-mounts "${{CONTAINER_MOUNTS:-$HERE:$HERE}}")
fi
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 ${{CONTAINER[@]+"${{CONTAINER[@]}}"}} \\
  bash -c 'NODE_RANK="$SLURM_NODEID" exec bash "$1/torchrun.sh"' _ "$HERE"
"""
