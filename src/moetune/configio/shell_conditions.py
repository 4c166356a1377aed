"""`[ ]`, `[[ ]]` and `test` as bash evaluates them (bash(1) CONDITIONAL EXPRESSIONS), over the words the script's
variables expand to: string and integer comparisons, `-n`/`-z`/`-v`, `==` against a glob and `=~` inside `[[ ]]`,
`!`, and clauses joined by `&&`/`||` (`[[ ]]`) or `-a`/`-o` (`[ ]`). None where the answer needs what only running
would tell: a file test, a command's output (`$(...)`), a value holding an unset variable, parentheses.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable

# what a value holds where moetune could not expand it: `$(...)`, a backquote, or an unset variable's text that an
# assignment kept (`ENV=$1` with no $1 holds "$1", so `[ $ENV = dsw ]` is unknown, not false)
UNKNOWN = re.compile(r"\$[({A-Za-z_0-9@#*]|`")
_NUMERIC = {"-eq": int.__eq__, "-ne": int.__ne__, "-lt": int.__lt__, "-le": int.__le__, "-gt": int.__gt__,
            "-ge": int.__ge__}


def evaluate(words: list[str], is_set: Callable[[str], bool]) -> bool | None:
    """Whether the test command `words` (`[ ... ]`, `[[ ... ]]`, `test ...`, maybe after `!`) succeeds."""
    negate = words[:1] == ["!"]
    words = words[1:] if negate else words
    double = words[:1] == ["[["]  # only [[ ]] matches == against a glob, and joins clauses with && and ||
    if words and words[0] in ("[", "[[") and words[-1] in ("]", "]]"):
        words = words[1:-1]
    elif words[:1] == ["test"]:
        words = words[1:]
    ors, ands = ("||", "&&") if double else ("-o", "-a")
    holds = _any([_all([_primary(w, double, is_set) for w in _split(part, ands)]) for part in _split(words, ors)])
    return None if holds is None else holds != negate


def _split(words: list[str], op: str) -> list[list[str]]:
    """The clauses `op` joins; the words whole where a side would be empty (`[ -a FILE ]`, `[ "$X" = -o ]`)."""
    parts: list[list[str]] = [[]]
    for w in words:
        parts.append([]) if w == op else parts[-1].append(w)
    return parts if all(parts) else [words]


def _any(values: list[bool | None]) -> bool | None:
    return True if True in values else None if None in values else False


def _all(values: list[bool | None]) -> bool | None:
    return False if False in values else None if None in values else True


def _primary(words: list[str], double: bool, is_set: Callable[[str], bool]) -> bool | None:
    if len(words) > 1 and words[0] == "!":
        holds = _primary(words[1:], double, is_set)
        return None if holds is None else not holds
    if any(UNKNOWN.search(w) or w in ("(", ")") for w in words):
        return None  # a command's output, an unset variable's text kept in another's value, a grouping
    if len(words) == 1:
        return words[0] != ""
    if len(words) == 2 and words[0] in ("-n", "-z"):
        return (words[1] != "") == (words[0] == "-n")
    if len(words) == 2 and words[0] == "-v":
        return is_set(words[1])
    if len(words) != 3:
        return None
    a, op, b = words
    if op in ("=", "==", "!="):
        same = fnmatch.fnmatchcase(a, b) if double else a == b
        return same != (op == "!=")
    if op == "=~":
        return re.search(b, a) is not None
    if op in _NUMERIC:
        try:  # inside [[ ]] an operand is arithmetic, where the empty word is 0
            return _NUMERIC[op](int(a or "0" if double else a), int(b or "0" if double else b))
        except ValueError:
            return None
    return None
