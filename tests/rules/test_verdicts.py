"""Verdicts (rules/verdicts.py) says of a config what `evaluate` does, whether an error rule fires, though each rule
runs once per distinct reading of its names: on every rule's breaking config and the real Bridge recipes, in each
context, first and again from the memo; and readings a condition can tell apart never share a verdict."""

import ast

import pytest
from rule_cases import CASES, FIXTURES, RECIPES

from moetune.configio import load_config
from moetune.rules import evaluate, load_table
from moetune.rules.derive import derive
from moetune.rules.table import CONTEXTS, parse_table
from moetune.rules.verdicts import Verdicts


def _configs():
    """(config, estimator facts) of every rule case but the cluster-file one (its test writes the file), and of the
    recipes; the Megatron-LM launches among them (rule_cases.FSDP2_MLM) take the rules' severity_mlm."""
    out = [(load_config(sets=c.sets, gpu=c.gpu, gpus=c.gpus), c.derived) for c in CASES.values() if c.gpu != "@cdna3"]
    return out + [(load_config([FIXTURES / name], gpu=gpu, gpus=gpus), {}) for name, (gpu, gpus) in RECIPES.items()]


@pytest.mark.parametrize("context", CONTEXTS)
def test_verdicts_match_evaluate_on_every_rule_case(context):
    configs = _configs()
    want = [any(f.severity == "error" for f in evaluate(c, d, context=context)) for c, d in configs]
    assert any(want) and not all(want)
    verdicts = Verdicts(load_table(), context)
    for _ in range(2):  # the second pass answers from the memo the first filled
        assert [verdicts.breaks(c, derive(c, d)) for c, d in configs] == want


_TABLE = """
rules:
  - {id: t.is_true, severity: error, when: "model.flag is True", message: m, source: s}
  - {id: t.listed, severity: error, when: "model.mods == ['a', 'b']", message: m, source: s}
  - {id: t.present, severity: error, when: "has('model.set')", message: m, source: s}
  - {id: t.long, severity: error, when: "len(model.raw) > 1", message: m, source: s}
  - {id: t.mlm, severity: error, severity_mlm: warning, when: "derived.fact == 2", message: m, source: s}
"""


@pytest.mark.parametrize(("first", "then"), [
    ({"model.flag": True}, {"model.flag": 1}),  # equal and of one hash, but not `is True`
    ({"model.mods": ["a", "b"]}, {"model.mods": ("a", "b")}),  # a tuple is no list to ==
    ({"model.mods": ["a", "b"]}, {"model.mods": ["b", "a"]}),
    ({"model.set": None}, {}),  # set to None, and absent
    ({"model.raw": bytearray(b"ab")}, {"model.raw": bytearray(b"a")}),  # unhashable: judged afresh
])
def test_readings_a_condition_tells_apart_keep_their_own_verdicts(first, then):
    verdicts = Verdicts(parse_table(_TABLE))
    assert verdicts.breaks(first, {}) is True
    assert verdicts.breaks(then, {}) is False
    assert verdicts.breaks(first, {}) is True


def test_a_megatron_lm_launch_takes_the_rules_severity_mlm():
    verdicts = Verdicts(parse_table(_TABLE))
    assert verdicts.breaks({}, {"fact": 2}) is True
    assert verdicts.breaks({"cluster.launcher": "megatron-lm"}, {"fact": 2}) is False  # a warning there
    assert verdicts.breaks({}, {"fact": 2.5}) is False


def _singleton(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and any(node.value is c for c in (None, True, False))


def test_conditions_use_is_with_singletons_alone():
    """Verdicts keys a string by its value (verdicts._BARE): no condition may ask a string's identity."""
    asked = 0
    for rule in load_table().rules:
        for node in ast.walk(rule.when.tree):
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
                asked += 1
                assert any(_singleton(s) for s in [node.left, *node.comparators]), rule.id
    assert asked  # the table does use `is` (with None)
