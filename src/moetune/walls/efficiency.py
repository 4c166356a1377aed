"""Efficiency constants of the step-time model: data/efficiency.toml, [default] then the GPU's table,
then an optional user TOML (same keys, flat or under the GPU's name)."""

import tomllib
from functools import cache
from importlib import resources

from moetune.errors import MoetuneError
from moetune.files import read_toml


@cache
def _table() -> dict:
    return tomllib.loads((resources.files("moetune") / "data" / "efficiency.toml").read_text())


def efficiency(gpu_key: str, user: dict | None = None, *, priors_only: bool = False) -> dict[str, float]:
    """[default], then the GPU's section (fitted values; skipped with priors_only), then the user's file."""
    table = _table()
    out = {**table["default"], **({} if priors_only else table.get(gpu_key, {}))}
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
    return read_toml(path, "--efficiency") if path else None
