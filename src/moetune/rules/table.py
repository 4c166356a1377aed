"""Load and validate the rule table (src/moetune/data/rules.yaml).

A rule is data: id, severity, a condition, a message, a fix as config overrides and the seed section it
comes from. Loading parses every expression once (moetune.rules.expr), so a malformed table fails at
import time in the tests rather than when a user's config happens to reach that rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from moetune.configio.releases import releases
from moetune.errors import MoetuneError
from moetune.files import shipped_text, yaml_data
from moetune.rules.expr import Expr, compile_expr

SEVERITIES = ("error", "warning", "info")
CONTEXTS = ("check", "explain", "diagnose")
_ID = re.compile(r"^[a-z0-9_]+\.[a-z0-9_]+$")
_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")


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
    names: frozenset[str] = field(default_factory=frozenset)  # every config name the rule reads
    # the severity under a Megatron-LM launch (cluster.launcher), where it differs: a check only Bridge makes
    severity_mlm: str | None = None
    # release-table rows (megatron_releases.csv / bridge_releases.csv names) whose lack the rule says when it fires,
    # which check.not_in_release leaves to it (rules.yaml `covers`)
    covers: frozenset[str] = field(default_factory=frozenset)


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
    return compile_expr(v[1:]) if isinstance(v, str) and v.startswith("=") else v


def _fix(raw: Any, rule_id: str) -> dict[str, Any] | Expr:
    if isinstance(raw, str) and raw.startswith("="):
        return compile_expr(raw[1:])
    if not isinstance(raw, dict):
        raise MoetuneError(f"rules.yaml {rule_id}: fix must be a mapping of dotted names or an '=expression'")
    return {str(k): _value(v) for k, v in raw.items()}


def _placeholders(message: str) -> tuple[tuple[str, Expr, str], ...]:
    out = []
    for m in _PLACEHOLDER.finditer(message):
        text = m.group(1)
        source, conv = (text[:-2], "r") if text.endswith("!r") else (text, "")
        out.append((text, compile_expr(source), conv))
    return tuple(out)


def _rule(raw: dict[str, Any]) -> Rule:
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
        steps.append(FixStep(when=compile_expr(str(step["when"])), fix=_fix(step["fix"], rid),
                             note=step.get("note", "")))
    when = compile_expr(str(raw["when"]))
    message = " ".join(str(raw["message"]).split())
    holders = _placeholders(message)
    names = set(when.names)
    for _, expr, _ in holders:
        names |= expr.names
    for step in steps:
        names |= step.when.names if step.when else set()
        exprs = [step.fix] if isinstance(step.fix, Expr) else [v for v in step.fix.values() if isinstance(v, Expr)]
        names |= {n for e in exprs for n in e.names}
        names |= set(step.fix) if isinstance(step.fix, dict) else set()
    return Rule(id=rid, severity=raw["severity"], when=when, message=message, placeholders=holders,
                steps=tuple(steps), source=str(raw["source"]), code=str(raw.get("code", "")), contexts=contexts,
                names=frozenset(names), severity_mlm=raw.get("severity_mlm"), covers=_covers(raw, rid))


def _covers(raw: dict[str, Any], rid: str) -> frozenset[str]:
    """A rule's `covers`, each a row of a release table; only an error rule's (it stands in for an error)."""
    covers = frozenset(str(row) for row in raw.get("covers", ()))
    if not covers:
        return covers
    if {raw["severity"], raw.get("severity_mlm", raw["severity"])} != {"error"}:
        raise MoetuneError(f"rules.yaml {rid}: covers needs severity error (it stands in for check.not_in_release)")
    if unknown := sorted(covers - set(releases("core").have) - set(releases("bridge").have)):
        raise MoetuneError(f"rules.yaml {rid}: covers names rows no release table has: {', '.join(unknown)}")
    return covers


def parse_table(text: str) -> Table:
    data = yaml_data(text)
    rules = tuple(_rule(r) for r in data["rules"])
    ids = [r.id for r in rules]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise MoetuneError(f"rules.yaml: duplicate rule ids {', '.join(dupes)}")
    return Table(rules=rules, mixed_precision_recipes=data.get("mixed_precision_recipes", {}))


@lru_cache(maxsize=1)
def load_table() -> Table:
    """The packaged rule table, parsed once."""
    return parse_table(shipped_text("rules.yaml"))
