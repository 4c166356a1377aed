"""submit.sh: each candidate's sbatch.sh submitted from its own folder, its log written there; and running it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from moetune.errors import MoetuneError

JOBS = "jobs.txt"  # "<folder> <job id>" a line, as submit.sh submits them
LOG_PREFIX = "train-"  # each job's log: <folder>/train-<job id>.log (sbatch --output)


def submit_sh(folders: list[str], plan: str) -> str:
    """The candidates run one after another by default (Slurm's singleton dependency on one job name): run at the same
    time, their all-to-all and gradient traffic would share the cluster's network and measure each other too.
    SWEEP_PARALLEL=1 lets Slurm start them as nodes free up. Arguments are passed to every sbatch (--account, ...)."""
    listed = " ".join(folders)
    return f"""#!/usr/bin/env bash
# moetune sweep of {plan}: submits each candidate's sbatch.sh from its folder; its log goes to
# <folder>/{LOG_PREFIX}<job id>.log, which `moetune sweep ingest` reads. On the cluster's login node:
#   RECIPE=<Megatron Bridge recipe function> ./submit.sh [sbatch options, e.g. --account=A --partition=P]
#   ENGINE=megatron-lm MEGATRON_LM_DIR=/opt/Megatron-LM EXTRA_ARGS="<the model's MODEL_ARGS>" ./submit.sh
# EXTRA_ARGS come after the sweep's own settings and win: leave out of them the iterations, logging, evaluation and
# learning-rate schedule the sweep sets (a MODEL_ARGS warm-up longer than the run fails Megatron-Core's assert).
# The jobs run one at a time (one job name, --dependency=singleton) unless SWEEP_PARALLEL=1.
set -euo pipefail
HERE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
if [[ "${{ENGINE:-bridge}}" == bridge && -z "${{RECIPE:-}}" ]]; then
  echo "submit.sh: set RECIPE to this model's Megatron Bridge recipe function (or ENGINE=megatron-lm)" >&2
  exit 2
fi
SERIAL=(--dependency=singleton)
[[ "${{SWEEP_PARALLEL:-0}}" == 1 ]] && SERIAL=()
for folder in {listed}; do
  id="$(cd "$HERE/$folder" && sbatch --parsable --job-name=moetune-sweep ${{SERIAL[@]+"${{SERIAL[@]}}"}} \\
        --output="$HERE/$folder/{LOG_PREFIX}%j.log" "$@" sbatch.sh)"
  echo "$folder ${{id%%;*}}" | tee -a "$HERE/{JOBS}"
done
"""


def submit_ready() -> None:
    """What --submit needs here, checked before the sweep is written: sbatch on PATH, and the Bridge recipe named
    (submit.sh refuses without it)."""
    if shutil.which("sbatch") is None:
        raise MoetuneError("--submit: sbatch is not on PATH; run on the cluster's login node, or write the sweep "
                           "without --submit and run its submit.sh there")
    if os.environ.get("ENGINE", "bridge") == "bridge" and not os.environ.get("RECIPE"):
        raise MoetuneError("--submit: set RECIPE to this model's Megatron Bridge recipe function (or "
                           "ENGINE=megatron-lm with MEGATRON_LM_DIR and EXTRA_ARGS) in the environment")


def run_submit(directory: Path, sbatch_args: tuple[str, ...] = ()) -> list[str]:
    """Run DIRECTORY/submit.sh here (a login node: sbatch on PATH); the "<folder> <job id>" lines it printed."""
    done = subprocess.run(["bash", str(directory / "submit.sh"), *sbatch_args], capture_output=True, text=True,
                          env=os.environ.copy(), check=False)
    if done.returncode:
        said = (done.stderr.strip().splitlines() or ["no message"])[-1]
        listed = done.stdout.split()[1::2]
        raise MoetuneError(f"--submit: submit.sh exited {done.returncode} ({said}); "
                           + (f"it submitted {', '.join(listed)} first ({directory / JOBS}); " if listed else
                              "nothing was submitted; ")
                           + f"the sweep is written: run {directory / 'submit.sh'} once fixed")
    return done.stdout.split("\n")[:-1]
