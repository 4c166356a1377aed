"""The rule expression language: what it evaluates, what it refuses, and how absent names behave."""

import pytest

from moetune.errors import MoetuneError
from moetune.rules.expr import Env, Missing, compile_expr, deferred_expr, evaluate


def env(values):
    def lookup(name):
        if name in values:
            return values[name]
        raise Missing(name)

    return Env(lookup=lookup, present=lambda name: name in values)


@pytest.mark.parametrize(("source", "values", "expected"), [
    ("model.a > 1 and model.b == 'flex'", {"model.a": 2, "model.b": "flex"}, True),
    ("model.a % (model.b * 2) != 0", {"model.a": 10, "model.b": 2}, True),
    ("'moe' in (model.m or [])", {"model.m": None}, False),
    ("model.m not in ('fp32', 'fp64')", {"model.m": None}, True),
    ("pow2_round(model.s / 4096)", {"model.s": 131072 * 1.3}, 32),
    ("pow2_floor(model.d)", {"model.d": 72}, 64),
    ("union(without(model.m, 'core_attn'), ['moe_act'])", {"model.m": ["core_attn", "mlp"]}, ["mlp", "moe_act"]),
    ("contains_any(model.m, ['moe', 'mlp']) and not contains_all(model.m, ['attn', 'moe'])",
     {"model.m": ["moe"]}, True),
    ("'a' if model.x >= 72 else 'b'", {"model.x": 8}, "b"),
    ("words(model.m)", {"model.m": ["layernorm", "moe_act", "mla_up_proj"]}, "layernorm, moe_act and mla_up_proj"),
    ("words(model.m)", {"model.m": ["layernorm"]}, "layernorm"),
    ("words(model.m)", {"model.m": None}, ""),
    ("env.NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN", {"env.NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 8}, 8),
    ("-model.a + 1", {"model.a": 3}, -2),
])
def test_evaluates(source, values, expected):
    assert evaluate(compile_expr(source), env(values)) == expected


def test_short_circuit_never_touches_absent_names():
    assert evaluate(compile_expr("has('derived.fits') and derived.fits == False"), env({})) is False
    assert evaluate(compile_expr("model.a == 1 or derived.fits"), env({"model.a": 1})) is True
    assert evaluate(compile_expr("get('derived.x', 3) + 1"), env({})) == 4


def test_absent_name_raises_missing():
    with pytest.raises(Missing) as err:
        evaluate(compile_expr("derived.fits == False"), env({}))
    assert err.value.name == "derived.fits"


@pytest.mark.parametrize("source", [
    "__import__('os').system('true')",  # call of a non-whitelisted function
    "model.a.__class__",  # still a dotted name, but see below: only config names resolve
    "lambda: 1",
    "[x for x in model.a]",
    "model.a[0]",
    "fits == False",  # bare name
    "len(model.a, key=1)",
    "has(model.a)",  # has() takes a quoted name
])
def test_refuses_unsafe_or_unknown_constructs(source):
    if source == "model.a.__class__":
        # Parsed as the config name 'model.a.__class__', which no config has: it can never reach Python objects.
        with pytest.raises(Missing):
            evaluate(compile_expr(source), env({"model.a": 1}))
        return
    with pytest.raises(MoetuneError):
        compile_expr(source)


def test_syntax_error_is_one_line():
    with pytest.raises(MoetuneError, match="not valid"):
        compile_expr("model.a >")


@pytest.mark.parametrize(("source", "needle"), [
    ("model.a ** 2", "Pow is not allowed"),
    ("~model.a", "Invert is not allowed"),
    ("[*model.a]", "Starred is not allowed"),
    ("model.a if model.b else c", "bare name 'c'"),
    # children in ast's field order: a BinOp's operator before its right operand, a UnaryOp's before its operand
    ("model.a ** open(1)", "Pow is not allowed"),
    ("~open(1)", "Invert is not allowed"),
    ("open(1) ** model.a", "function 'open' is not allowed"),
])
def test_names_the_first_offending_construct(source, needle):
    with pytest.raises(MoetuneError, match=needle):
        compile_expr(source)


def test_names_read_are_the_dotted_names_and_quoted_has_get_arguments():
    expr = compile_expr("has('x.y') and model.a.b > get('c.d', 1) + len([env.E, (model.t,)]) if not model.u else 0")
    assert expr.names == {"x.y", "model.a.b", "c.d", "env.E", "model.t", "model.u"}


def test_a_deferred_expression_is_parsed_when_first_asked():
    """The rule table's expressions are parsed when first asked for (rules/table.py load_table): a malformed one is
    compile_expr's error there, its names or its value."""
    bad = deferred_expr("model.a >")
    with pytest.raises(MoetuneError, match="not valid"):
        _ = bad.names
    with pytest.raises(MoetuneError, match="Pow is not allowed"):
        evaluate(deferred_expr("model.a ** 2"), env({"model.a": 2}))
    good = deferred_expr("model.a + 1")
    assert evaluate(good, env({"model.a": 2})) == 3 and evaluate(good, env({"model.a": 5})) == 6
    assert good.names == {"model.a"}
