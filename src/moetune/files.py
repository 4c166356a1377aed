"""Reading the small files users hand to moetune (TOML, JSON), with one-line errors that name the file."""

import json
import tomllib
from pathlib import Path
from typing import Any

from moetune.errors import MoetuneError


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """`what` names the flag or role in the error, e.g. "--efficiency"."""
    try:
        return tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise MoetuneError(f"{what} {path}: no such file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise MoetuneError(f"{what} {path}: not valid TOML ({err})") from None


def read_json(path: str | Path, what: str, hint: str = "") -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise MoetuneError(f"{what} {path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise MoetuneError(f"{what} {path}: not valid JSON ({err}){'; ' + hint if hint else ''}") from None
