"""Read any mix of inputs into one normalized config: what `moetune check` and `moetune emit` take.

Inputs, in order (later ones override earlier ones; within one input the same key twice with two
values is a contradiction and an error):
  1. files: a Megatron Bridge YAML (.yaml/.yml) or Megatron-LM's MODEL_ARGS YAML (model_args.py), a JSON
     ({"config": {...}} or an estimate/plan result),
     a file of dotted overrides (key=value lines), a file of Megatron-LM arguments (--flags), or a file of
     ``export NAME=value`` lines (emit's env.sh: env.*);
  2. ``--mlm-args "..."``;
  (``--script-args "..."``: the positional arguments ($1 .. $N) of the one launch script among the files)
  3. ``--set key=value`` overrides together with ``--gpu`` / ``--gpus`` (cluster.gpu / cluster.num_gpus).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Sequence

from moetune.configio.finalize import settle_dp_overlap, sync_megatron_fsdp
from moetune.configio.mlm import has_flags, parse_mlm
from moetune.configio.model_args import is_model_args, read_model_args
from moetune.configio.normalize import Assignment, merge, resolve
from moetune.configio.readers import (
    ResultReader,
    dotted_assignments,
    load_yaml,
    looks_dotted,
    looks_like_env,
    overrides_lines,
    read_json,
    yaml_assignments,
)
from moetune.configio.release_context import noted_source
from moetune.errors import MoetuneError
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import builtin_names


def read_file(path: Path, fmt: str | None = None, from_result: ResultReader | None = None,
              env: Mapping[str, str] | None = None, args: Sequence[str] = ()) -> list[Assignment]:
    """Assignments from one file; ``fmt`` (yaml, json, overrides, mlm) forces the format; ``from_result``
    reads an estimate/plan result JSON (readers.ResultReader); ``env``: the variables a launch script or a
    MODEL_ARGS YAML sees (default: os.environ); ``args``: a launch script's positional arguments."""
    if path.is_dir():  # check run/ (emit's --out folder) instead of one of its files
        raise MoetuneError(f"{path}: is a directory; pass the config file inside it (e.g. {path}/overrides.txt)")
    if not path.is_file():
        raise MoetuneError(f"{path}: no such file" + _model_name_hint(str(path)))
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise MoetuneError(f"{path}: not a text file "
                           "(expected YAML, JSON, overrides or Megatron-LM arguments)") from None
    if fmt in ("mlm", "overrides") and text.lstrip().startswith("{"):  # a plan or estimate JSON read as another format
        raise MoetuneError(f"{path}: --format {fmt} says how to read the input, and this one is JSON (a saved plan or "
                           "estimate?); drop --format: emit writes every output format, the Megatron-LM arguments "
                           "among them (megatron_lm_args.txt)")
    if why := _not_a_config(path, text):
        raise MoetuneError(f"{path}: {why}")
    # a .sh is a launch script, however it starts (`TP=2 EP=4 bash finetune.sh Qwen/Qwen3-30B-A3B` is no override)
    fmt = fmt or {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".sh": "mlm"}.get(path.suffix.lower())
    if fmt == "yaml":
        data = load_yaml(path)
        return read_model_args(data, str(path), env) if is_model_args(data) else yaml_assignments(data, str(path))
    if fmt == "json":
        return read_json(path, from_result)
    if fmt == "overrides" or (fmt is None and looks_dotted(text)):
        return dotted_assignments(overrides_lines(text), str(path))
    if fmt == "mlm" or (fmt is None and ("--" in text or looks_like_env(text))):
        return parse_mlm(text, str(path), env, args)
    raise MoetuneError(
        f"{path}: cannot tell the format; use a .yaml Bridge config, key=value override lines, "
        "Megatron-LM --flags, or pass --format")


# What emit writes beside the configs it runs (emit/__init__.py FILES), each with its header in its first lines
EMIT_LAUNCHERS = ("torchrun.sh", "sbatch.sh", "numa_bind.sh")


def _not_a_config(path: Path, text: str) -> str | None:
    """Why a file is no config moetune reads, or None: emit's own launch scripts, which read their config from the
    files beside them (their bash had been read as Megatron-LM arguments, --recipe and --nodes refused), and Python,
    which sets a recipe's fields in code (bridge_overrides.py had been read as a shell script)."""
    emitted = "moetune emit:" in text[:600]
    configs = "check overrides.txt (Megatron Bridge) or megatron_lm_args.txt (Megatron-LM) beside it"
    if emitted and (path.name in EMIT_LAUNCHERS or path.suffix == ".py"):
        return f"moetune emit's launch code, not a config; {configs}"
    if path.suffix == ".py":
        return ("Python sets a recipe's fields in code, which moetune does not run; pass the run's overrides, "
                "a YAML of its ConfigContainer or its Megatron-LM arguments")
    return None


def _for_gpu(source: dict[str, Any], gpu: str | None) -> dict[str, Any]:
    """A file's NVLink domain and GPUs per node describe the GPU it names (emit writes them beside cluster.gpu):
    where --gpu names another, they go with the GPU they describe, or a GB200 plan re-pointed at B200s would be
    priced as B200s in a 72-GPU rack (configio/cluster.py applies the keys a config keeps)."""
    named = source.get("cluster.gpu")
    if gpu is None or named is None or load_gpu(str(named)).ref == load_gpu(gpu).ref:  # one GPU, however named
        return source
    for key in ("cluster.gpus_per_node", "cluster.nvlink_domain"):
        source.pop(key, None)
    return source


