"""The rules a config of dotted overrides breaks, by id: what the rule tests ask of `evaluate`."""

from rule_cases import S

from moetune.configio import load_config
from moetune.rules import evaluate


def findings(*sets) -> dict:
    """rule id -> finding for the overrides `sets` (rule_cases.S order: a later key replaces an earlier one)."""
    return {f.rule: f for f in evaluate(load_config(sets=S(*sets)))}
