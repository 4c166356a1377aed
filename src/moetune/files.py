"""Reading the small files users hand to moetune (TOML, JSON), and writing the ones it hands back, with one-line
errors that name the file."""

import json
import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from moetune.errors import MoetuneError


def shipped_text(name: str) -> str:
    """The text of a data file moetune ships (src/moetune/data/NAME)."""
    return (resources.files("moetune") / "data" / name).read_text()


def shipped_toml(name: str) -> dict[str, Any]:
    """A TOML table moetune ships (src/moetune/data/NAME)."""
    return tomllib.loads(shipped_text(name))


# libyaml's safe loader where PyYAML was built with it (ten times faster on rules.yaml, which every plan reads)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR, _SEQ, _MAP = "tag:yaml.org,2002:str", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"


def yaml_data(text: str) -> Any:
    """What yaml.load with the safe loader makes of TEXT: its strings, lists and string-keyed mappings built here,
    anything else (numbers, booleans, merge keys) by PyYAML's safe constructor, which builds every node in two steps
    for the aliases that may point into it (over a third of the load of rules.yaml, 3,516 nodes). An alias here is a
    copy, equal to what it names; one inside itself is left to PyYAML."""
    loader = _YAML_LOADER(text)
    try:
        node = loader.get_single_node()
        return None if node is None else _yaml_node(node, loader)
    except RecursionError:  # an alias inside itself
        return yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 -- a safe loader
    finally:
        loader.dispose()


def _yaml_node(node: yaml.Node, loader: Any) -> Any:
    kind, tag = type(node), node.tag
    if kind is ScalarNode and tag == _STR:
        return node.value
    if kind is SequenceNode and tag == _SEQ:
        return [_yaml_node(item, loader) for item in node.value]
    if kind is MappingNode and tag == _MAP:
        out = {}
        for key, value in node.value:
            if type(key) is not ScalarNode or key.tag != _STR:  # a merge key, a number: PyYAML's mapping
                return loader.construct_object(node, deep=True)
            out[key.value] = value.value if type(value) is ScalarNode and value.tag == _STR else _yaml_node(value,
                                                                                                          loader)
        return out
    return loader.construct_object(node, deep=True)


def _read(path: str | Path, what: str, parse: Callable[[str], Any], errors: tuple, kind: str, hint: str,
          json_hint: Callable[[str], str] | None = None) -> Any:
    """`what` names the flag or role in the error, e.g. "--efficiency" (empty for a positional argument: the path alone
    names it); `hint` says what to pass instead (`json_hint`: for JSON that does not parse, from the text read)."""
    name = f"{what} {path}" if what else str(path)
    try:
        return parse(Path(path).read_text())
    except FileNotFoundError:
        raise MoetuneError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise MoetuneError(f"{name}: is a directory; pass a file") from None
    except OSError as err:
        raise MoetuneError(f"{name}: cannot read it ({err.strerror}); check its permissions") from None
    except json.JSONDecodeError as err:  # before ValueError, its base
        raise MoetuneError(json_error(name, err, json_hint(err.doc) if json_hint else hint)) from None
    except (*errors, ValueError) as err:  # a decode error, or a number past Python's 4,300-digit limit
        raise MoetuneError(f"{name}: not valid {kind} ({err}){'; ' + hint if hint else ''}") from None
    except RecursionError:
        raise MoetuneError(f"{name}: nests its values too deeply to read{'; ' + hint if hint else ''}") from None


class FileTable(dict):
    """A user file's table that remembers the file: a check made later, against the shipped values of the GPU it is
    used with, names it (`where`, e.g. "--efficiency mine.toml"), and results record it (`path`, absolute: a saved
    plan read from elsewhere still names it; None where no file is known)."""

    def __init__(self, table: dict, where: str, path: str | Path | None = None) -> None:
        super().__init__(table)
        self.where, self.path = where, str(Path(path).resolve()) if path else None


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    return _read(path, what, tomllib.loads, (tomllib.TOMLDecodeError,), "TOML", "")


