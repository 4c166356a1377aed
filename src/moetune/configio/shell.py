"""Read a bash launch script as bash would run it, up to the command that starts Megatron-LM's training script, and
give that command's words with the environment it sees (configio/mlm.py reads the --flags).

Megatron-LM's own examples build the arguments in bash arrays, append to them under `if`, and run `torchrun ...
pretrain_gpt.py ${ARGS[@]}` (examples/mixtral/train_mixtral_8x7b_distributed.sh), or put that line in a string handed
to `bash -c` in an sbatch here-document (examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh). Read, in order:
variable and array assignments (`NAME=v`, `NAME=(...)`, `NAME+=(...)`, `export`, `unset`, `declare`, `local`,
`readonly`), `if`/`elif`/`else` over `[ ]`, `[[ ]]` and `test`, `&&`/`||` after them, `case` over a word the script
knows, `{ }` groups, `eval WORDS`, `bash -c STRING`, and `source FILE` / `bash FILE ARGS` where FILE is here (a
sourced FILE that is not fails as in bash, with a note on stderr naming it; configio/shell_children.py runs
them), functions where called and loops whose words or test moetune knows (configio/shell_loops.py), `shift`,
`set --`, `return`, `break`, `continue`, and `exit` outside a child shell (configio/shell_commands.py). No other
command runs: a condition that would run a command (`if grep ...`, `case $(hostname) in`) decides nothing. Where
such a condition guards an assignment or the training command, that is an error naming the line, never a guess.
"""

from __future__ import annotations

import fnmatch
import re
import sys
from collections.abc import Mapping, Sequence

from moetune.configio.readers import SHELL_NAME
from moetune.configio.shell_assign import assign, declared, expand_words, let, unset
from moetune.configio.shell_children import ChildShells
from moetune.configio.shell_commands import (
    NOT_LAUNCHERS,
    PASS_ARGUMENTS,
    POSITIONAL,
    ScriptExit,
    acts,
    assigned_in,
    exit_line,
    exits,
    nothing_past,
    positional,
    runs_python,
    runs_script_with_flags,
    script_file,
    set_positional,
    shell_string,
    shown,
    status_known,
    tests_only,
    unread_launches,
)
from moetune.configio.shell_conditions import UNKNOWN, evaluate
from moetune.configio.shell_expand import expand, expand_one
from moetune.configio.shell_loops import LoopsAndFunctions
from moetune.configio.shell_parse import parse
from moetune.configio.shell_tree import DECLARE, Case, Chain, If, Simple, Unread
from moetune.configio.shell_words import Vars, tokens
from moetune.errors import MoetuneError

# a name the script assigns somewhere (`X=`, `export X=`, `local X=`, `declare -a X=`)
_ASSIGNED = re.compile(rf"(?:^|[\s;&|(])(?:export\s+|local\s+|declare\s+(?:-\w+\s+)*)?({SHELL_NAME})\+?=",
                       re.M)


def launch_words(text: str, origin: str, env: Mapping[str, str], args: Sequence[str] = ()) -> list[str]:
    """`NAME=value` words of the environment the training command sees (what the script exports, and the command's
    own prefix), then the command's words. Where no command runs a *.py, the one that runs a script with --flags
    (the Megatron-MoE-ModelZoo's `PP=8 EP=32 bash sbatch_benchmarking.sh --mtp-num-layers 1`) is the launch. A text
    with neither (a bare argument list, an env file) gives every variable it sets and every word of its commands.
    `args` are the script's own ($1, $2, ...; $0 is `origin`)."""
    run = _Run(positional(Vars(scalars=dict(env), exported=set(env)), origin, args), origin)  # env is exported
    run.top, run.given = True, bool(args)
    stop = run.run_to_exit(text)
    if run.found is not None:
        return run.found
    if run.script_launch is not None:
        return run.script_launch[1]
    if run.unread_python is not None:
        kind, line = run.unread_python
        raise MoetuneError(f"{origin} line {line}: the training command runs inside a '{kind}', which moetune does "
                           "not unroll (its values are computed as bash runs it); pass one run's arguments "
                           "(a launch line, or --mlm-args)")
    if stop is not None and not (stop.origin == origin and nothing_past(text, stop.line)):
        # bash ends the script on the path it takes, before any command that trains, and moetune would read past it
        raise MoetuneError(exit_line(stop, bool(args), run.reads_arguments))
    assigned = dict.fromkeys(run.vars.assigned)
    held = [n for n in assigned if not run.ran and any(w.startswith("--") for w in run.vars.arrays.get(
        n, str(run.vars.scalars.get(n)).split()))]
    if held:  # Megatron-LM's modelopt conf/*.sh: MODEL_ARGS="--num-layers 48 ...", spliced in by the launch script
        raise MoetuneError(f"{origin}: {held[0]} reads as a launch script's shell variable: pass its Megatron-LM "
                           "arguments with --mlm-args \"...\" or a file of them, or check the script that runs them "
                           "(this file runs no command)")
    return [f"{n}={run.vars.scalars[n]}" for n in assigned if n in run.vars.scalars] + run.words


