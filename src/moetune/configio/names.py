"""The Megatron Bridge / Megatron-LM name table (src/moetune/data/megatron_names.csv).

One row per Bridge dotted name (``model.expert_model_parallel_size``) with its Megatron-LM flag, the
flag's argparse action, the value type, the default, and the source file it was verified in. The
normalizer uses it to reject unknown keys, coerce types, map Megatron-LM flags to Bridge names and
fold aliases (``model.overlap_moe_expert_parallel_comm`` -> ``comm_overlap.*``); the rules use its
defaults for names a config leaves out; emit uses its flags.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import Iterable, Iterator

from moetune.files import shipped_text

NO_DEFAULT = object()  # "n/a" or "required" in the table: the rule needing it skips

# ConfigContainer sections moetune validates key by key (the table lists every field).
VALIDATED = ("model", "train", "ddp", "optimizer", "comm_overlap", "mixed_precision", "cluster")
# Other ConfigContainer sections: accepted and passed through unchecked (rules may read them with get()).
# Verified in Megatron-Bridge src/megatron/bridge/training/config.py ConfigContainer.
PASSTHROUGH = ("rng", "rerun_state_machine", "validation", "scheduler", "dataset", "logger", "tokenizer",
               "checkpoint", "dist", "ft", "straggler", "nvrx_straggler", "profiling", "peft", "tensor_inspect",
               "inprocess_restart", "optimizer_config_override_provider")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

LAUNCHER = "cluster.launcher"  # moetune's own fact: "megatron-lm" when read from Megatron-LM arguments


def is_megatron_lm(config) -> bool:
    """Whether a config was read from a Megatron-LM launch (its arguments: configio/mlm_validate.py sets LAUNCHER),
    not a Megatron Bridge one (LAUNCHER unset or "bridge")."""
    return config.get(LAUNCHER) == "megatron-lm"


@dataclass(frozen=True, slots=True, kw_only=True)
class Name:
    """One row of megatron_names.csv."""

    bridge_name: str
    mlm_flags: tuple[str, ...]  # first one is the spelling emit writes
    mlm_action: str  # store_true | store_false | bool_optional | value | list | ""
    type: str  # int, float, bool, str, dtype, scope, layout, list[str], choice(a|b), any; "?" suffix: None allowed
    default: object  # Megatron Bridge / Megatron-Core default (parsed JSON), or NO_DEFAULT
    mlm_default: object  # Megatron-LM argparse default, or NO_DEFAULT
    role: str  # used | accepted | mlm_only
    canonical: str  # the normalized name when this one is an alias, else ""
    verified_in: str
    notes: str

    @property
    def mlm_flag(self) -> str:
        return self.mlm_flags[0] if self.mlm_flags else ""


@dataclass(frozen=True, slots=True, kw_only=True)
class NameTable:
    by_bridge: dict[str, Name]
    by_flag: dict[str, Name]

    def get(self, name: str) -> Name | None:
        if name.startswith("env."):
            row = self.by_bridge.get(name)
            return row or Name(bridge_name=name, mlm_flags=(), mlm_action="", type="any", default=NO_DEFAULT,
                                mlm_default=NO_DEFAULT, role="accepted", canonical="", verified_in="environment",
                                notes="")
        return self.by_bridge.get(name)

    def default(self, name: str) -> object:
        row = self.by_bridge.get(name)
        return NO_DEFAULT if row is None else row.default

    def canonical(self, name: str) -> str:
        row = self.by_bridge.get(name)
        return row.canonical if row is not None and row.canonical else name

    def mlm_flag(self, name: str) -> str:
        """The Megatron-LM argument that sets field NAME, or '' where it has none."""
        row = self.by_bridge.get(name)
        return row.mlm_flag if row is not None else ""

    def aliases(self, name: str) -> list[str]:
        """The names the table folds into NAME (its `canonical` column)."""
        return [n for n, row in self.by_bridge.items() if row.canonical == name]

    def section_names(self, section: str) -> list[str]:
        prefix = section + "."
        return [n for n in self.by_bridge if n.startswith(prefix)]


def _parse_default(text: str) -> object:
    if text in ("n/a", "required", ""):
        return NO_DEFAULT
    if (known := _SCALARS.get(text, NO_DEFAULT)) is not NO_DEFAULT:
        return known
    value = json.loads(text)
    if not isinstance(value, (list, dict)):  # a list or mapping is each row's own, which a caller may change
        _SCALARS[text] = value
    return value


# default texts already read, to the scalar each is: 1,063 defaults of megatron_names.csv are JSON of 99 texts
_SCALARS: dict[str, object] = {}


def csv_rows(text: str) -> csv.DictReader:
    """The rows of CSV TEXT whose '#' lines are comments (megatron_names.csv, megatron_releases.csv)."""
    return csv.DictReader(io.StringIO("\n".join(line for line in text.splitlines() if not line.startswith("#"))))


def numbered_csv_rows(text: str) -> list[tuple[int, dict[str, str]]]:
    """CSV TEXT's rows (as csv_rows reads them), each with its line number in TEXT, comments counted: for an error
    to name the line."""
    kept = [n for n, line in enumerate(text.splitlines(), 1) if not line.startswith("#")]
    rows = csv_rows(text)
    return [(kept[rows.line_num - 1], row) for row in rows]


def data_csv(filename: str) -> csv.DictReader:
    """The rows of a CSV in moetune/data (csv_rows)."""
    return csv_rows(shipped_text(filename))


def _records(lines: Iterable[str]) -> Iterator[list[str]]:
    """csv.reader's records of LINES: a line without a quote split at its commas, all the reader makes of it (in C,
    a character at a time: it took most of the load of megatron_names.csv), and one with a quote read by the reader,
    with the lines after it that its quoted field runs on into."""
    lines = iter(lines)
    for line in lines:
        if '"' in line:
            yield next(csv.reader(chain((line,), lines)))
        else:
            yield line.split(",") if line else []


@lru_cache(maxsize=1)
def names() -> NameTable:
    """Load the table once (every command reads it): its rows split by _records and read by column position, where
    csv's reader and a DictReader's dict a row took a third of the load of its 1,137 rows."""
    by_bridge: dict[str, Name] = {}
    by_flag: dict[str, Name] = {}
    rows = _records(line for line in shipped_text("megatron_names.csv").splitlines() if not line.startswith("#"))
    columns = next(rows)
    bridge, flag, action, kind, default, mlm_default, role, canonical, verified_in, notes = (columns.index(c) for c in (
        "bridge_name", "mlm_flag", "mlm_action", "type", "default", "mlm_default", "role", "canonical", "verified_in",
        "notes"))
    for r in rows:
        if not r:  # a blank line, which csv_rows' DictReader skips too
            continue
        row = Name(bridge_name=r[bridge], mlm_flags=tuple(f for f in r[flag].split("|") if f), mlm_action=r[action],
                   type=r[kind], default=_parse_default(r[default]), mlm_default=_parse_default(r[mlm_default]),
                   role=r[role], canonical=r[canonical], verified_in=r[verified_in], notes=r[notes])
        if row.bridge_name:
            by_bridge[row.bridge_name] = row
        for f in row.mlm_flags:
            by_flag[f] = row
    return NameTable(by_bridge=by_bridge, by_flag=by_flag)
