"""A user's runs CSV (``moetune calibrate --runs FILE``) read into runs: published_runs.csv's columns, one row per
measured run, each cell checked and each run's configuration one Megatron would launch; anything wrong is one error
line naming the file, line and column. planner/user_runs.py fits the constants to the runs."""

import csv
import re
from pathlib import Path

from moetune.errors import MoetuneError
from moetune.layout.validate import tokens_per_gpu, validate
from moetune.planner.config_map import to_config
from moetune.planner.estimate import estimate
from moetune.planner.runs import CONFIG, Run, columns, run_from_row
from moetune.rules import evaluate
from moetune.specs.hardware import catalog

REQUIRED_COLUMNS = (*CONFIG, "tokens_per_s_per_gpu")
# published_runs.csv columns that hold whole numbers, switches, a choice
INT_COLUMNS = ("num_gpus", "seq_length", "global_batch_size", "micro_batch_size", "tp", "cp", "pp", "vpp", "ep",
               "etp", "mtp", "flex_num_sms", "first_stage_layers", "last_stage_layers")
BOOL_COLUMNS = ("account_for_embedding", "account_for_loss", "ep_overlap", "delay_wgrad", "overlap_grad_reduce",
                "overlap_param_gather", "tp_comm_overlap", "fp8_output_proj")
ROUTINGS = ("dropless", "force-balance")
UNNAMED = "line "  # the id of a row without a run_id: its line in the file
# the value a required column takes where the run does not use what it sets (published_runs.md: "vpp=1 means no
# interleaving"), named in the error for an empty one: published rows leave them empty as "not stated"
UNSET = {"cp": ("1", "has no context parallelism"), "vpp": ("1", "does not interleave"),
         "etp": ("1", "has no expert TP"), "ep_overlap": ("false", "does not overlap the all-to-all")}


def load_user_runs(path: str) -> list[Run]:
    """The rows of a user's CSV as runs; one error line naming the file, line and column for anything wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # a spreadsheet's byte-order mark is not a column name
    except FileNotFoundError:
        raise MoetuneError(f"--runs {path}: no such file") from None
    except IsADirectoryError:
        raise MoetuneError(f"--runs {path}: is a directory; pass the CSV file of your runs") from None
    except UnicodeDecodeError:
        raise MoetuneError(f"--runs {path}: not UTF-8 text; save it as CSV (UTF-8)") from None
    reader = csv.DictReader(text.splitlines())
    known = columns()
    given = reader.fieldnames or []
    if unknown := sorted(set(given) - set(known)):
        raise MoetuneError(f"--runs {path}: unknown column(s) {', '.join(unknown)}; the columns are those of moetune's "
                           f"own runs table, moetune/data/published_runs.csv (required: {', '.join(REQUIRED_COLUMNS)}; "
                           f"optional: {', '.join(c for c in known if c not in REQUIRED_COLUMNS)})")
    if missing := [c for c in REQUIRED_COLUMNS if c not in given]:
        raise MoetuneError(f"--runs {path}: missing column(s) {', '.join(missing)}")
    runs = [_user_run(path, line, row, known) for line, row in enumerate(reader, start=2)]
    if not runs:
        raise MoetuneError(f"--runs {path}: no rows; add one line per measured run under the header")
    ids = [r.run_id for r in runs]
    if repeated := sorted({i for i in ids if ids.count(i) > 1}):
        raise MoetuneError(f"--runs {path}: run_id {', '.join(repeated)} appears more than once; give each run its "
                           "own id (two measurements of one configuration are two runs)")
    if twice := _same_rows(runs):  # without run_ids, one measurement pasted twice would be fitted twice
        raise MoetuneError(f"--runs {path}: {twice[0]} and {twice[1]} are the same run (configuration and "
                           "measurement); keep one, or give each measurement its own run_id")
    return runs


def _same_rows(runs: list[Run]) -> tuple[str, str] | None:
    """The first two rows without a run_id (named by their line) alike in everything else, or None: runs the user
    named apart are two runs, whatever they measured."""
    seen: dict = {}
    for r in (r for r in runs if r.run_id.startswith(UNNAMED)):
        key = (r.model.name, r.gpu, r.layout, r.workload, r.knobs, r.tokens_per_s_per_gpu)
        if key in seen:
            return seen[key], r.run_id
        seen[key] = r.run_id
    return None


def _check_cells(full: dict) -> None:
    """Whole numbers, switches, the routing and a positive measurement, each named when wrong (ValueError)."""
    for c in INT_COLUMNS:
        if full[c] and not (full[c].isascii() and full[c].isdigit()):
            raise ValueError(f"{c} = {full[c]!r}: expected a whole number")
    for c in BOOL_COLUMNS:
        if full[c] not in ("", "true", "false"):
            raise ValueError(f"{c} = {full[c]!r}: expected true, false or empty")
    if full["routing"] not in ROUTINGS:
        raise ValueError(f"routing = {full['routing']!r}: expected {' or '.join(ROUTINGS)}")
    for c in ("tokens_per_s_per_gpu", "tflops_per_gpu", "step_time_s", "peak_mem_gib"):
        try:
            value = float(full[c]) if full[c] else 1.0
        except ValueError:
            raise ValueError(f"{c} = {full[c]!r}: expected a number") from None
        if not 0 < value < float("inf"):
            raise ValueError(f"{c} = {full[c]!r}: expected a positive number")
    # the step a log prints and the tokens a row gives are one measurement: 10% apart, one of them is not this run's
    tokens = float(full["tokens_per_s_per_gpu"])
    if full["step_time_s"] and not 0.9 < (implied := _step_tokens(full)) / tokens < 1.1:
        raise ValueError(f"step_time_s = {full['step_time_s']} implies {implied:,.0f} tokens/s/GPU (global batch x "
                         f"sequence / step / GPUs), tokens_per_s_per_gpu says {tokens:,.0f}"
                         ": one of them is off (units? the whole cluster's?)")


def _step_tokens(row: dict) -> float:
    """Tokens/s/GPU a row's step time gives (layout/validate.py tokens_per_gpu)."""
    return tokens_per_gpu(int(row["global_batch_size"]), int(row["seq_length"]), float(row["step_time_s"]),
                          int(row["num_gpus"]))


