"""What a launch script's assignments do to its variables, as configio/shell.py runs them: `NAME=v`, `NAME+=v`,
`NAME=(...)`, `NAME+=(...)`, `export NAME`, `unset NAME`, `let N=EXPR`, and the words a command's raw words expand to
(an unset variable the script sets on another path drops out, as bash drops it).
"""

from __future__ import annotations

import re

from moetune.configio import shell_arith as arith
from moetune.configio.names import names as names_table
from moetune.configio.readers import SHELL_NAME
from moetune.configio.shell_expand import expand, expand_one
from moetune.configio.shell_words import Vars

_LET = re.compile(rf"\s*({SHELL_NAME})\s*([-+*/]?)=(?!=)(.+)", re.S)  # not `let "X == 1"`
_LONE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)(?:\[[@*]\])?\}?")  # `$X`, `${X}`, `${X[@]}` as a whole word


def expand_words(raws: list[str], v: Vars, names: set[str]) -> list[str]:
    """The words `raws` give. An unset variable keeps its text for the flag reader to name (`--num-layers
    ${NUM_LAYERS}`), except a lone unquoted one, not after a -flag that takes a value, that the script itself sets on
    another path (`${offload_option}` where offloading is off; Pai-Megatron-Patch's `--bf16 ${load_option}` where
    there is no checkpoint to load): bash drops that word, and so does moetune."""
    out: list[str] = []
    for raw in raws:
        m = _LONE.fullmatch(raw)
        if not (m and m.group(1) in names and v.get(m.group(1)) is None and
                not (out and out[-1].startswith("-") and not _switch(out[-1]))):
            out += expand(raw, v, keep_unset=True)
    return out


def _switch(word: str) -> bool:
    """Whether `word` is a Megatron-LM flag that takes no value (megatron_names.csv: store_true / store_false)."""
    row = names_table().by_flag.get(word.partition("=")[0])
    return row is not None and row.mlm_action in ("store_true", "store_false", "bool_optional")


def assign(v: Vars, names: set[str], assigns: list, export: bool) -> None:
    """A command's `NAME=v` / `NAME+=v` / `NAME=(...)` words, set in `v` (exported too where `export`)."""
    for name, append, value in assigns:
        if isinstance(value, list):
            items = expand_words(value, v, names)
            v.arrays[name] = (v.arrays.get(name, []) if append else []) + items
            v.scalars.pop(name, None)
        else:
            now = expand_one(value, v)
            v.set(name, (v.get(name) or "") + now if append else now)
        if export:
            v.exported.add(name)


def declared(v: Vars, words: list[str]) -> None:
    """`export NAME` of a variable already set exports it."""
    if words and words[0] == "export":
        v.exported |= {w for w in words[1:] if not w.startswith("-")}
        v.assigned += [w for w in words[1:] if w in v.scalars and not w.startswith("-")]


def unset(v: Vars, names: list[str]) -> None:
    """`unset NAME...`: the names are gone, scalar, array and export alike."""
    for name in names:
        v.scalars.pop(name, None)
        v.arrays.pop(name, None)
        v.exported.discard(name)


def let(v: Vars, expressions: list[str], line: int) -> bool:
    """`let N=EXPR` (and `+=`, `-=`, `*=`, `/=`) sets N to the integer bash computes; unknown where it cannot be
    (`let TOTAL_GPUS=$NGPUS*$NNODES` with NGPUS from an unset $1)."""
    for text in expressions:
        if m := _LET.fullmatch(text):
            name, op, expr = m.groups()
            try:
                value = str(arith.evaluate(f"{v.get(name) or 0} {op} ({expr})" if op else expr, v.get))
            except (ValueError, ZeroDivisionError):
                value = f"$(let-line-{line})"
            v.set(name, value)
    return True
