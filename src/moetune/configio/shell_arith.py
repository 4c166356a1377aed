"""Bash integer arithmetic, `$((...))` (bash(1) ARITHMETIC EVALUATION): the operators, their precedence and C's
integer division, with the script's variables by name. Assignments (`=`, `+=`, `++`) and the comma are not read:
a ValueError, and the expansion keeps its text.

Launch scripts compute sizes and switches so: Pai-Megatron-Patch's examples/*/run_mcore_*.sh write
`TP_COMM_OVERLAP=$(( ($TP > 1) ? 1 : 0 ))` and `$(( ${TRAIN_TOKENS} / ${GLOBAL_BATCH_SIZE} / ${SEQ_LEN} ))`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_TOKEN = re.compile(r"\s*(0[xX][0-9a-fA-F]+|\d+|[A-Za-z_][A-Za-z0-9_]*|\*\*|<<|>>|<=|>=|==|!=|&&|\|\||"
                    r"[-+*/%<>&|^!~?:()])")
# binary operators, loosest first (all left-associative); `**` binds tighter, then the unary operators
_LEVELS = (("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", ">", "<=", ">="), ("<<", ">>"), ("+", "-"),
           ("*", "/", "%"))


def evaluate(text: str, lookup: Callable[[str], str | None]) -> int:
    """The value of `text`; a name reads as its variable's integer value (unset or empty: 0, as bash)."""
    parser = _Parser(text, lookup)
    value = parser.ternary()
    if parser.i != len(parser.tokens):
        raise ValueError(text)
    return value


class _Parser:
    def __init__(self, text: str, lookup: Callable[[str], str | None]):
        self.tokens, self.i, self.lookup, pos, text = [], 0, lookup, 0, text.rstrip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m:
                raise ValueError(text)
            self.tokens.append(m.group(1))
            pos = m.end()

    def _peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _take(self, want: str | None = None) -> str:
        tok = self._peek()
        if tok is None or want is not None and tok != want:
            raise ValueError(f"expected {want or 'an operand'}")
        self.i += 1
        return tok

    def ternary(self) -> int:
        cond = self._binary(0)
        if self._peek() != "?":
            return cond
        self.i += 1
        yes = self.ternary()
        self._take(":")
        no = self.ternary()
        return yes if cond else no

    def _binary(self, level: int) -> int:
        if level == len(_LEVELS):
            return self._power()
        left = self._binary(level + 1)
        while self._peek() in _LEVELS[level]:
            op = self._take()
            left = _apply(op, left, self._binary(level + 1))
        return left

    def _power(self) -> int:
        base = self._unary()
        if self._peek() != "**":
            return base
        self.i += 1
        exponent = self._power()  # right-associative
        if exponent < 0:
            raise ValueError("negative exponent")
        return base ** exponent

    def _unary(self) -> int:
        tok = self._take()
        if tok in ("-", "+", "!", "~"):
            value = self._unary()
            return {"-": -value, "+": value, "!": int(not value), "~": ~value}[tok]
        if tok == "(":
            value = self.ternary()
            self._take(")")
            return value
        if tok[0].isdigit():  # 0x1f is hexadecimal and 017 octal, as in C
            return int(tok, 16) if tok[:2].lower() == "0x" else int(tok, 8) if tok[0] == "0" else int(tok)
        if tok[0].isalpha() or tok[0] == "_":
            value = (self.lookup(tok) or "0").strip()
            return int(value)  # a value that is itself an expression is not read: ValueError
        raise ValueError(tok)


def _apply(op: str, a: int, b: int) -> int:
    if op in ("/", "%"):
        if b == 0:
            raise ZeroDivisionError(op)
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # C division truncates toward zero
        return q if op == "/" else a - b * q
    table: dict[str, Callable[[int, int], int]] = {
        "||": lambda x, y: int(bool(x or y)), "&&": lambda x, y: int(bool(x and y)), "|": int.__or__,
        "^": int.__xor__, "&": int.__and__, "==": lambda x, y: int(x == y), "!=": lambda x, y: int(x != y),
        "<": lambda x, y: int(x < y), ">": lambda x, y: int(x > y), "<=": lambda x, y: int(x <= y),
        ">=": lambda x, y: int(x >= y), "<<": int.__lshift__, ">>": int.__rshift__, "+": int.__add__,
        "-": int.__sub__, "*": int.__mul__}
    return table[op](a, b)
