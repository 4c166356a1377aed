"""What a launch script's statements do, told from their words alone (configio/shell.py runs the script): whether
they may start the training (a *.py, a script given --flags), set what the launch reads, run or source another
script, run a string under `bash -c`, or end the script; the positional parameters a script run with arguments
sees; and the line that says where bash ends the script before its launch."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from moetune.configio.shell_expand import expand_one
from moetune.configio.shell_tree import DECLARE, Case, Chain, If, Unread
from moetune.configio.shell_words import Vars

# commands whose words may name a .py file without running it (`echo "launching pretrain_gpt.py"`)
NOT_LAUNCHERS = frozenset("echo printf cat cp mv ls rm git sed grep awk tee touch wget curl pip chmod mkdir cd "
                          "find xargs source . test [ [[".split())
SHELLS = frozenset(("bash", "sh"))


def positional(env: Vars, script: str, args: Sequence[str]) -> Vars:
    """`env` with $0 the script, $1... its arguments, $# and $@ (earlier positional parameters cleared)."""
    env.scalars = {k: v for k, v in env.scalars.items() if not k.isdigit()}
    env.scalars |= {"0": script, "#": str(len(args))} | {str(k): a for k, a in enumerate(args, 1)}
    env.arrays["@"] = list(args)
    return env


def set_positional(env: Vars, words: list[str]) -> bool | None:
    """`shift [N]` and `set -- ARGS` (bash(1) shift, set): their status, the positional parameters in `env` moved as
    bash moves them; None for any other command."""
    args = env.arrays.get("@", [])
    if words[0] == "shift":
        n = int(words[1]) if len(words) > 1 and words[1].isdigit() else 1
        if n > len(args):
            return False  # a count past $# shifts nothing, and fails
        args = args[n:]
    elif words[0] == "set" and words[1:2] == ["--"]:
        args = words[2:]
    else:
        return None
    positional(env, env.scalars.get("0", ""), args)
    return True


class ScriptExit(Exception):
    """`exit` on the path bash takes: the script (or the `bash FILE` / `bash -c` child running it) ends there."""

    def __init__(self, origin: str, line: int, words: list[str], said: str | None, tested: list[str]):
        super().__init__(origin, line)
        self.origin, self.line, self.words, self.said = origin, line, words, said
        self.tests_arguments = any(POSITIONAL.search(w) for w in tested)  # the last test run: `[ -z "$1" ]`


class SourceReturn(Exception):
    """`return` on the path bash takes in a sourced file: the file ends there, its caller goes on."""


# $1 .. $9, ${10}, $#, $@, $*, ${@:2}: a script that reads its positional parameters (not ${#NAME}, a length)
POSITIONAL = re.compile(r"\$(?:[1-9#@*]|\{(?:[1-9]|[#@*][}:]))")
PASS_ARGUMENTS = "pass the script's arguments with --script-args \"...\" (it reads $1 ... and was given none)"


def exit_line(stop: ScriptExit, given: bool, reads_arguments: bool) -> str:
    """One line for a script bash ends before its launch: where, the message it echoes before, and what to give:
    its arguments where the test that ended it reads them (Megatron-LM's modelopt conf/arguments.sh: `[ -z ${1} ]`),
    else what it tests (an environment variable: examples/multimodal's WORKSPACE), or its arguments where it reads
    them and was given none (they set what it tests: examples/inference's --hf-token)."""
    said = f", after it echoes {stop.said[:100]!r}" if stop.said else ""
    arguments = "check the arguments given with --script-args" if given else \
        PASS_ARGUMENTS if reads_arguments or stop.tests_arguments else ""
    fixes = ([] if stop.tests_arguments else ["set what the script tests as the launcher would"]) + \
        ([arguments] if arguments else [])
    return (f"{stop.origin} line {stop.line}: bash ends the script here ({' '.join(stop.words)}){said}, before it "
            f"starts the training; {', or '.join(fixes)}")


def nothing_past(text: str, line: int) -> bool:
    """Whether a script's text runs nothing after `line` (closing keywords and comments aside): an `exit` there ends
    it where its end would (Megatron-LM's sc21 run_figure_*.sh end in `exit 0` after their sbatch)."""
    lines = text.splitlines()
    after = lines[line - 1].rpartition("exit")[2].split(";")[1:] if 0 < line <= len(lines) else []  # its own line's
    rest = (s.strip() for s in [*after, *lines[line:]])
    return all(not s or s.startswith("#") or s.rstrip(";") in ("fi", "done", "esac", "}", ";") for s in rest)


def exits(body: list) -> bool:
    """Whether a branch's statements end the script (`exit` on a line of its own, not in a child shell)."""
    return any(isinstance(n, Chain) and len(n.parts) == 1 and n.parts[0][1].words[:1] == ["exit"] and
               not n.parts[0][1].child for n in body)


def status_known(words: list[str]) -> bool:
    """Whether moetune knows a simple command's exit status from its raw words: a test it evaluates, an assignment,
    a builtin that succeeds; not a command it does not run, whose status it takes to be success."""
    return not words or words[0] in ("[", "[[", "test", "!", "echo", "printf", "true", ":", "unset", "let", *DECLARE)


