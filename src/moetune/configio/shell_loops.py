"""Functions and loops of a launch script, run as bash runs them where moetune can tell what bash computes: a
function's body where it is called, with the call's words as its positional parameters and its `local` names
restored after (bash(1) "FUNCTIONS"); a `for` over words it can expand, once per word; a `while` / `until` as long as
its test is one moetune decides (`while [[ $# -gt 0 ]]; do case $1 in ... shift`), with `break` and `continue`
(bash(1) "Compound Commands", "SHELL BUILTIN COMMANDS"). An `exit` met on the way ends the script there, as it would
outside them. A loop that may start the training (a sweep) is not run: moetune checks one launch. configio/shell.py's
_Run takes these runs from this mixin.
"""

from __future__ import annotations

from moetune.configio.shell_commands import positional, unread_launches
from moetune.configio.shell_conditions import UNKNOWN
from moetune.configio.shell_expand import expand
from moetune.configio.shell_tree import Chain, Unread
from moetune.configio.shell_words import Vars

MAX_CALLS = 16  # functions calling functions deeper than this are not entered (a recursion moetune cannot bound)
MAX_TURNS = 1024  # a loop still going after this many turns is taken as one moetune cannot follow


class FunctionReturn(Exception):
    """`return` in a function: the function ends there, its caller goes on."""


class LoopJump(Exception):
    """`break [N]` / `continue [N]`: leave (or go on with) the Nth enclosing loop."""

    def __init__(self, word: str, levels: int):
        super().__init__(word, levels)
        self.word, self.levels = word, levels


class LoopsAndFunctions:
    """Runs functions and loops; the attributes are _Run's (configio/shell.py)."""

    vars: Vars
    calls: int
    loops: int
    returns: list[type[Exception]]  # what `return` ends, innermost last: a function's call or a sourced file

    def block(self, nodes: list) -> None:
        raise NotImplementedError  # _Run's

    def condition(self, chains: list[Chain]) -> bool | None:
        raise NotImplementedError  # _Run's

    def call(self, fn: Unread, args: list[str]) -> bool:
        """Run function `fn` with positional parameters `args`; False where its body did not parse as a tree or
        the calls run too deep (the caller then reads the call as it did before functions were entered)."""
        if fn.body is None or self.calls >= MAX_CALLS:
            return False
        saved, kept = (self.vars.scalars.get("0", ""), list(self.vars.arrays.get("@", []))), self._locals(fn)
        positional(self.vars, saved[0], args)
        self.calls += 1
        self.returns.append(FunctionReturn)
        try:
            self.block(fn.body)
        except FunctionReturn:
            pass
        finally:
            self.calls -= 1
            self.returns.pop()
            positional(self.vars, *saved)
            self._restore(kept)
        return True

    def _locals(self, fn: Unread) -> dict[str, tuple[str | None, list[str] | None, bool]]:
        """The values, before the call, of the names `fn` declares `local`, which bash restores when it returns."""
        declared = [s for u in fn.statements if isinstance(u, Chain) for _, s in u.parts if s.words[:1] == ["local"]]
        names = [w.split("=", 1)[0] for s in declared for w in s.words[1:] if not w.startswith("-")]
        names += [a[0] for s in declared for a in s.assigns]
        v = self.vars
        return {n: (v.scalars.get(n), v.arrays.get(n), n in v.exported) for n in names}

    def _restore(self, kept: dict[str, tuple[str | None, list[str] | None, bool]]) -> None:
        v = self.vars
        for name, (scalar, array, exported) in kept.items():
            v.scalars.pop(name, None)
            v.arrays.pop(name, None)
            v.exported.discard(name)
            if scalar is not None:
                v.scalars[name] = scalar
            if array is not None:
                v.arrays[name] = array
            if exported:
                v.exported.add(name)

    def run_loop(self, node: Unread) -> bool:
        """Run a loop as bash would; False where moetune cannot (its words or test unknown, a sweep of launches,
        no tree, past MAX_TURNS), the loop then read as before: what it assigns unknown."""
        if node.body is None or node.kind not in ("for", "while", "until") or unread_launches(node):
            return False
        if node.kind == "for":
            items = self._for_words(node.head)
            if items is None:
                return False
            name, items = items
            return self._turns(node, iter(items), name)
        return self._turns(node, None, "")

    def _for_words(self, head: list) -> tuple[str, list[str]] | None:
        """(NAME, words) of `for NAME in WORDS` (`for NAME` alone: "$@"), expanded as bash does; None where a word
        is unknown, a glob, or the head is another form (`for ((i = 0; ...))`)."""
        if len(head) != 1 or len(head[0].parts) != 1:
            return None
        words = head[0].parts[0][1].words
        if not words or not words[0].isidentifier():
            return None
        if len(words) == 1:
            return words[0], list(self.vars.arrays.get("@", []))
        if words[1] != "in":
            return None
        items = [w for raw in words[2:] for w in expand(raw, self.vars, keep_unset=False)]
        if any(UNKNOWN.search(w) or any(c in w for c in "*?[") for w in items):
            return None
        return words[0], items

    def _turns(self, node: Unread, items, name: str) -> bool:
        """Turn the loop until its words run out or its test fails; False where a turn's test is unknown or it
        goes past MAX_TURNS (what earlier turns set stays set; the caller marks what the loop assigns unknown)."""
        self.loops += 1
        try:
            for _ in range(MAX_TURNS):
                if items is not None:
                    word = next(items, None)
                    if word is None:
                        return True
                    self.vars.set(name, word)
                else:
                    holds = self.condition(node.head)
                    if holds is None:
                        return False
                    if holds == (node.kind == "until"):
                        return True
                try:
                    self.block(node.body)
                except LoopJump as jump:
                    if jump.levels > 1:
                        raise LoopJump(jump.word, jump.levels - 1) from None
                    if jump.word == "break":
                        return True
            return False
        finally:
            self.loops -= 1

    def jump(self, words: list[str]) -> bool:
        """`break [N]` / `continue [N]` inside a loop moetune runs (outside one bash says so and goes on)."""
        if self.loops:
            n = words[1] if len(words) > 1 else "1"
            raise LoopJump(words[0], min(int(n), self.loops) if n.isdigit() and int(n) > 0 else 1)
        return True
