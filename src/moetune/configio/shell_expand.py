"""Expand one bash word as bash would (quote removal, parameter and array expansion, integer arithmetic, word
splitting of unquoted expansions: bash(1) EXPANSION), with the variables a script has set so far.

A variable the script leaves unset keeps its text (`${TP}`) where `keep_unset` asks it, so the reader of the flag it
feeds can name the variable to set (configio/mlm.py), where bash would pass an empty word; in a test it is empty,
as bash reads it. `$(...)` and backquotes keep their text: their output is known only by running them (but for the
path commands a script finds its own folder with: dirname, basename, readlink -f, realpath, cd, pwd).
"""

from __future__ import annotations

import os
import re

from moetune.configio import shell_arith as arith
from moetune.configio.readers import SHELL_NAME
from moetune.configio.shell_words import Vars, balanced, closing_quote, tokens
from moetune.errors import MoetuneError

# ${NAME}, ${NAME[@]}, ${NAME[0]}, ${NAME:-default} and the other operators, ${#NAME}, ${#NAME[@]}, ${1}
_BRACED = re.compile(rf"^(#?)({SHELL_NAME}|\d+|[@*#?$!])(?:\[(@|\*|\d+)\])?(?:(:?[-=?+])(.*))?$", re.S)
_SIMPLE = re.compile(rf"{SHELL_NAME}|\d|[@*#?$!]")
_IFS = re.compile(r"[ \t\n]+")


class _Fields:
    """The words one word expands to: pieces join the current word; unquoted expansions split it at whitespace."""

    def __init__(self, split: bool):
        self.split, self.words, self.cur, self.real = split, [], [], False

    def literal(self, text: str, quoted: bool) -> None:
        self.cur.append(text)
        self.real |= quoted or bool(text)

    def unquoted(self, text: str) -> None:
        pieces = _IFS.split(text) if self.split else [text]
        for k, piece in enumerate(pieces):
            if k:
                self.end()
            self.literal(piece, False)

    def elements(self, items: list[str], quoted: bool) -> None:
        """An array's elements: a word each (`"${A[@]}"`), split further unquoted; joined by spaces where no
        splitting happens (an assignment's value)."""
        if not self.split:
            self.literal(" ".join(items), True)
            return
        for k, item in enumerate(items):
            if k and quoted:
                self.end(force=True)
            self.literal(item, quoted) if quoted else self.unquoted((" " if k else "") + item)

    def end(self, force: bool = False) -> None:
        if self.real or force:
            self.words.append("".join(self.cur))
        self.cur, self.real = [], False

    def result(self) -> list[str]:
        self.end()
        return self.words


def expand(word: str, env: Vars, *, split: bool = True, keep_unset: bool = True) -> list[str]:
    """The words `word` (as written, quotes kept) expands to; `split=False` (an assignment's value) gives one."""
    out = _Fields(split)
    _expand_into(word, env, out, quoted=False, keep_unset=keep_unset)
    words = out.result()
    return words if split else ["".join(words)]


def expand_one(word: str, env: Vars, *, keep_unset: bool = True) -> str:
    return expand(word, env, split=False, keep_unset=keep_unset)[0]


def _expand_into(word: str, env: Vars, out: _Fields, *, quoted: bool, keep_unset: bool) -> None:
    i = 0
    while i < len(word):
        c = word[i]
        if c == "'" and not quoted:
            end = word.find("'", i + 1)
            out.literal(word[i + 1:end], True)
        elif c == '"' and not quoted:
            end = closing_quote(word, i)
            _expand_into(word[i + 1:end], env, _Quoted(out), quoted=True, keep_unset=keep_unset)
            out.literal("", True)  # "" is a word of its own
        elif c == "\\":
            end = i + 1
            escaped = word[end:end + 1]
            keep = quoted and escaped not in '$`"\\\n'  # inside double quotes a backslash escapes only these
            # and a backslash-newline inside them joins the lines: CMD="torchrun \<newline> --nnodes=2" is one line
            out.literal(("\\" if keep else "") + escaped if escaped != "\n" else "", True)
        elif c == "$":
            end = _dollar(word, i, env, out, quoted, keep_unset)
        elif c == "`":
            end = closing_quote(word, i)
            out.literal(word[i:end + 1], True)
        else:
            end = i
            out.literal(c, quoted)
        i = end + 1


class _Quoted:
    """A double-quoted span: its expansions are not split, but "${A[@]}" still gives a word per element."""

    def __init__(self, out: _Fields):
        self.out = out

    def literal(self, text: str, quoted: bool) -> None:
        self.out.literal(text, True)

    def unquoted(self, text: str) -> None:
        self.out.literal(text, True)

    def elements(self, items: list[str], quoted: bool) -> None:
        self.out.elements(items, True)


