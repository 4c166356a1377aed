"""A small, safe expression language for rule conditions, messages and fixes.

Expressions use Python syntax and are parsed with ``ast``; only a whitelist of node types is
accepted, so nothing from a rule file is ever passed to ``eval``. A dotted chain such as
``model.expert_model_parallel_size`` or ``env.NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN`` is one
config name, resolved by the caller's ``lookup``; a name that cannot be resolved raises
:class:`Missing`, which makes the rule skip instead of fire. ``and``/``or``/``x if c else y``
short-circuit, so ``has('x') and x > 1`` never looks ``x`` up when it is absent.
"""

from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass, field
from typing import Any, Callable

from moetune.configio.releases import core_at_least
from moetune.errors import MoetuneError
from moetune.words import words


class Missing(Exception):
    """A name the expression needs is absent (and has no Megatron default)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def _pow2_round(x: float) -> int:
    """Nearest power of two, at least 1 (seeds/002: CP ~= seq_len/4096, rounded to a power of two)."""
    return 1 if x <= 1 else 2 ** round(math.log2(x))


def _pow2_floor(x: float) -> int:
    return 1 if x < 2 else 2 ** int(math.log2(x))


def _without(items, *drop):
    return [i for i in (items or []) if i not in drop]


def _union(items, more):
    out = list(items or [])
    return out + [m for m in (more or []) if m not in out]


def _contains_any(items, wanted) -> bool:
    return any(w in (items or []) for w in wanted)


def _contains_all(items, wanted) -> bool:
    return all(w in (items or []) for w in wanted)


def _lower(s):
    return s.lower() if isinstance(s, str) else s


# Functions a rule may call. has/get are resolved against the lookup (see Env).
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "len": len, "min": min, "max": max, "int": int, "lower": _lower, "words": words,
    "pow2_round": _pow2_round, "pow2_floor": _pow2_floor,
    "without": _without, "union": _union, "contains_any": _contains_any, "contains_all": _contains_all,
    # core_at_least(get('derived.target_release'), 'X.Y'): the release targeted runs Megatron-Core X.Y or later
    "core_at_least": core_at_least,
}
SPECIAL = ("has", "get")

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_CMPOPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b,
           ast.NotIn: lambda a, b: a not in b, ast.Is: operator.is_, ast.IsNot: operator.is_not}
_UNOPS = {ast.Not: operator.not_, ast.USub: operator.neg, ast.UAdd: operator.pos}


@dataclass(frozen=True, slots=True, kw_only=True)
class Expr:
    """An expression: its source, parsed and validated (its tree, the config names it reads) when first asked, and
    compiled to nested closures (_closure: each node's type dispatched once, not every time a rule is asked) when
    first evaluated. compile_expr parses at once; the shipped rule table waits (rules/table.py load_table): a plan
    reads the conditions of its 113 error rules, evaluates 73 (planner/legal.py knob_rules), and few messages or
    fixes."""

    source: str
    _parsed: tuple[ast.expr, frozenset[str]] | None = field(default=None, compare=False, repr=False)
    run: Callable[["Env"], Any] = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.run is None:
            object.__setattr__(self, "run", self._first_run)  # frozen: set here, then once when first run

    @property
    def tree(self) -> ast.expr:
        return self.parsed()[0]

    @property
    def names(self) -> frozenset[str]:
        return self.parsed()[1]

    def parsed(self) -> tuple[ast.expr, frozenset[str]]:
        """(tree, names); a MoetuneError naming the offending construct where the source is not a valid expression."""
        if self._parsed is None:
            object.__setattr__(self, "_parsed", _parse(self.source))
        return self._parsed

    def _first_run(self, env: "Env") -> Any:
        run = _closure(self.tree)
        object.__setattr__(self, "run", run)
        return run(env)


@dataclass(kw_only=True, slots=True)
class Env:
    """What an expression can see: ``lookup(name)`` (raises Missing) and ``present(name)``."""

    lookup: Callable[[str], Any]
    present: Callable[[str], bool]


def dotted(node: ast.AST) -> str | None:
    """``a.b.c`` as one name, or None if the node is not a pure attribute chain."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and parts:
        return ".".join([node.id, *reversed(parts)])
    return None


def compile_expr(source: str) -> Expr:
    """Parse and validate ``source``; raise MoetuneError naming the offending construct."""
    expr = Expr(source=source)
    expr.parsed()
    return expr


def deferred_expr(source: str) -> Expr:
    """``source`` as an Expr parsed and validated when first asked for its names, tree or value (where a malformed one
    raises compile_expr's MoetuneError)."""
    return Expr(source=source)


def _parse(source: str) -> tuple[ast.expr, frozenset[str]]:
    try:
        tree = ast.parse(source.strip(), mode="eval").body
    except SyntaxError as err:
        raise MoetuneError(f"rule expression {source!r} is not valid: {err.msg}") from None
    names: set[str] = set()
    _check(tree, source, names)
    return tree, frozenset(names)


def _check(node: ast.AST, source: str, names: set[str]) -> None:
    """Reject any node outside the whitelist, children in ast's field order (a BinOp's left, op, right: the first
    offender is the one named), and gather the config names read; one branch per node type, not ast's generic walk
    (the table's 191 conditions are checked whenever a command loads it)."""
    kind = type(node)
    if kind is ast.Constant or kind in _ALLOWED_OPS:
        return
    if kind is ast.Attribute:
        name = dotted(node)
        if name is None:
            raise MoetuneError(f"rule expression {source!r}: attributes only on config names")
        names.add(name)
        return
    if kind is ast.Call:
        _check_call(node, source, names)
        return
    if kind is ast.Name:
        raise MoetuneError(f"rule expression {source!r}: bare name {node.id!r} (use a dotted config name)")
    children = _CHILDREN.get(kind)
    if children is None:
        raise MoetuneError(f"rule expression {source!r}: {kind.__name__} is not allowed")
    for child in children(node):
        _check(child, source, names)


def _check_call(node: ast.Call, source: str, names: set[str]) -> None:
    fn = node.func.id if isinstance(node.func, ast.Name) else None
    if fn not in FUNCTIONS and fn not in SPECIAL or node.keywords:
        raise MoetuneError(f"rule expression {source!r}: function {ast.unparse(node.func)!r} is not allowed")
    if fn in SPECIAL:
        if not node.args or not isinstance(node.args[0], ast.Constant) or not isinstance(node.args[0].value, str):
            raise MoetuneError(f"rule expression {source!r}: {fn}() takes a quoted config name")
        names.add(node.args[0].value)
    for arg in node.args:
        _check(arg, source, names)


# the whitelisted compound nodes, each with its children in ast's field order (a BoolOp's And/Or and a List's or
# Tuple's Load context need no check); the operators allowed are those the evaluator knows
_CHILDREN: dict[type, Callable[[Any], Any]] = {
    ast.BoolOp: lambda n: n.values, ast.BinOp: lambda n: (n.left, n.op, n.right),
    ast.UnaryOp: lambda n: (n.op, n.operand), ast.Compare: lambda n: (n.left, *n.ops, *n.comparators),
    ast.IfExp: lambda n: (n.test, n.body, n.orelse), ast.List: lambda n: n.elts, ast.Tuple: lambda n: n.elts,
}
_ALLOWED_OPS = frozenset((*_BINOPS, *_CMPOPS, *_UNOPS))


def evaluate(expr: Expr, env: Env) -> Any:
    """Evaluate a compiled expression. Raises Missing when a needed name is absent."""
    return expr.run(env)


def _closure(node: ast.AST) -> Callable[[Env], Any]:
    """`node` (validated by _check) as a function of the Env that evaluates it, Python's semantics kept (and/or
    short-circuit to an operand, comparisons chain, get's default only for a missing name), built once at load because
    the planner asks every knob set's rules (planner/legal.py), a few hundred a plan."""
    if isinstance(node, ast.Constant):
        value = node.value
        return lambda env: value
    if isinstance(node, ast.Attribute):
        name = dotted(node)
        return lambda env: env.lookup(name)
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_closure(e) for e in node.elts]
        return lambda env: [f(env) for f in items]
    if isinstance(node, ast.BoolOp):
        return _bool_op(isinstance(node.op, ast.And), [_closure(v) for v in node.values])
    if isinstance(node, ast.UnaryOp):
        op, operand = _UNOPS[type(node.op)], _closure(node.operand)
        return lambda env: op(operand(env))
    if isinstance(node, ast.BinOp):
        op, left, right = _BINOPS[type(node.op)], _closure(node.left), _closure(node.right)
        return lambda env: op(left(env), right(env))
    if isinstance(node, ast.Compare):
        return _compare(_closure(node.left), [(_CMPOPS[type(o)], _closure(c)) for o, c in zip(node.ops,
                                                                                            node.comparators)])
    if isinstance(node, ast.IfExp):
        test, body, orelse = _closure(node.test), _closure(node.body), _closure(node.orelse)
        return lambda env: body(env) if test(env) else orelse(env)
    if isinstance(node, ast.Call):
        return _call_closure(node)
    raise MoetuneError(f"cannot evaluate {ast.unparse(node)!r}")


def _bool_op(is_and: bool, operands: list) -> Callable[[Env], Any]:
    def run(env: Env) -> Any:
        value: Any = None
        for operand in operands:
            value = operand(env)
            if bool(value) != is_and:
                return value
        return value
    return run


def _compare(first, rest: list) -> Callable[[Env], Any]:
    def run(env: Env) -> bool:
        left = first(env)
        for op, comp in rest:
            right = comp(env)
            if not op(left, right):
                return False
            left = right
        return True
    return run


def _call_closure(node: ast.Call) -> Callable[[Env], Any]:
    fn = node.func.id
    if fn == "has":
        name = node.args[0].value
        return lambda env: env.present(name)
    if fn == "get":
        name = node.args[0].value
        default = _closure(node.args[1]) if len(node.args) > 1 else None

        def get(env: Env) -> Any:
            try:
                return env.lookup(name)
            except Missing:
                return default(env) if default is not None else None
        return get
    call, args = FUNCTIONS[fn], [_closure(a) for a in node.args]
    return lambda env: call(*(a(env) for a in args))