def _tokens_from_step(row: dict) -> dict:
    """ROW with tokens_per_s_per_gpu from step_time_s where only the step (what Megatron's log prints) is given."""
    if (row.get("tokens_per_s_per_gpu") or "").strip() or not (row.get("step_time_s") or "").strip():
        return row
    try:
        return {**row, "tokens_per_s_per_gpu": f"{_step_tokens(row):.6g}"}
    except (ValueError, KeyError, ZeroDivisionError):  # a cell the checks below name
        return row


def _runnable(run: Run) -> None:
    """A run Megatron would refuse (a rule-table error on its configuration) cannot have been measured."""
    config = to_config(estimate(run.model, run.gpu, run.layout, run.workload, run.knobs, with_time=False))
    if error := next((f for f in evaluate(config, context="explain") if f.severity == "error"), None):
        raise ValueError(f"Megatron refuses this configuration ({error.rule}: {error.message.rstrip('.')}); "
                         "fix the row")


def _user_run(path: str, line: int, row: dict, known: tuple) -> Run:
    if None in row:  # csv.DictReader files cells past the header under None
        raise MoetuneError(f"--runs {path} line {line}: {len(row[None])} more cell(s) than the header "
                           f"({', '.join(map(repr, row[None]))}); quote a number written with thousands commas")
    row = _tokens_from_step(row)
    if empty := [c for c in REQUIRED_COLUMNS if not (row.get(c) or "").strip()]:
        plain = "; ".join(f"{c} = {UNSET[c][0]} where the run {UNSET[c][1]}" for c in empty if c in UNSET)
        measured = " (tokens_per_s_per_gpu, or step_time_s: what Megatron's log prints)" \
            if "tokens_per_s_per_gpu" in empty else ""
        raise MoetuneError(f"--runs {path} line {line}: empty {', '.join(empty)}; fill in what the run used{measured}"
                           f"{' (' + plain + ')' if plain else ''}: a fit needs each run's whole configuration "
                           "(data/published_runs.md describes the columns)")
    full = {c: (row.get(c) or "").strip() for c in known}
    full["run_id"] = full["run_id"] or f"{UNNAMED}{line}"
    full["gpu"] = _gpu_cell(full["gpu"], Path(path).parent)
    try:
        _check_cells(full)
        run = run_from_row(full)
        validate(run.model, run.layout, run.workload)
        _runnable(run)
    except (MoetuneError, ValueError) as err:
        raise MoetuneError(f"--runs {path} line {line}: {column_words(str(err))}") from None
    return run


def _gpu_cell(gpu: str, folder: Path) -> str:
    """A catalog name, or a cluster file's path, relative to the CSV's folder as a spreadsheet's links are (the
    CSV and its GPU files travel together; the directory calibrate runs from is an accident). A cell that names no
    file there (h101) stays as written, so load_gpu's error quotes the user's word, not a path they never typed."""
    beside = folder / gpu
    if gpu.lower() in catalog() or Path(gpu).is_absolute() or not (beside.suffix == ".toml" or beside.exists()):
        return gpu
    return str(beside)


# estimate's flags, as a runs CSV names them: the layout checks word their fixes for the command line
FLAG_COLUMNS = {"--gpus": "num_gpus", "--seq": "seq_length", "--gbs": "global_batch_size", "--mbs": "micro_batch_size",
                "--mtp-layers": "mtp", "--mtp-num-layers": "mtp"}


def column_words(message: str) -> str:
    """An error worded for estimate's flags, with the CSV's column names instead (a flag no column sets stays)."""
    def column(match: re.Match) -> str:
        flag = match.group(0)
        name = FLAG_COLUMNS.get(flag, flag[2:].replace("-", "_"))
        return name if name in columns() else flag
    return re.sub(r"--[a-z0-9-]+", column, message)