def read_json(path: str | Path, what: str, hint: str = "", saved: str | None = None) -> Any:
    """`saved`: the command whose output the file should be ("plan" or "estimate"), or "any" where it may be a saved
    plan or estimate (or something else, a config): JSON that does not parse is then said to be saved again with the
    command that wrote it (its first key shows which: written_by) or else with `saved`'s, in place of `hint`."""
    if saved not in (None, "any", *TAKES):
        raise ValueError(f"read_json: saved={saved!r} is not None, 'any' or one of {sorted(TAKES)}")
    command = None if saved == "any" else saved
    return _read(path, what, json.loads, (), "JSON", hint,
                 (lambda doc: saved_again(path, doc, command) or hint) if saved else None)


# A reader's words for a JSON file that does not parse, shared by every command that reads one (a saved plan or
# estimate, a config, a model's config.json, a trace): where the parser stopped and what it said, whether that is
# where the file ends (a copy cut short), and what to do; one line
CUT = "the file ends there: truncated?"


def not_json(name: str, said: str, cut: bool, hint: str = "") -> str:
    return f"{name}: not valid JSON ({said}{'; ' + CUT if cut else ''})" + (f"; {hint}" if hint else "")


def json_error(name: str, err: json.JSONDecodeError, hint: str = "") -> str:
    """not_json of a JSONDecodeError: its line, column and message; cut where all that is left of the text at that
    point is one unfinished literal or string (`{"a": tru`, `"abc`), not where something follows ("Extra data")."""
    rest = err.doc[err.pos:]
    cut = err.msg != "Extra data" and (err.msg.startswith("Unterminated string")
                                       or re.fullmatch(r"[\w.+-]*\s*", rest) is not None)
    return not_json(name, f"line {err.lineno}, column {err.colno}: {err.msg}", cut, hint)


# The first key of the JSON that `moetune plan` and `estimate` (or `memory`) write (cli/plan_output.py plan_json,
# planner/estimate.py Estimate.to_json): a file cut short still shows which of them wrote it
_WRITTEN_BY = (("plan", re.compile(r'\s*\{\s*"candidates_evaluated"')),
               ("estimate", re.compile(r'\s*\{\s*"model"\s*:\s*"')))


def written_by(text: str) -> str | None:
    return next((command for command, first in _WRITTEN_BY if first.match(text)), None)


# The saved results a reader of one command's output takes: a plan's readers (explain, emit, report, sweep, diagnose
# --plan) take an estimate too; --baseline takes an estimate alone
TAKES = {"plan": ("plan", "estimate"), "estimate": ("estimate",)}


def saved_again(path: str | Path, text: str, command: str | None = None) -> str | None:
    """What to do with a saved result that does not parse: save it again with the command that wrote it where the
    reader takes that command's output, else with `command`; None where neither is known (the file may be a config,
    or a model's config.json)."""
    by = written_by(text)
    by = by if command is None or by in TAKES[command] else command
    return f"save it again with `moetune {by} ... --json > {path}`" if by else None


def write_text(path: str | Path, text: str, what: str) -> Path:
    """Write `text` to `path`; `what` names the flag in the error (e.g. "--write")."""
    try:
        Path(path).write_text(text)
    except OSError as err:
        raise MoetuneError(f"{what} {path}: cannot write the file ({err.strerror}); pass a writable path") from None
    return Path(path)


def check_writable(path: str | Path, what: str, inputs: tuple[str | Path, ...] = ()) -> None:
    """Fail before a long computation when `path` cannot be written: its directory must exist, and it may not be one
    of the command's INPUTS (a plan, a sweep's manifest), which writing would destroy."""
    if not str(path):
        raise MoetuneError(f"{what}: an empty path; pass a file path")
    if any(Path(path).resolve() == Path(i).resolve() for i in inputs):
        raise MoetuneError(f"{what} {path}: is one of this command's inputs, which writing would destroy; pass "
                           "another path")
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise MoetuneError(f"{what} {path}: no directory {parent}; create it or pass another path")
    if Path(path).is_dir():
        raise MoetuneError(f"{what} {path}: is a directory; pass a file path")
