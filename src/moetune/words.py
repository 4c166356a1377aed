"""English for figures in moetune's sentences (any layer may import it)."""

import difflib
import re

_DIGITS = re.compile(r"\d[\d,]*")


def article(figure: str) -> str:
    """ "a" or "an" before a figure, by how it is read aloud: "an" where it starts with "eight" (8, 80.0, 800) or
    "eleven"/"eighteen" (11, 18.5, 11,000, 18000), else "a" (a 1.5, a 110, a 180)."""
    m = _DIGITS.match(figure.lstrip())
    if not m:
        return "a"
    whole = m.group(0).replace(",", "")
    lead = whole[:len(whole) % 3 or 3]  # the digits read before "thousand"/"million": 11 of 11000, 180 of 180
    return "an" if whole.startswith("8") or lead in ("11", "18") else "a"


def a_figure(figure: str) -> str:
    """The figure with its article: "an 80.0", "a 94.0"."""
    return f"{article(figure)} {figure}"


def words(items) -> str:
    """A list as a sentence says it: 'a', 'a and b', 'a, b and c' (rules/expr.py words() for rule messages)."""
    items = [str(i) for i in (items or [])]
    return " and ".join(filter(None, [", ".join(items[:-1]), items[-1]])) if items else ""


def plural(count: int, noun: str) -> str:
    """The count and its noun, plural past one: '1 micro-batch', '8 micro-batches' (an -s, -sh, -ch noun takes -es)."""
    return f"{count:,} {noun}" + ("" if count == 1 else "es" if noun.endswith(("s", "sh", "ch")) else "s")


def closest(name: str, choices, cutoff: float = 0.75) -> str | None:
    """The choice NAME is likely a misspelling of (difflib's ratio at least `cutoff`), or None: a module, a field."""
    return next(iter(difflib.get_close_matches(name, sorted(choices), n=1, cutoff=cutoff)), None)