def _dollar(word: str, i: int, env: Vars, out, quoted: bool, keep_unset: bool) -> int:
    """Expand the `$` form at `i` into `out`; return the index of its last character (an unclosed form is text to
    the word's end)."""
    if word.startswith(("$(", "${"), i) and balanced(word, i + 1, word[i + 1], ")" if word[i + 1] == "(" else "}") < 0:
        out.literal(word[i:], True)
        return len(word) - 1
    if word.startswith("$((", i):
        end = balanced(word, i + 1, "(", ")")
        out.unquoted(_arithmetic(word[i:end + 1], env))
        return end
    if word.startswith("$(", i):
        end = balanced(word, i + 1, "(", ")")
        path = _path_command(word[i + 2:end], env)
        out.literal(word[i:end + 1], True) if path is None else out.unquoted(path)
        return end
    if word.startswith("${", i):
        end = balanced(word, i + 1, "{", "}")  # past a nested ${...} in a default
        _parameter(word[i:end + 1], word[i + 2:end], env, out, quoted, keep_unset)
        return end
    m = _SIMPLE.match(word, i + 1)
    if not m:
        out.literal("$", quoted)
        return i
    _parameter(word[i:m.end()], m.group(0), env, out, quoted, keep_unset)
    return m.end() - 1


def _parameter(text: str, inner: str, env: Vars, out, quoted: bool, keep_unset: bool) -> None:
    m = _BRACED.match(inner)
    if not m:  # a form moetune does not read (${X/a/b}, ${X:0:2}): as written
        out.literal(text, True)
        return
    length, name, index, op, arg = m.groups()
    if name in ("@", "*") and index is None:  # the positional parameters: $@ is ${@[@]}
        name, index = "@", name
    if index in ("@", "*") and name in env.arrays and not length:
        items = env.arrays[name]
        if index == "@":
            out.elements(items, quoted)
        else:  # "${A[*]}" is one word, the elements joined by blanks
            out.literal(" ".join(items), True) if quoted else out.unquoted(" ".join(items))
        return
    value = _value(env, name, index)
    if length:
        value = str(len(env.arrays.get(name, [])) if index in ("@", "*") else len(value or ""))
    elif op:
        value = _operator(env, name, value, op, arg, keep_unset)
    if value is None:
        if keep_unset:
            out.literal(text, True)
        return
    # a quoted default is not split either: ${MASTER_ADDR:-"a b"} is one word
    quoted = quoted or bool(op) and any(q in (arg or "") for q in "'\"")
    out.literal(value, True) if quoted else out.unquoted(value)


def _value(env: Vars, name: str, index: str | None) -> str | None:
    if index is None or index in ("@", "*"):
        return env.get(name)
    items = env.arrays.get(name)
    if items is None:
        return env.get(name) if index == "0" else None
    return items[int(index)] if int(index) < len(items) else None


def _operator(env: Vars, name: str, value: str | None, op: str, arg: str, keep_unset: bool) -> str | None:
    """${NAME:-word} and its kin (bash(1) Parameter Expansion); `:` also treats the empty value as unset."""
    unset = value is None or (op.startswith(":") and value == "")
    word = expand_one(arg, env, keep_unset=keep_unset)
    kind = op[-1]
    if kind == "-":
        return word if unset else value
    if kind == "=":
        if unset:
            env.set(name, word)
            return word
        return value
    if kind == "+":
        return "" if unset else word
    return value  # `?`: bash would stop the script with the message; moetune names the unset variable where read


def _path_command(script: str, env: Vars) -> str | None:
    """The output of a command substitution that only works out a path (`$(dirname "$(readlink -f "$0")")`,
    `$( cd "$( dirname "$0" )" && pwd )`, as launch scripts find their own folder), computed as those commands
    would; None for any other command, which keeps its text."""
    try:
        toks = tokens(script, "$(...)")
    except MoetuneError:
        return None
    commands: list[list[str]] = [[]]
    for tok in toks:
        if tok.op and tok.text not in ("&&", "\n"):
            return None
        commands.append([]) if tok.text == "&&" else commands[-1].append(tok.text) if not tok.op else None
    cwd, out = os.getcwd(), None
    for raw in filter(None, commands):
        words = [w for r in raw for w in expand(r, env)]
        if any("$" in w or "`" in w for w in words):  # an unset variable, or another command's output
            return None
        name, args = words[0], [w for w in words[1:] if not w.startswith("-")]
        if name == "cd" and len(args) == 1:
            cwd = os.path.join(cwd, args[0])
        elif name == "pwd" and not args:
            out = os.path.normpath(cwd)
        elif name == "dirname" and len(args) == 1:
            out = os.path.dirname(args[0].rstrip("/")) or ("/" if args[0].startswith("/") else ".")
        elif name == "basename" and len(args) == 1:
            out = os.path.basename(args[0].rstrip("/"))
        elif name == "realpath" and len(args) == 1 or name == "readlink" and "-f" in words and len(args) == 1:
            out = os.path.realpath(os.path.join(cwd, args[0]))
        else:
            return None
    return out


def _arithmetic(text: str, env: Vars) -> str:
    """$((...)) in integers (configio/shell_arith.py), with `$NAME` and bare names read from the script (unset: 0,
    as bash); as written where it holds anything else."""
    body = expand_one(text[3:-2], env, keep_unset=False)
    try:
        return str(arith.evaluate(body, env.get))
    except (ValueError, ZeroDivisionError):
        return text