class _Run(ChildShells, LoopsAndFunctions):
    def __init__(self, env: Vars, origin: str):
        self.vars, self.origin = env, origin
        self.found: list[str] | None = None
        self.words: list[str] = []  # every command's words, for a text with no training command
        self.unread_python: tuple[str, int] | None = None
        self.script_launch: tuple[int, list[str]] | None = None  # (line, words) of a `bash run.sh --flags`
        self.names: set[str] = set()  # every name the script assigns somewhere
        self.depth = 0  # scripts run or sourced to get here
        self.ran = False  # whether a command ran that is no argument list and no echo, cd, source...
        self.functions: dict[str, Unread] = {}  # the script's functions, by name
        self.said: str | None = None  # the first of the `echo`s run right before this command: an `exit`'s reason
        self.tested: list[str] = []  # the words of the last test run (`[ -z "$1" ]`), or a `case`'s word
        self.top, self.given = False, False  # the script moetune was given (not one it runs), and given arguments
        self.reads_arguments = False  # whether it, or a file it sources, reads $1, $#, $@ ...
        self.returns: list[type[Exception]] = []  # what `return` ends: a sourced file's or a function's run
        self.calls, self.loops = 0, 0  # functions and loops being run (configio/shell_loops.py)

    @property
    def hint(self) -> str:
        """How to give the script's arguments, where it reads them and was given none."""
        return f"; {PASS_ARGUMENTS}" if self.top and not self.given and self.reads_arguments else ""

    def run_text(self, text: str, origin: str) -> None:
        self.names |= set(_ASSIGNED.findall(text))
        self.reads_arguments |= bool(POSITIONAL.search(text))
        self.block(parse(tokens(text, origin), origin))

    def block(self, nodes: list) -> None:
        for node in nodes:
            if self.found is not None:
                return
            if isinstance(node, Chain):
                self.chain(node)
            elif isinstance(node, If):
                self.branch(node)
            elif isinstance(node, Case):
                self.case(node)
            elif isinstance(node, Unread):
                self.unread(node)

    def unread(self, node: Unread) -> None:
        """A function is kept for its calls. A loop whose words or test moetune knows runs as bash runs it
        (configio/shell_loops.py run_loop); one it does not run but whose `while` test fails at once (`while [[ $# -gt
        0 ]]` given no arguments) never runs; any other loop leaves what it assigns unknown, never the value from
        before the loop: a `$(set-in-while-loop-line-3)` text no test decides and the flag reader shows where read."""
        if node.kind == "function":
            self.functions[node.name] = node
        elif self.run_loop(node):
            return
        elif node.kind in ("while", "until") and tests_only(node.statements[:1]) and \
                self.condition(node.statements[:1]) is (node.kind == "until"):
            return
        else:
            for name in assigned_in(node.statements):
                self.vars.set(name, f"$(set-in-{node.kind}-loop-line-{node.line})")
        if unread_launches(node):
            self.unread_python = self.unread_python or (node.kind, node.line)

    def branch(self, node: If) -> None:
        for k, (cond, body) in enumerate(node.branches):
            holds = self.condition(cond) if cond else True
            holds = holds if holds is None or not node.unless else not holds
            if holds is None:
                # where every branch left but one ends in `exit`, a script that reaches its launch took that one
                # (sbatch_benchmarking.sh: `if [[ -f $PATH ]]; then ...; else echo ...; exit 1; fi`)
                going_on = [b for _, b in node.branches[k:] if not exits(b)] + ([] if node.has_else else [[]])
                if len(going_on) == 1:
                    self.block(going_on[0])
                    return
                if any(acts(n) for _, b in node.branches for n in b):
                    raise MoetuneError(f"{self.origin} line {cond[0].line if cond else node.line}: moetune cannot "
                                       f"tell whether `{shown(cond, self.vars)}` holds (it runs a command, tests a "
                                       "file or a command's output, or is malformed as bash reads it: an unset "
                                       "variable?) and a branch sets what the launch reads; set what it tests as the "
                                       "launcher would, or write the branch's assignments without the 'if'" + self.hint)
                return
            if holds:
                self.block(body)
                return

    def case(self, node: Case) -> None:
        """The first arm whose pattern matches the word, as bash picks it (examples/mamba/train.sh's model sizes)."""
        subject = expand_one(node.subject, self.vars, keep_unset=False)
        self.tested = [node.subject]
        if UNKNOWN.search(subject):  # a command's output, known only by running it, or an unset variable's text
            if any(acts(n) for _, body in node.arms for n in body):
                raise MoetuneError(f"{self.origin} line {node.line}: moetune cannot tell which arm of this 'case' "
                                   f"runs (its word, {subject!r}, is a command's output or holds an unset "
                                   "variable) and an arm sets what the launch reads; set what it reads as the "
                                   "launcher would, or write that arm's assignments without the 'case'" + self.hint)
            return
        for patterns, body in node.arms:
            if any(fnmatch.fnmatchcase(subject, expand_one(p, self.vars, keep_unset=False)) for p in patterns):
                self.block(body)
                return

    def condition(self, chains: list[Chain]) -> bool | None:
        holds = True
        for chain in chains:
            holds = self.chain(chain, condition=True)
        return holds

    def chain(self, chain: Chain, condition: bool = False) -> bool | None:
        status: bool | None = True
        guessed = False  # whether a command moetune does not run (taken to succeed) decided the path to here
        for k, (conn, simple) in enumerate(chain.parts):
            if k and status is not None and (conn == "&&") != status:
                continue  # `a && b` runs b where a holds, `a || b` where it does not
            if guessed and simple.words[:1] in (["exit"], ["return"]):
                continue  # `nvidia-smi -L && exit 0`: bash may not take it, and it stops nothing
            if k and status is None:
                if acts(Chain([(None, simple)])):
                    raise MoetuneError(f"{self.origin} line {simple.line}: moetune cannot tell whether the command "
                                       f"before '{conn}' succeeds (it runs none), and what follows sets what the "
                                       "launch reads; write it without the condition")
                continue
            status = self.simple(simple, condition)
            guessed |= not status_known(simple.words)
        return status

    def simple(self, s: Simple, condition: bool) -> bool | None:
        words = expand_words(s.words, self.vars, self.names)
        if words and words[0] in ("[", "[[", "test", "!"):  # an unset variable is empty there, as bash reads it
            self.tested = s.words
            if "[[" in words[:2]:  # no word splitting inside [[ ]]: an empty operand stays an operand
                return evaluate([expand_one(raw, self.vars, keep_unset=False) for raw in s.words], self._is_set)
            return evaluate([w for raw in s.words for w in expand(raw, self.vars, keep_unset=False)], self._is_set)
        if not words or words[0] in DECLARE:
            assign(self.vars, self.names, s.assigns, export=bool(words) and words[0] == "export" or "-x" in words)
            declared(self.vars, words)
            return True
        if words[0] == "unset":
            unset(self.vars, words[1:])
            return True
        if words[0] == "let":
            return let(self.vars, words[1:], s.line)
        return self.command(s, words, condition)

    def _is_set(self, name: str) -> bool:
        return self.vars.get(name) is not None

    def command(self, s: Simple, words: list[str], condition: bool) -> bool | None:
        # an `exit` in a child shell ends that alone; one with nothing after it is the script's end (launch_words)
        if words[0] == "exit" and not s.child:
            self.words, self.ran = self.words + words, True
            raise ScriptExit(self.origin, s.line, words, self.said, self.tested)
        if words[0] == "return" and self.returns and not s.child:  # outside a function and a sourced file, bash
            raise self.returns[-1]  # says "can only `return' from a function or sourced script" and goes on
        if words[0] in ("break", "continue") and not s.child:
            return self.jump(words)
        self.said = (self.said or " ".join(words[1:])) if words[0] in ("echo", "printf") else None
        if not s.child and (moved := set_positional(self.vars, words)) is not None:
            return moved
        prefix = [f"{name}={expand_one(v, self.vars)}" for name, _, v in s.assigns if isinstance(v, str)]
        if (run := script_file(words, self.origin)) is not None:
            self.run_file(*run, prefix)
            return True
        if words[0] in ("source", ".") and len(words) > 1:  # bash says "No such file or directory" there, fails that
            # command and goes on: whatever the file would set reads as unset, so the reader is told which file it was
            print(f"moetune: note: {self.origin} line {s.line}: sources {words[1]}, which is not here (nor beside the "
                  "script); what it would set is read as unset", file=sys.stderr)
            return False
        if (fn := self.functions.get(words[0])) and self.call(fn, words[1:]):
            return True
        if fn and any(acts(n) for n in fn.statements):
            raise MoetuneError(f"{self.origin} line {s.line}: calls {words[0]} (a function, line {fn.line}), which "
                               "moetune does not enter, and it sets what the launch reads; write its assignments "
                               "out of the function")
        if words[0] == "eval":  # its words, joined by blanks, run as script in this shell (Pai-Megatron-Patch's
            self.block(parse(tokens(" ".join(words[1:]), self.origin), self.origin))  # `eval ${run_cmd}`)
            return True
        exported = dict.fromkeys(n for n in self.vars.assigned if n in self.vars.exported)
        seen = [f"{n}={self.vars.scalars[n]}" for n in exported if n in self.vars.scalars] + prefix + words
        if runs_python(words):
            self.found = seen
            return True
        if runs_script_with_flags(words):
            if self.script_launch is not None:
                raise MoetuneError(f"{self.origin} line {s.line}: a second run (the first at line "
                                   f"{self.script_launch[0]}); moetune checks one: put that run's line in a file "
                                   "of its own, or pass its arguments with --mlm-args")
            self.script_launch = (s.line, seen)
            return True
        if (script := shell_string(words)) is not None:
            self.run_string(script)
        self.words += prefix + words
        self.ran |= words[0] not in NOT_LAUNCHERS and not words[0].startswith("-")
        return None if condition else True
