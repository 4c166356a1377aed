"""The values a Megatron-LM tree's TransformerConfig (and its trainer's --optimizer) accepts for the fields moetune's
plans enumerate, as names "model.FIELD=VALUE" (and "optimizer.optimizer=VALUE") of kind "value"
(tools/megatron_releases.py and tools/bridge_releases.py list them beside the fields, so configio/releases.has
answers for a value as for a field). Read from the sources by ast:

- recompute_modules, offload_modules: the `allowed_modules = {...}` sets __post_init__ checks each against (told
  apart by the field the statements after the set name);
- cuda_graph_scope: the members of enums.CudaGraphScope, which the field takes as a list from core_v0.16.0 on (and
  "full", the whole layer, where __post_init__ still maps it); before it the field is one string, and its docstring
  names "full", "attn" (Transformer Engine) and "full_iteration" (local) (transformer_config.py:646-652
  @core_v0.15.0), which SINGLE_SCOPES lists;
- cuda_graph_impl, moe_flex_dispatcher_backend: the field's Literal annotation; a plain `str` cuda_graph_impl
  (core_v0.15.0, transformer_config.py:638-644) takes what its docstring names, STR_IMPLS, and a plain `str` backend
  any value (WILDCARD, expand);
- optimizer.optimizer: the Muon optimizers moetune prices beside Adam (MUON; Adam is in every release), where the
  tree's --optimizer choices list them (megatron/training/arguments.py: adam and sgd alone at core_v0.15.0:2198,
  muon and dist_muon from core_v0.16.0:2057); OptimizerConfig's field is a plain str, and it is Megatron-LM's trainer
  that routes a Muon name to get_megatron_muon_optimizer (training.py core_v0.16.0), Megatron-Core's
  get_megatron_optimizer raising "optimizer is not supported" for it. Megatron Bridge routes them itself
  (tools/bridge_releases.py bridge_optimizers).
"""

from __future__ import annotations

import ast
import os

SINGLE_SCOPES = ("full", "attn", "full_iteration")
WILDCARD = "*"  # a str field no Literal or list bounds: every value any release takes (expand)
STR_IMPLS = ("none", "local", "transformer_engine")
LITERALS = ("cuda_graph_impl", "moe_flex_dispatcher_backend")
MUON = ("muon", "dist_muon")


def _parse(tree: str, path: str) -> ast.Module | None:
    full = os.path.join(tree, path)
    if not os.path.exists(full):
        return None
    with open(full) as f:
        return ast.parse(f.read())


def _allowed_sets(config: ast.Module) -> dict[str, list[str]]:
    """field -> the allowed_modules set __post_init__ checks it against."""
    out = {}
    for node in ast.walk(config):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Set) and any(
                    isinstance(t, ast.Name) and t.id == "allowed_modules" for t in stmt.targets):
                after = " ".join(ast.unparse(s) for s in body[i + 1:i + 3])
                field = next((f for f in ("recompute_modules", "offload_modules") if f"self.{f}" in after), None)
                if field:
                    out[field] = sorted(ast.literal_eval(e) for e in stmt.value.elts)
    return out


def _annotation(config: ast.Module, field: str) -> ast.expr | None:
    for node in ast.walk(config):
        if isinstance(node, ast.ClassDef) and node.name == "TransformerConfig":
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and getattr(stmt.target, "id", "") == field:
                    return stmt.annotation
    return None


def _literal(annotation: ast.expr | None) -> list[str] | None:
    if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value).endswith("Literal"):
        items = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        return [ast.literal_eval(e) for e in items]
    return None


def _scopes(tree: str, config: ast.Module) -> list[str]:
    """CudaGraphScope's members, with "full" where __post_init__ still takes it (as the whole layer, an empty list:
    transformer_config.py:1701 @core_v0.16.0); SINGLE_SCOPES before the enum."""
    enums = _parse(tree, "megatron/core/transformer/enums.py")
    for node in ast.walk(enums) if enums else ():
        if isinstance(node, ast.ClassDef) and node.name == "CudaGraphScope":
            members = [t.id for s in node.body if isinstance(s, ast.Assign) for t in s.targets
                       if isinstance(t, ast.Name)]
            return members + (["full"] if "'full' in self.cuda_graph_scope" in ast.unparse(config) else [])
    for node in ast.walk(config):  # a list of strings, each checked against a list (Transformer Engine's graphs),
        # full_iteration the local implementation's (transformer_config.py:1534 @0d8e0714cd29, Bridge 0.2.0's pin)
        if isinstance(node, ast.For) and ast.unparse(node.iter) == "self.cuda_graph_scope":
            for test in ast.walk(node):
                if isinstance(test, ast.Compare) and isinstance(test.comparators[0], (ast.List, ast.Tuple)):
                    return [ast.literal_eval(e) for e in test.comparators[0].elts] + ["full_iteration"]
    return list(SINGLE_SCOPES)


def optimizers(tree: str) -> list[str]:
    """The Muon optimizers (MUON) among the choices of the tree's --optimizer argument."""
    arguments = _parse(tree, "megatron/training/arguments.py")
    for node in ast.walk(arguments) if arguments else ():
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument" and node.args and \
                isinstance(node.args[0], ast.Constant) and node.args[0].value == "--optimizer":
            choices = next((ast.literal_eval(k.value) for k in node.keywords if k.arg == "choices"), [])
            return [c for c in choices if c in MUON]
    return []


def values(tree: str) -> dict[str, str]:
    """{"model.FIELD=VALUE": "value"} of the Megatron-LM tree at TREE (its megatron/ directory's parent)."""
    config = _parse(tree, "megatron/core/transformer/transformer_config.py")
    found = dict(_allowed_sets(config))
    for field in LITERALS:
        annotation = _annotation(config, field)
        got = _literal(annotation)
        if got is None and annotation is not None:  # a plain str: what the docstring names, or any value (WILDCARD)
            got = list(STR_IMPLS) if field == "cuda_graph_impl" else [WILDCARD]
        if got is not None:
            found[field] = got
    if _annotation(config, "cuda_graph_scope") is not None:
        found["cuda_graph_scope"] = _scopes(tree, config)
    return {**{f"model.{field}={v}": "value" for field, vs in found.items() for v in vs},
            **{f"optimizer.optimizer={v}": "value" for v in optimizers(tree)}}


def expand(have: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """HAVE (release -> its names) with each "model.F=*" replaced by every value of F any release names: a plain str
    field (moe_flex_dispatcher_backend at Bridge 0.2.0's pin, whose token dispatcher branches on deepep and
    hybridep) takes what the others' Literal does."""
    known: dict[str, set[str]] = {}
    for names in have.values():
        for name in names:
            field, _, value = name.partition("=")
            if value and value != WILDCARD:
                known.setdefault(field, set()).add(name)
    return {release: {**{n: k for n, k in names.items() if not n.endswith("=" + WILDCARD)},
                      **{v: "value" for n in names if n.endswith("=" + WILDCARD) for v in known.get(n[:-2], ())}}
            for release, names in have.items()}


def scripts(repo: str, commit: str) -> dict[str, str]:
    """{"pretrain_X.py": "script"}: the training entry points at the top of the Megatron-LM tree at COMMIT (Mamba
    hybrids train through pretrain_mamba.py before core_v0.18.0, pretrain_hybrid.py from it)."""
    import subprocess

    listed = subprocess.run(["git", "-C", repo, "ls-tree", "--name-only", commit], check=True, capture_output=True,
                            text=True).stdout.split()
    return {name: "script" for name in listed if name.startswith("pretrain_") and name.endswith(".py")}