def runs_python(words: list[str]) -> bool:
    """Whether expanded words start a *.py: a command that is no file tool, given a path ending .py that is no glob
    (Pai-Megatron-Patch's run_mcore_moonlight.sh copies its checkpoint's `find ... -name "*.py"` before training)."""
    return words[0] not in NOT_LAUNCHERS and any(w.endswith(".py") and not any(c in w for c in "*?[") for w in words)


def launches(words: list[str]) -> bool:
    """Whether raw words may start the training: a *.py, or a script given --flags."""
    return bool(words) and words[0] not in NOT_LAUNCHERS and any(".py" in w for w in words) or \
        runs_script_with_flags(words)


def runs_script_with_flags(words: list[str]) -> bool:
    """`bash run.sh --flag ...`, `sbatch run.sh --flag`, `./run.sh --flag`: a *.sh with a --flag after it."""
    at = next((i for i, w in enumerate(words) if w.endswith(".sh")), None)
    return bool(words) and words[0] not in NOT_LAUNCHERS and at is not None and \
        any(w.startswith("--") for w in words[at + 1:])


def script_file(words: list[str], origin: str) -> tuple[str, list[str], bool] | None:
    """(path, arguments, in this shell) of `source FILE ARGS` or `bash FILE.sh ARGS` (ARGS without --flags: those
    make it the launch) where FILE is here, as written or beside the script."""
    if words[0] in ("source", ".") and len(words) > 1:
        at, own = 1, True
    elif words[0].rsplit("/", 1)[-1] in SHELLS and not any(w.startswith("--") for w in words):
        at, own = next((i for i, w in enumerate(words) if w.endswith(".sh")), 0), False
    else:
        return None
    found = [p for p in (Path(words[at]), Path(origin).parent / words[at]) if at and p.is_file()]
    return (str(found[0]), words[at + 1:], own) if found else None


def shell_string(words: list[str]) -> str | None:
    """The script of `bash -c STRING` (or `sh -c`, after a launcher's own words: `srun ... bash -x -c STRING`, and
    with the options run together: Megatron-Bridge's `$SRUN_CMD bash -lc "..."`): the first word after the options."""
    for i, w in enumerate(words):
        if w.rsplit("/", 1)[-1] not in SHELLS:
            continue
        command, rest = False, iter(words[i + 1:])
        for option in rest:
            if option in ("-o", "+o"):
                next(rest, None)  # `-o pipefail`: the option's own word
            elif option[:1] in "-+" and option[1:2] != "-":
                command |= option[0] == "-" and "c" in option[1:]
            elif not option.startswith("--"):
                return option if command else None
    return None


def unread_launches(node: Unread) -> bool:
    """Whether a loop or function may start the training: a statement that runs a *.py or a script with --flags,
    a string under `bash -c` or `eval`, or a value naming a *.py (Megatron-Bridge's gpt_oss slurm_pretrain.sh loops
    over configs building CMD="... run_recipe.py ..." and running `$SRUN_CMD bash -c "$CMD"`)."""
    simples = [s for u in node.statements if isinstance(u, Chain) for _, s in u.parts]
    return any(isinstance(u, Case) and launches(u.words) for u in node.statements) or any(
        launches(s.words) or shell_string(s.words) is not None or s.words[:1] == ["eval"] or
        any(isinstance(v, str) and ".py" in v for _, _, v in s.assigns) for s in simples)


def assigned_in(nodes: list) -> list[str]:
    """The names statements assign, inside `if` branches and `case` arms too."""
    names: list[str] = []
    for node in nodes:
        if isinstance(node, Chain):
            names += [a[0] for _, simple in node.parts for a in simple.assigns]
        elif isinstance(node, (If, Case)):
            parts = node.branches if isinstance(node, If) else node.arms
            names += assigned_in([n for _, body in parts for n in body])
    return names


def tests_only(nodes: list) -> bool:
    return bool(nodes) and isinstance(nodes[0], Chain) and all(
        simple.words[:1] in (["["], ["[["], ["test"]) for _, simple in nodes[0].parts)


def acts(node) -> bool:
    """Whether a node sets a variable or array, or runs a *.py: what would change the launch moetune reads."""
    if isinstance(node, Chain):
        return any(s.assigns or (s.words and s.words[0] in (*DECLARE, "unset", "let", "eval", "source", ".")) or
                   launches(s.words)
                   for _, s in node.parts)
    if isinstance(node, If):
        return any(acts(n) for cond, body in node.branches for n in (*cond, *body))
    if isinstance(node, Case):
        return any(acts(n) for _, body in node.arms for n in body)
    return isinstance(node, Unread) and unread_launches(node)


def shown(cond: list[Chain], env: Vars) -> str:
    """A condition as bash would test it, its variables expanded (`[ = dsw ]` where ENV is unset), cut short."""
    text = " ; ".join(" ".join(([conn] if conn else []) + [expand_one(w, env, keep_unset=False) or "''"
                                                            for w in simple.words])
                      for chain in cond for conn, simple in chain.parts)
    return text if len(text) <= 80 else text[:77] + "..."
