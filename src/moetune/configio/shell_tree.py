"""The statements configio/shell_parse.py reads a bash script into: simple commands, `&&`/`||` chains, `if` branches,
loops and functions kept whole (Unread), and `case` arms."""

from __future__ import annotations

from dataclasses import dataclass, field

DECLARE = frozenset(("export", "declare", "typeset", "local", "readonly"))  # their NAME=value words assign


@dataclass(slots=True)
class Simple:
    """One simple command: leading assignments (NAME=word, NAME+=word, NAME=(words)), then its words."""
    line: int
    assigns: list[tuple[str, bool, list[str] | str]] = field(default_factory=list)  # (name, +=, array or word)
    words: list[str] = field(default_factory=list)
    child: bool = False  # run in a child shell (a subshell, a pipeline, the background): an `exit` ends that alone


@dataclass(slots=True)
class Chain:
    """Simple commands joined by && / || (the first joined by None)."""
    parts: list[tuple[str | None, Simple]]

    @property
    def line(self) -> int:
        return self.parts[0][1].line


@dataclass(slots=True)
class If:
    line: int
    branches: list[tuple[list[Chain], list]]  # (condition, body); an `else` body's condition is empty
    has_else: bool = False
    unless: bool = False  # `cond || { body }`: the body runs where the condition fails


@dataclass(slots=True)
class Unread:
    """A loop or function (or a `case` after `then`/`do` on its line): configio/shell_loops.py runs a function where
    it is called and a loop as bash would, where it can tell what bash computes as it goes; else it is not entered."""
    kind: str
    line: int
    words: list[str]
    name: str = ""  # a function's
    statements: list = field(default_factory=list)  # its chains and cases, to tell whether calling it sets anything
    head: list = field(default_factory=list)  # a loop's chains before `do`: `for`'s NAME in WORDS, a `while` test
    body: list | None = None  # its statements as a tree (None: not parsed as one), what a run of it runs


@dataclass(slots=True)
class Case:
    """`case WORD in PATTERN|PATTERN) body ;; ... esac`: the word and patterns as written, each arm's statements."""
    line: int
    subject: str
    arms: list[tuple[list[str], list]]
    words: list[str]  # every word of its arms, to tell whether a loop around it runs a *.py
