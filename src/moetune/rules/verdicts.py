"""Whether a config breaks an error rule of a table, as `evaluate` finds it, with each rule's verdict memoized on the
values its condition reads: the planner asks it of a few hundred knob sets a plan (planner/legal.py legal_grid),
which share most of what any one rule reads, so each condition runs once per distinct reading.

A condition sees nothing but the names it reads (rules/expr.py: Expr.names holds every dotted name and every has()
or get() argument; its functions are pure), and what it sees of a name is decided by whether the config or the
derived facts hold it and the value held (engine.make_env; Megatron's default stands in for an absent config name).
So the memo's key is each name's presence and value, the value frozen with its type so that no two readings a
condition could tell apart (1 and True, a list and a tuple, two orders of a list) share a key.
"""

from __future__ import annotations

from itertools import repeat
from operator import itemgetter
from typing import Any, Callable

from moetune.configio.names import is_megatron_lm
from moetune.rules.engine import fires, make_env, severity_of
from moetune.rules.table import Table

_ABSENT = object()
_MISS = object()
_DERIVED = "derived."
# Values of these exact classes equal only values a condition cannot tell from them (None, True and False are
# singletons; an absent name is one object; two equal strings differ only to `is`, which the table's conditions use
# with None, True and False alone: tests/rules/test_verdicts.py): they key as they are. Any other is frozen with its
# class.
_BARE = frozenset({str, bool, type(None), object})


def _frozen(value: Any) -> Any:
    """`value` as a hashable key that equals another's only where the two are the same to a condition."""
    if value.__class__ in _BARE:
        return value
    if isinstance(value, (list, tuple)):  # Scopes (configio/types.py), a list, keeps its own type
        return value.__class__, tuple(map(_frozen, value))
    if isinstance(value, dict):
        return value.__class__, tuple((_frozen(k), _frozen(v)) for k, v in value.items())
    if isinstance(value, (set, frozenset)):
        return value.__class__, frozenset(map(_frozen, value))
    return value.__class__, value


def _reader(positions: tuple[int, ...]) -> Callable[[tuple], Any]:
    """The key of one rule: the readings at its names' positions (itemgetter: a lone one bare, several a tuple)."""
    return itemgetter(*positions) if positions else (lambda _: ())


class Verdicts:
    """The error rules of `table` in `context`, each verdict kept per distinct reading of the names it reads."""

    def __init__(self, table: Table, context: str = "check"):
        rules = [r for r in table.rules if context in r.contexts]
        read = sorted(set().union(*(r.when.names for r in rules)))
        self._config = [n for n in read if not n.startswith(_DERIVED)]
        self._derived = [n[len(_DERIVED):] for n in read if n.startswith(_DERIVED)]
        at = {n: i for i, n in enumerate(self._config + [_DERIVED + k for k in self._derived])}
        keyed = [(rule, _reader(tuple(at[n] for n in sorted(rule.when.names))), {}) for rule in rules]
        # the rules whose findings are errors, on a Bridge config and on a Megatron-LM launch (severity_mlm)
        self._errors = {mlm: [k for k in keyed if severity_of(k[0], mlm) == "error"] for mlm in (False, True)}

    def breaks(self, config: dict[str, Any], derived: dict[str, Any]) -> bool:
        """Whether `config`, with `derived` as derive() gives its facts, fires a rule whose finding is an error: what
        `[f for f in evaluate(config, ...) if f.severity == "error"]` being non-empty says."""
        bare, absent = _BARE, repeat(_ABSENT)
        readings = tuple([v if v.__class__ in bare else _frozen(v) for v in map(config.get, self._config, absent)]
                         + [v if v.__class__ in bare else _frozen(v) for v in map(derived.get, self._derived, absent)])
        env = None
        for rule, key_of, memo in self._errors[is_megatron_lm(config)]:
            key = key_of(readings)
            try:
                fired, kept = memo.get(key, _MISS), True
            except TypeError:  # a value no freezing makes hashable: judged afresh
                fired, kept = _MISS, False
            if fired is _MISS:
                env = env or make_env(config, derived)
                fired = fires(rule, env)
                if kept:
                    memo[key] = fired
            if fired:
                return True
        return False
