"""The diagnose rule table (data/diagnose_remedies.yaml) and its tiny condition language.

A condition is ``[fact, op, value]``. Keeping the language this small is deliberate: the table must
stay something a performance engineer can read and edit without reading Python.
"""

from functools import lru_cache
from typing import Any

import yaml

from moetune.files import shipped_text

_MISSING = object()


@lru_cache(maxsize=1)
def remedies_table() -> dict:
    text = shipped_text("diagnose_remedies.yaml")
    return yaml.safe_load(text)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple, set)) and isinstance(b, (list, tuple, set)):
        return sorted(map(str, a)) == sorted(map(str, b))
    if isinstance(a, str) or isinstance(b, str):
        return str(a).lower() == str(b).lower()
    return a == b


def _compare(left: Any, op: str, right: Any) -> bool:
    if op == "==":
        return _same(left, right)
    if op == "!=":
        return not _same(left, right)
    if op == "in":
        return any(_same(left, r) for r in right)
    if op == "contains":
        return left is not None and str(right).lower() in str(left).lower()
    if left is None or isinstance(left, (str, bool)) or not isinstance(left, (int, float)):
        return False  # ordering needs numbers; an unset value never satisfies it
    return {">": left > right, ">=": left >= right, "<": left < right, "<=": left <= right}[op]


def holds(condition: list, facts: dict[str, Any], missing: bool = False) -> bool:
    """Whether ``[fact, op, value]`` is true; ``missing`` is the answer when the fact is absent."""
    fact, op, value = condition
    left = facts.get(fact, _MISSING)
    if left is _MISSING:
        return missing
    return _compare(left, op, value)


def all_hold(conditions: list | None, facts: dict[str, Any]) -> bool:
    return all(holds(c, facts) for c in conditions or ())
