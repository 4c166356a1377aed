"""Efficiency constants of the step-time model: data/efficiency.toml, [default] then the GPU's table,
then an optional user TOML (same keys, flat or under the GPU's name)."""

import tomllib
from functools import cache
from importlib import resources
from pathlib import Path

from moetune.errors import MoetuneError


@cache
def _table() -> dict:
    return tomllib.loads((resources.files("moetune") / "data" / "efficiency.toml").read_text())


def efficiency(gpu_key: str, user: dict | None = None) -> dict[str, float]:
    table = _table()
    out = {**table["default"], **table.get(gpu_key, {})}
    if user:
        flat = {k: v for k, v in user.items() if not isinstance(v, dict)}
        out.update(flat)
        out.update(user.get(gpu_key, {}))
        unknown = sorted(set(out) - set(table["default"]))
        if unknown:
            raise MoetuneError(f"efficiency file: unknown constant(s) {', '.join(unknown)}; "
                               f"known: {', '.join(sorted(table['default']))}")
    return out


def load_efficiency_file(path: str | None) -> dict | None:
    if not path:
        return None
    try:
        return tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise MoetuneError(f"--efficiency {path}: no such file") from None
    except tomllib.TOMLDecodeError as err:
        raise MoetuneError(f"--efficiency {path}: not valid TOML ({err})") from None
