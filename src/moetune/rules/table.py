"""Load and validate the rule table (src/moetune/data/rules.yaml).

A rule is data: id, severity, a condition, a message, a fix as config overrides and the seed section it
comes from. parse_table parses every expression and looks every `covers` row up in the release tables, so a
malformed table fails when it is read; load_table, the shipped table every command reads, leaves each expression
to be parsed when first asked (a plan asks for the conditions of the error rules alone) and the rows unlooked-up:
tests/rules/test_rule_table.py parses the shipped table in full, so a malformed rule still fails the tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from moetune.configio.releases import releases
from moetune.errors import MoetuneError
from moetune.files import shipped_text, yaml_data
from moetune.rules.expr import Expr, deferred_expr

SEVERITIES = ("error", "warning", "info")
CONTEXTS = ("check", "explain", "diagnose")
_ID = re.compile(r"^[a-z0-9_]+\.[a-z0-9_]+$")
_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")

# the table writes 159 of its 526 expressions more than once (has('...') guards, the same fix value): an Expr is
# immutable, so one text is parsed once
_expr = lru_cache(maxsize=None)(deferred_expr)


@dataclass(frozen=True, slots=True, kw_only=True)
class FixStep:
    """One alternative of an ordered fix: applies when ``when`` holds."""

    when: Expr | None
    fix: dict[str, Any] | Expr  # dotted name -> literal or Expr; or one Expr giving the whole dict
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    id: str
    severity: str
    when: Expr
    message: str
    placeholders: tuple[tuple[str, Expr, str], ...]  # (text inside {}, compiled expression, conversion)
    steps: tuple[FixStep, ...]  # empty: no fix; one unconditional step for a plain `fix`
    source: str
    code: str = ""
    contexts: tuple[str, ...] = CONTEXTS
    # the severity under a Megatron-LM launch (cluster.launcher), where it differs: a check only Bridge makes
    severity_mlm: str | None = None
    # release-table rows (megatron_releases.csv / bridge_releases.csv names) whose lack the rule says when it fires,
    # which check.not_in_release leaves to it (rules.yaml `covers`)
    covers: frozenset[str] = field(default_factory=frozenset)

    @property
    def names(self) -> frozenset[str]:
        """Every config name the rule reads: its condition's, message's and fix's, and the names the fix sets."""
        names = set(self.when.names)
        for _, expr, _ in self.placeholders:
            names |= expr.names
        for step in self.steps:
            names |= step.when.names if step.when else set()
            exprs = [step.fix] if isinstance(step.fix, Expr) else [v for v in step.fix.values() if isinstance(v, Expr)]
            names |= {n for e in exprs for n in e.names}
            names |= set(step.fix) if isinstance(step.fix, dict) else set()
        return frozenset(names)


@dataclass(frozen=True, slots=True, kw_only=True)
class Table:
    rules: tuple[Rule, ...]
    mixed_precision_recipes: dict[str, dict[str, Any]]

    def rule(self, rule_id: str) -> Rule:
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise KeyError(rule_id)

    def covering(self, row: str) -> tuple[str, ...]:
        """The ids of the rules that say ROW's lack themselves (their `covers`)."""
        return tuple(r.id for r in self.rules if row in r.covers)


def _value(v: Any) -> Any:
    """Fix values: a string starting with '=' is an expression, anything else a literal."""
    return _expr(v[1:]) if isinstance(v, str) and v.startswith("=") else v


def _fix(raw: Any, rule_id: str) -> dict[str, Any] | Expr:
    if isinstance(raw, str) and raw.startswith("="):
        return _expr(raw[1:])
    if not isinstance(raw, dict):
        raise MoetuneError(f"rules.yaml {rule_id}: fix must be a mapping of dotted names or an '=expression'")
    return {str(k): _value(v) for k, v in raw.items()}


def _placeholders(message: str) -> tuple[tuple[str, Expr, str], ...]:
    out = []
    for m in _PLACEHOLDER.finditer(message):
        text = m.group(1)
        source, conv = (text[:-2], "r") if text.endswith("!r") else (text, "")
        out.append((text, _expr(source), conv))
    return tuple(out)


def _rule(raw: dict[str, Any], full: bool) -> Rule:
    rid = raw.get("id", "?")
    missing = [k for k in ("id", "severity", "when", "message", "source") if k not in raw]
    if missing:
        raise MoetuneError(f"rules.yaml {rid}: missing {', '.join(missing)}")
    if not _ID.match(rid):
        raise MoetuneError(f"rules.yaml {rid}: ids look like area.what (lower case)")
    if raw["severity"] not in SEVERITIES:
        raise MoetuneError(f"rules.yaml {rid}: severity must be one of {SEVERITIES}")
    if raw.get("severity_mlm", raw["severity"]) not in SEVERITIES:
        raise MoetuneError(f"rules.yaml {rid}: severity_mlm must be one of {SEVERITIES}")
    contexts = tuple(raw.get("contexts", CONTEXTS))
    if set(contexts) - set(CONTEXTS):
        raise MoetuneError(f"rules.yaml {rid}: contexts must be among {CONTEXTS}")
    steps: list[FixStep] = []
    if "fix" in raw:
        steps.append(FixStep(when=None, fix=_fix(raw["fix"], rid)))
    for step in raw.get("fix_steps", []):
        steps.append(FixStep(when=_expr(str(step["when"])), fix=_fix(step["fix"], rid), note=step.get("note", "")))
    message = " ".join(str(raw["message"]).split())
    rule = Rule(id=rid, severity=raw["severity"], when=_expr(str(raw["when"])), message=message,
                placeholders=_placeholders(message), steps=tuple(steps), source=str(raw["source"]),
                code=str(raw.get("code", "")), contexts=contexts, severity_mlm=raw.get("severity_mlm"),
                covers=_covers(raw, rid))
    if full:
        _ = rule.names  # every expression parsed: its condition's, message's and fix's
        _rows_known(rule)
    return rule


def _covers(raw: dict[str, Any], rid: str) -> frozenset[str]:
    """A rule's `covers`, each a row of a release table; only an error rule's (it stands in for an error)."""
    covers = frozenset(str(row) for row in raw.get("covers", ()))
    if covers and {raw["severity"], raw.get("severity_mlm", raw["severity"])} != {"error"}:
        raise MoetuneError(f"rules.yaml {rid}: covers needs severity error (it stands in for check.not_in_release)")
    return covers


def _rows_known(rule: Rule) -> None:
    """Every row the rule covers is one a release table has (a misspelt one would leave check.not_in_release saying
    what the rule says)."""
    if unknown := sorted(rule.covers - set(releases("core").have) - set(releases("bridge").have)):
        raise MoetuneError(f"rules.yaml {rule.id}: covers names rows no release table has: {', '.join(unknown)}")


def parse_table(text: str, *, full: bool = True) -> Table:
    """The rule table in TEXT. FULL: every expression parsed and every `covers` row looked up now, so any fault is
    said here; else each expression waits until it is asked for (load_table)."""
    data = yaml_data(text)
    rules = tuple(_rule(r, full) for r in data["rules"])
    ids = [r.id for r in rules]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise MoetuneError(f"rules.yaml: duplicate rule ids {', '.join(dupes)}")
    return Table(rules=rules, mixed_precision_recipes=data.get("mixed_precision_recipes", {}))


@lru_cache(maxsize=1)
def load_table() -> Table:
    """The packaged rule table, read once; each expression parsed when first asked (the tests parse the table in
    full: tests/rules/test_rule_table.py)."""
    return parse_table(shipped_text("rules.yaml"), full=False)
