"""Reading the small files users hand to moetune (TOML, JSON), with one-line errors that name the file."""

import json
import tomllib
from pathlib import Path
from typing import Any, Callable

from moetune.errors import MoetuneError


def _read(path: str | Path, what: str, parse: Callable[[str], Any], errors: tuple, kind: str, hint: str) -> Any:
    """`what` names the flag or role in the error, e.g. "--efficiency"; `hint` says what to pass instead."""
    try:
        return parse(Path(path).read_text())
    except FileNotFoundError:
        raise MoetuneError(f"{what} {path}: no such file") from None
    except (*errors, UnicodeDecodeError) as err:
        raise MoetuneError(f"{what} {path}: not valid {kind} ({err}){'; ' + hint if hint else ''}") from None


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    return _read(path, what, tomllib.loads, (tomllib.TOMLDecodeError,), "TOML", "")


def read_json(path: str | Path, what: str, hint: str = "") -> Any:
    return _read(path, what, json.loads, (json.JSONDecodeError,), "JSON", hint)