def script_arguments(files: Sequence[str | Path], script_args: str | None) -> dict[int, list[str]]:
    """{index of each launch script (.sh) among `files`: its positional arguments}, those of the one script given
    `--script-args`, split as a shell splits it (Pai-Megatron-Patch's run_mcore_*.sh take their layout as $1 .. $27,
    as its README runs them)."""
    shells: dict[int, list[str]] = {k: [] for k, f in enumerate(files) if Path(f).suffix.lower() == ".sh"}
    if script_args is None:
        return shells
    if len(shells) != 1:
        named = " and ".join(str(files[k]) for k in shells)
        raise MoetuneError(f"--script-args: gives the arguments of one launch script (.sh), and the inputs hold "
                           f"{named or 'none'}; pass the script as a config file, or drop --script-args")
    try:
        return {k: shlex.split(script_args) for k in shells}
    except ValueError as err:  # shlex: "No closing quotation", "No escaped character"
        raise MoetuneError(f"--script-args {script_args[:60]!r}: {str(err).lower()}; quote the arguments as bash "
                           "would (e.g. --script-args \"dsw A3B 'a b'\")") from None


def load_config(files: Sequence[str | Path] = (), *, sets: Sequence[str] = (), mlm_args: str | None = None,
                gpu: str | None = None, gpus: int | None = None, fmt: str | None = None,
                from_result: ResultReader | None = None, script_args: str | None = None) -> dict[str, Any]:
    """The normalized config (flat dict of Bridge dotted names + cluster.* + env.*); ``script_args``: the launch
    script's positional arguments, as one string a shell splits."""
    sources = read_sources(files, mlm_args=mlm_args, gpu=gpu, fmt=fmt, from_result=from_result,
                           script_args=script_args)
    return settled(sources, sets=sets, gpu=gpu, gpus=gpus)


def read_sources(files: Sequence[str | Path] = (), *, mlm_args: str | None = None, gpu: str | None = None,
                 fmt: str | None = None, from_result: ResultReader | None = None,
                 script_args: str | None = None) -> list[dict[str, Any]]:
    """Each input file, then --mlm-args, read and resolved: what `settled` merges under the command line's overrides
    (a caller that settles one read under several --set lists reads each file once: sweep write)."""
    # launch scripts first: what they export reaches every input, as a launcher hands on its environment (the
    # Megatron-MoE-ModelZoo's `TP=2 PP=8 ... bash sbatch_benchmarking.sh --flags` fills its YAML's ${TP} by envsubst);
    # the inputs still override one another in the order given
    env, read = dict(os.environ), {}

    def source(path: str | Path, args: Sequence[str] = ()) -> dict[str, Any]:
        # its names noted for --megatron-core (configio/release_context.py), in the environment read so far
        return _for_gpu(noted_source(lambda: resolve(read_file(Path(path), fmt, from_result, env, args))), gpu)

    for k, args in script_arguments(files, script_args).items():
        read[k] = source(files[k], args)
        env |= {n[len("env."):]: str(v) for n, v in read[k].items() if n.startswith("env.") and v is not None}
    sources = [read[k] if k in read else source(f) for k, f in enumerate(files)]
    for f, source in zip(files, sources):
        if not source:
            raise MoetuneError(f"{f}: sets nothing (an empty or comment-only file?); pass the config the run uses")
    if mlm_args is not None:
        if not has_flags(mlm_args, "--mlm-args"):
            raise MoetuneError(f"--mlm-args {mlm_args.strip()[:60]!r}: no Megatron-LM --flags; pass the run's "
                               "arguments, e.g. \"--tensor-model-parallel-size 2 ...\"")
        sources.append(noted_source(lambda: resolve(parse_mlm(mlm_args, "--mlm-args"))))
    return sources


def settled(sources: Sequence[dict[str, Any]], *, sets: Sequence[str] = (), gpu: str | None = None,
            gpus: int | None = None) -> dict[str, Any]:
    """SOURCES (read_sources) merged under the command line: ``--set`` overrides, then --gpu / --gpus."""
    command_line = dotted_assignments(list(sets), "--set")
    if gpu is not None:
        command_line.append(Assignment(key="cluster.gpu", value=gpu, origin="--gpu"))
    if gpus is not None:
        command_line.append(Assignment(key="cluster.num_gpus", value=gpus, origin="--gpus"))
    return settle_dp_overlap(sync_megatron_fsdp(merge([*sources, noted_source(lambda: resolve(command_line))])))


def _model_name_hint(name: str) -> str:
    """Where a missing input is a built-in model's name, how to get a config of it to check or emit."""
    if name.lower() not in builtin_names():
        return ""
    return (f"; {name} is a built-in model, not a config: pass the run's config (a Bridge YAML, Megatron-LM arguments, "
            f"a launch script) or a saved `moetune plan {name} ... --json` / `estimate --json` output")
