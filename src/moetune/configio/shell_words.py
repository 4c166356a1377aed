"""Bash words: split a launch script into words and operators, and expand a word the way bash does (quotes,
parameters, arrays, integer arithmetic, word splitting), running nothing.

Only what Megatron-LM launch scripts use is read (configio/shell.py says which); `$(...)` and backquoted command
substitutions are kept as written, since knowing their output means running them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from moetune.configio.readers import SHELL_NAME
from moetune.errors import MoetuneError

# longest first, so `&&` is not read as two `&`
_OPS = ("&&", "||", ";;", ">>", "<<<", "<<-", "<<", ">&", "<&", "&>", ";", "&", "|", "(", ")", "<", ">", "\n")
_OP_CHARS = set(";&|()<>")
_SEPARATORS = ("\n", ";", "&&", "||", "|", "&", ";;")
# NAME=value or NAME+=value: (name, "+" or "", value)
ASSIGN = re.compile(rf"^({SHELL_NAME})(\+?)=(.*)$", re.S)


@dataclass(frozen=True, slots=True)
class Token:
    text: str  # a word as written, quotes kept; or an operator
    op: bool
    line: int
    child: bool = False  # part of a command bash runs in a child shell (in_child_shells)


@dataclass(slots=True)
class Vars:
    """The shell's variables as the script has set them so far (seeded with the environment), its arrays, and
    which it exported."""
    scalars: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, list[str]] = field(default_factory=dict)
    exported: set[str] = field(default_factory=set)
    assigned: list[str] = field(default_factory=list)  # names the script itself set, in order

    def get(self, name: str) -> str | None:
        if name in self.arrays:
            return self.arrays[name][0] if self.arrays[name] else ""
        return self.scalars.get(name)

    def set(self, name: str, value: str) -> None:
        self.arrays.pop(name, None)
        self.scalars[name] = value
        self.assigned.append(name)


_LIST_ENDS = ("\n", ";", ";;", "&")  # operators that end an and-or list (and a pipeline)
_PIPELINE_ENDS = (*_LIST_ENDS, "&&", "||")  # operators that end a pipeline
_STARTS = ("then", "do", "else", "{", "!")  # words after which a word starts a command


def in_child_shells(toks: list[Token]) -> list[Token]:
    """`toks` with those of the commands bash runs in a child shell flagged: a `( )` subshell, each command of a
    pipeline `a | b` and a list sent to the background with `&` (bash(1) "Pipelines", "Lists", "Compound
    Commands"), where an `exit` ends that child alone."""
    close: dict[int, int] = {}  # a command's opening `(` or `{` -> its closing `)` or `}`
    stack: list[int] = []
    for k, t in enumerate(toks):
        prev = toks[k - 1] if k else None
        starts = prev is None or (prev.op and prev.text in (*_PIPELINE_ENDS, "|", "(")) or \
            (not prev.op and prev.text in _STARTS)
        if starts and t.text == ("(" if t.op else "{"):
            stack.append(k)
        elif stack and (t.op, t.text) == ((True, ")") if toks[stack[-1]].op else (False, "}")):
            close[stack.pop()] = k
    opener = {c: o for o, c in close.items()}
    child = [False] * len(toks)
    for k, t in enumerate(toks):
        if t.op and t.text == "(" and k in close:
            child[k:close[k] + 1] = [True] * (close[k] + 1 - k)
        elif t.op and t.text in ("|", "&"):
            ends = _PIPELINE_ENDS if t.text == "|" else _LIST_ENDS  # `a && b &` sends the whole list
            j = k - 1
            while j >= 0 and not (toks[j].op and toks[j].text in ends):
                j = opener.get(j, j) - 1
            child[j + 1:k] = [True] * (k - j - 1)
            j = k + 1
            while t.text == "|" and j < len(toks) and not (toks[j].op and toks[j].text in (*_PIPELINE_ENDS, "|")):
                j = close.get(j, j) + 1
            child[k + 1:j] = [True] * (j - k - 1)
    return [replace(t, child=True) if c else t for t, c in zip(toks, child)]


def tokens(text: str, origin: str) -> list[Token]:
    """Words and operators of a script. Comments are dropped, `\\`-newline joins lines, and a here-document's body
    is read as script where the command it feeds runs one (sbatch, bash, sh, srun), else skipped."""
    return _Lexer(text, origin).run()


class _Lexer:
    def __init__(self, text: str, origin: str):
        self.text, self.origin, self.i, self.line = text, origin, 0, 1
        self.out: list[Token] = []
        self.word: list[str] = []
        self.heredoc: tuple[str, bool] | None = None  # (delimiter, read as script) from the line's `<<`
        self.closing: str | None = None  # a script body's delimiter line, dropped when it comes

    def run(self) -> list[Token]:
        while self.i < len(self.text):
            self._step()
        self._flush()
        return self.out

    def _step(self) -> None:
        t, i = self.text, self.i
        c = t[i]
        if c == "\\" and t.startswith("\\\n", i):
            self.i, self.line = i + 2, self.line + 1
        elif c == "\n":
            self._newline()
        elif c in " \t\r":
            self._flush()
            self.i += 1
        elif c == "#" and not self.word:
            end = t.find("\n", i)
            self.i = len(t) if end < 0 else end
        elif c == "(" and self._in_arguments():
            end = balanced(t, i, "(", ")")
            self.word.append(t[i:end + 1] if end > 0 else c)
            self.line += t.count("\n", i, max(end, i))
            self.i = end + 1 if end > 0 else i + 1
        elif c in _OP_CHARS:
            self._operator()
        else:
            self.word.append(self._word_part())

    def _in_arguments(self) -> bool:
        """Whether a `(` is an argument's text (`--moe-layer-freq ([0]*3+[1]*58)`, which bash would refuse unquoted
        but users write so in --mlm-args), not an operator: it is inside a word, or follows a command's word, and
        opens neither an array (`A=(`) nor a function's `()`."""
        if self.text.startswith("()", self.i):
            return False
        if self.word:
            return not "".join(self.word).endswith("=")
        for tok in reversed(self.out):
            if tok.op and tok.text in _SEPARATORS:
                return False
            if not tok.op and not ASSIGN.match(tok.text):
                return True
        return False

    def _flush(self) -> None:
        if self.word:
            self.out.append(Token("".join(self.word), False, self.line))
            self.word.clear()

    def _newline(self) -> None:
        self._flush()
        self.out.append(Token("\n", True, self.line))
        self.i, self.line = self.i + 1, self.line + 1
        if self.heredoc is not None:
            delimiter, as_script = self.heredoc
            self.heredoc = None
            if as_script:
                self.closing = delimiter
            else:
                self._skip_lines_to(delimiter)
        if self.closing is not None and self._line_here().strip() == self.closing:
            self._skip_lines_to(self.closing)
            self.closing = None

    def _line_here(self) -> str:
        end = self.text.find("\n", self.i)
        return self.text[self.i:] if end < 0 else self.text[self.i:end]

    def _skip_lines_to(self, delimiter: str) -> None:
        """Past the line that holds only `delimiter` (the end of a here-document), or to the end of the text."""
        while self.i < len(self.text):
            line = self._line_here()
            self.i += len(line) + 1
            self.line += 1
            if line.strip() == delimiter:
                return

    def _operator(self) -> None:
        t, i = self.text, self.i
        op = next(o for o in _OPS if t.startswith(o, i))
        if op[0] in "<>" and "".join(self.word).isdigit():
            self.word.clear()  # a file descriptor (`2>&1`), not an argument
        self._flush()
        self.out.append(Token(op, True, self.line))
        self.i = i + len(op)
        if op in ("<<", "<<-"):
            self._heredoc_start()

    def _heredoc_start(self) -> None:
        while self.i < len(self.text) and self.text[self.i] in " \t":
            self.i += 1
        parts = []
        while self.i < len(self.text) and self.text[self.i] not in " \t\r\n" and self.text[self.i] not in _OP_CHARS:
            parts.append(self._word_part())
        delimiter = _unquoted("".join(parts))
        first = _statement_head(self.out)
        self.heredoc = (delimiter, first in ("sbatch", "bash", "sh", "srun", "salloc"))

    def _word_part(self) -> str:
        """One piece of a word: a quoted string, an escape, a `$` expansion, or one plain character."""
        t, i = self.text, self.i
        c = t[i]
        if c == "'":
            end = t.find("'", i + 1)
        elif c in '"`':
            end = closing_quote(t, i)
        elif c == "\\":
            end = i + 1
        elif t.startswith("$((", i) or t.startswith("$(", i):
            end = balanced(t, i + 1, "(", ")")
        elif t.startswith("${", i):
            end = balanced(t, i + 1, "{", "}")
        else:
            end = i
        if end < 0 or end >= len(t):
            opened = t[i:i + 2] if c == "$" else c
            raise MoetuneError(f"{self.origin} line {self.line}: cannot split the Megatron-LM arguments: the {opened} "
                               "opened here is never closed; close it")
        self.line += t.count("\n", i, end + 1)
        self.i = end + 1
        return t[i:end + 1]


def _statement_head(out: list[Token]) -> str:
    """The first word of the statement `out` ends in."""
    head = ""
    for tok in reversed(out):
        if tok.op and tok.text in _SEPARATORS:
            break
        if not tok.op:
            head = tok.text
    return head


def closing_quote(t: str, i: int) -> int:
    """The index of the quote that closes the one at `i`, or -1; a `$(...)` inside double quotes holds quotes of its
    own (`"$(dirname "$P")"`)."""
    j = i + 1
    while j < len(t) and t[j] != t[i]:
        if t[i] == '"' and t.startswith("$(", j):
            j = balanced(t, j + 1, "(", ")")
            if j < 0:
                return -1
        j += 2 if t[j] == "\\" else 1
    return j if j < len(t) else -1


def balanced(t: str, i: int, open_: str, close: str) -> int:
    """The index of the `close` that matches the `open_` at `i` (quotes inside skipped), or -1."""
    depth, j = 0, i
    while j < len(t):
        c = t[j]
        if c in "'\"":
            j = closing_quote(t, j) if c == '"' else t.find("'", j + 1)
            if j < 0:
                return -1
        elif c == "\\":
            j += 1
        elif c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return -1


def _unquoted(word: str) -> str:
    return word.replace("'", "").replace('"', "").replace("\\", "")
