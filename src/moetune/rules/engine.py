"""Evaluate the rule table on a normalized config: the findings behind check, explain and diagnose."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from moetune.configio.names import NO_DEFAULT, is_megatron_lm, names
from moetune.configio.normalize import Assignment, resolve
from moetune.configio.releases import refused
from moetune.rules.derive import derive
from moetune.rules.expr import Env, Expr, Missing
from moetune.rules.expr import evaluate as eval_expr
from moetune.rules.table import Rule, Table, load_table

_ORDER = {"error": 0, "warning": 1, "info": 2}
# the finding check gives a name or value the target release lacks (cli/release_check.py), outside the rule table
NOT_IN_RELEASE = "check.not_in_release"


@dataclass(kw_only=True, slots=True)
class Finding:
    """One fired rule. ``fix`` is a dict of config overrides (dotted name -> value)."""

    rule: str
    severity: str
    message: str
    fix: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    # the errors the rule's own fix would add, where vet_fixes withdrew it (a fix that trips another rule is none)
    fix_withdrawn: list[str] = field(default_factory=list)
    # the rule ids whose fault this finding says too (layout.illegal: MoetuneError.same_as; Megatron-Core's refusal:
    # the rules whose change gets it past that check, rules/mcore.py same_fault), so check says each fault once
    # (cli/check_cmd.py said_once); not in as_dict
    same_as: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "same_as"}


def make_env(config: dict[str, Any], derived: dict[str, Any]) -> Env:
    """Names resolve to the config, then derived facts, then Megatron's defaults; else Missing."""
    table = names()

    def lookup(name: str) -> Any:
        if name in config:
            return config[name]
        if name.startswith("derived."):
            key = name[len("derived."):]
            if key in derived:
                return derived[key]
            raise Missing(name)
        default = table.default(name)
        if default is NO_DEFAULT:
            raise Missing(name)
        return default

    def present(name: str) -> bool:
        if name.startswith("derived."):
            return name[len("derived."):] in derived
        return name in config

    return Env(lookup=lookup, present=present)


def _safe(expr: Expr, env: Env) -> tuple[bool, Any]:
    """(ok, value): not ok when a name is missing or an operand is None (the rule cannot be decided)."""
    try:
        return True, eval_expr(expr, env)
    except Missing:
        return False, None
    except TypeError:
        # e.g. `None % 2` when a Megatron default is None: the config does not say enough to decide.
        return False, None


def _message(rule: Rule, env: Env) -> str:
    text = rule.message
    for raw, expr, conv in rule.placeholders:
        ok, val = _safe(expr, env)
        shown = ("?" if not ok else repr(val) if conv == "r" else str(val))
        text = text.replace("{" + raw + "}", shown, 1)
    return text


def _fix(rule: Rule, env: Env) -> dict[str, Any]:
    for step in rule.steps:
        if step.when is not None:
            ok, val = _safe(step.when, env)
            if not (ok and val):
                continue
        if isinstance(step.fix, Expr):
            ok, val = _safe(step.fix, env)
            if ok and isinstance(val, dict):
                return dict(val)
            continue
        out: dict[str, Any] = {}
        for key, raw in step.fix.items():
            ok, val = _safe(raw, env) if isinstance(raw, Expr) else (True, raw)
            if not ok:
                break
            out[key] = val
        else:
            return out
    return {}


def fires(rule: Rule, env: Env) -> bool:
    """Whether the rule's condition holds; not where it cannot be decided (_safe)."""
    ok, fired = _safe(rule.when, env)
    return bool(ok and fired)


def severity_of(rule: Rule, megatron_lm: bool) -> str:
    """The rule's severity, its Megatron-LM one on a Megatron-LM launch (rules.yaml severity_mlm)."""
    return rule.severity_mlm if rule.severity_mlm and megatron_lm else rule.severity


def evaluate(config: dict[str, Any], derived: dict[str, Any] | None = None, *, context: str = "check",
             table: Table | None = None) -> list[Finding]:
    """Findings for a normalized config, errors first. ``derived`` adds estimator/profiler facts."""
    table = table or load_table()
    facts = derive(config, derived)
    env = make_env(config, facts)
    findings = []
    for rule in table.rules:
        if context not in rule.contexts:
            continue
        if fires(rule, env):
            findings.append(Finding(rule=rule.id, severity=severity_of(rule, is_megatron_lm(config)),
                                    message=_message(rule, env),
                                    fix=_fix(rule, env), source=rule.source))
    findings.sort(key=lambda f: _ORDER[f.severity])
    return findings


def vet_fixes(config: dict[str, Any], found: list[Finding], derived: dict[str, Any] | None = None, *,
              context: str = "check") -> list[Finding]:
    """`found` with each fix applied to the config alone and the table run again: a fix that adds an error is
    withdrawn, its errors named (Finding.fix_withdrawn), so no printed fix sends a user into another refusal (the
    explain audit found four that did). ``derived``: the same estimator facts the findings had, with the release
    targeted (target_release), under which each fix is judged too: one setting a name or value that release lacks
    is what check.not_in_release refuses there (configio/releases.py refused), though no rule of the table says it."""
    before = {f.rule for f in found if f.severity == "error"}
    release = (derived or {}).get("target_release")
    out = []
    for f in found:
        if f.fix:
            fix = resolve(Assignment(key=k, value=v, origin=f"fix of {f.rule}") for k, v in f.fix.items())
            after = evaluate({**config, **fix}, derived, context=context)
            added = {g.rule for g in after if g.severity == "error"} - before
            added = sorted(added | ({NOT_IN_RELEASE} if _refused_unsaid(fix, release, added) else set()))
            f = replace(f, fix={}, fix_withdrawn=added) if added else f
        out.append(f)
    return out


def _refused_unsaid(fix: dict[str, Any], release: str | None, added: set[str]) -> bool:
    """Whether FIX sets a name or value RELEASE lacks (configio/releases.py refused) that none of the rules it newly
    trips, ADDED, covers (rules.yaml `covers`): check would say it as check.not_in_release."""
    if release is None:
        return False
    table = load_table()
    return any(not set(table.covering(row)) & added for row in refused(fix, release))
