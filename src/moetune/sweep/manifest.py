"""sweep.json: what `moetune sweep write` wrote (each candidate's plan result and folder, the benchmark's length), which
`moetune sweep ingest` reads back: the sweep folder holds all it needs, wherever the plan file has gone since."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from moetune.configio.releases import family_of, known_release
from moetune.errors import MoetuneError
from moetune.files import read_json, write_text
from moetune.planner.from_json import is_saved_result, refuse_failure

MANIFEST = "sweep.json"
FORMAT = 1  # the manifest's layout; a later moetune that changes it reads this number first


@dataclass(kw_only=True, slots=True)
class Candidate:
    rank: int  # the plan's result number (1 = the pick)
    folder: str  # the candidate's launch files and log, relative to the sweep directory
    result: dict  # the plan's result as `plan --json` wrote it: its layout, knobs and predictions

    def __post_init__(self) -> None:
        if self.rank < 1 or not self.folder or "/" in self.folder or self.folder in (".", ".."):
            raise ValueError(f"candidate rank {self.rank}, folder {self.folder!r}: needs a rank from 1 and a plain "
                             "folder name")
        _check_result(self.result, self.folder)


@dataclass(kw_only=True, slots=True)
class Sweep:
    plan: str  # the plan file the candidates came from (absolute), for the reader
    iters: int  # train_iters each benchmark runs
    skip: int  # iterations left out of the timing: warm-up, compilation and CUDA-graph capture
    release: str | None  # the release the files were written for (configio/releases.py), None: Megatron-LM main's
    candidates: list[Candidate]

    def __post_init__(self) -> None:
        if self.skip < 0:
            raise ValueError(f"skip ({self.skip}) must be 0 or more")
        if self.skip >= self.iters:
            raise ValueError(f"skip ({self.skip}) must be below iters ({self.iters}): no iteration would be timed")
        if not self.candidates:
            raise ValueError("no candidates")
        folders = [c.folder for c in self.candidates]
        if repeated := sorted({f for f in folders if folders.count(f) > 1}):
            raise ValueError(f"folder {repeated[0]} holds more than one candidate")


# What ingest prints of each saved result beside its rebuilt estimate (planner/from_json.py checks what that needs;
# the timing reads the estimate's workload): a hand-edited manifest's nonsense is said here, in one line
PREDICTED = {"time": ("tokens_per_s_per_gpu", "step_seconds"), "memory": ("peak_bytes", "capacity_bytes"),
             "workload": ("global_batch_size", "seq_length")}


def _check_result(result, folder: str) -> None:
    if not isinstance(result, dict):
        raise ValueError(f"candidate {folder}: its result is not a saved plan result")
    for section, keys in PREDICTED.items():
        values = result.get(section)
        for key in keys:
            value = values.get(key) if isinstance(values, dict) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"candidate {folder}: its result's {section}.{key} is {value!r}, not a positive "
                                 "number")


def write_manifest(sweep: Sweep, directory: Path) -> Path:
    data = {"moetune_sweep": FORMAT, "plan": sweep.plan, "iters": sweep.iters, "skip": sweep.skip,
            "release": sweep.release,
            "candidates": [{"rank": c.rank, "folder": c.folder, "result": c.result} for c in sweep.candidates]}
    return write_text(directory / MANIFEST, json.dumps(data, indent=1) + "\n", "--out")


def saved_result_data(data, path: str) -> dict:
    """DATA (read from PATH) as a `plan --json` / `estimate --json` output, or one line saying what it is instead."""
    if isinstance(data, dict) and "moetune_sweep" in data:
        raise MoetuneError(f"{path}: a sweep's manifest; pass the plan it was written from ({data.get('plan')})")
    refuse_failure(data, path)
    if not is_saved_result(data):
        raise MoetuneError(f"{path}: not a `moetune plan --json` or `estimate --json` output")
    return data


def _release(value) -> str | None:
    """The release the files were written for, one moetune knows (a Megatron-Core or a Bridge one), or None."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"release {value!r} is not a release name")
    return known_release(value, family_of(value))


def read_manifest(directory: str | Path) -> Sweep:
    """The sweep a directory holds; one line naming what is wrong with it."""
    path = Path(directory)
    if path.is_file():
        raise MoetuneError(f"{path}: is a file; pass the --out directory of `moetune sweep write` (the folder that "
                           f"holds {MANIFEST})")
    if not path.is_dir():
        raise MoetuneError(f"{path}: no such directory; pass the --out directory of `moetune sweep write`")
    if not (path / MANIFEST).is_file():
        raise MoetuneError(f"{path}: no {MANIFEST}; pass the --out directory of `moetune sweep write`")
    data = read_json(path / MANIFEST, "", "pass the sweep.json `moetune sweep write` wrote")
    where = f"{path / MANIFEST}"
    if not isinstance(data, dict) or data.get("moetune_sweep") != FORMAT:
        raise MoetuneError(f"{where}: not a moetune sweep manifest (format {FORMAT}); write the sweep again with "
                           "`moetune sweep write`")
    try:
        return Sweep(plan=str(data["plan"]), iters=int(data["iters"]), skip=int(data["skip"]),
                     release=_release(data.get("release")),
                     candidates=[Candidate(rank=int(c["rank"]), folder=str(c["folder"]), result=dict(c["result"]))
                                 for c in data["candidates"]])
    except (KeyError, TypeError, ValueError, MoetuneError) as err:
        raise MoetuneError(f"{where}: {err if not isinstance(err, KeyError) else f'no field {err}'}; write the sweep "
                           "again with `moetune sweep write`") from None
