"""Other scripts a launch script runs: `source FILE ARGS` in its own shell, where `return` ends that file alone and
bash restores the caller's positional parameters after it; `bash FILE ARGS` and `bash -c STRING` in a child shell that
sees what this one exports, where an `exit` ends the child alone (bash(1) "source", "return", "COMMAND EXECUTION
ENVIRONMENT"). configio/shell.py's _Run reads each one's statements; this mixin gives it these runs, so a child is a
_Run of its own.
"""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path

from moetune.configio.shell_commands import ScriptExit, SourceReturn, positional
from moetune.configio.shell_parse import parse
from moetune.configio.shell_words import Vars, tokens
from moetune.errors import MoetuneError


class ChildShells:
    """Runs a script file, or a string, in this shell or a child one; the attributes are _Run's (configio/shell.py)."""

    vars: Vars
    origin: str
    found: list[str] | None
    unread_python: tuple[str, int] | None
    script_launch: tuple[int, list[str]] | None
    names: set[str]
    depth: int
    returns: list[type[Exception]]

    def run_text(self, text: str, origin: str) -> None:
        raise NotImplementedError  # _Run's

    def block(self, nodes: list) -> None:
        raise NotImplementedError  # _Run's

    def run_to_exit(self, text: str) -> ScriptExit | None:
        """Run the script; the `exit` that ends it before its launch, if one does (a child's ends the child alone)."""
        try:
            self.run_text(text, self.origin)
        except ScriptExit as stop:
            return stop
        return None

    def run_file(self, path: str, args: list[str], own_shell: bool, prefix: list[str]) -> None:
        """`source FILE ARGS` in this shell, or `bash FILE ARGS` in a child that sees what this one exports."""
        if self.depth > 8:
            raise MoetuneError(f"{self.origin}: scripts run or source one another more than 8 deep; pass the launch "
                               "line itself")
        text = Path(path).read_text(errors="replace")
        if not own_shell and ".py" not in text:
            return  # a child that starts no *.py (`bash setup_env.sh`) changes nothing this shell reads
        if not own_shell:
            exported = [n for n in dict.fromkeys(self.vars.assigned) if n in self.vars.exported]
            scalars = {n: v for n, v in self.vars.scalars.items() if n in self.vars.exported}
            scalars |= dict(w.split("=", 1) for w in prefix)
            names = exported + [w.split("=", 1)[0] for w in prefix]
            child = type(self)(positional(Vars(scalars, exported=set(scalars), assigned=names), path, args), path)
            child.depth = self.depth + 1
            child.run_to_exit(text)
            self.found, self.unread_python = child.found, self.unread_python or child.unread_python
            self.script_launch = self.script_launch or child.script_launch
            return
        saved = self.origin, dict(self.vars.scalars), list(self.vars.arrays.get("@", []))
        if args:
            positional(self.vars, self.vars.scalars.get("0", path), args)
        self.origin, self.depth = path, self.depth + 1
        self.returns.append(SourceReturn)
        with suppress(SourceReturn):  # `return` ends the sourced file, back in the script that sources it
            self.run_text(text, path)
        self.returns.pop()
        self.origin, self.depth = saved[0], self.depth - 1
        if args:  # bash restores the caller's positional parameters
            positional(self.vars, saved[1].get("0", path), saved[2])

    def run_string(self, script: str) -> None:
        """`bash -c STRING`: a child shell that starts with this one's variables; an `exit` in it ends it alone."""
        inner = type(self)(Vars(scalars=dict(self.vars.scalars), arrays=dict(self.vars.arrays),
                                exported=set(self.vars.exported), assigned=list(self.vars.assigned)), self.origin)
        inner.names = self.names
        with suppress(ScriptExit):  # an `exit` in the string ends that shell, not this one
            inner.block(parse(tokens(script, self.origin), self.origin))
        self.found = inner.found
