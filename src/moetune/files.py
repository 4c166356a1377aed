"""Reading the small files users hand to moetune (TOML, JSON), and writing the ones it hands back, with one-line
errors that name the file."""

import json
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from moetune.errors import MoetuneError


def shipped_text(name: str) -> str:
    """The text of a data file moetune ships (src/moetune/data/NAME)."""
    return (resources.files("moetune") / "data" / name).read_text()


def shipped_toml(name: str) -> dict[str, Any]:
    """A TOML table moetune ships (src/moetune/data/NAME)."""
    return tomllib.loads(shipped_text(name))


def _read(path: str | Path, what: str, parse: Callable[[str], Any], errors: tuple, kind: str, hint: str) -> Any:
    """`what` names the flag or role in the error, e.g. "--efficiency" (empty for a positional argument: the path alone
    names it); `hint` says what to pass instead."""
    name = f"{what} {path}" if what else str(path)
    try:
        return parse(Path(path).read_text())
    except FileNotFoundError:
        raise MoetuneError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise MoetuneError(f"{name}: is a directory; pass a file") from None
    except OSError as err:
        raise MoetuneError(f"{name}: cannot read it ({err.strerror}); check its permissions") from None
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


def read_json(path: str | Path, what: str, hint: str = "") -> Any:
    return _read(path, what, json.loads, (json.JSONDecodeError,), "JSON", hint)


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
