"""Layering flows one way: specs -> layout -> walls -> planner/rules -> interfaces (cli, emit). Each package may
import only the packages listed for it (imports inside functions count too)."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "moetune"
ALLOWED = {
    "specs": set(),
    "layout": {"specs"},
    "walls": {"specs", "layout"},
    "oracle": {"specs", "layout", "walls"},
    "profile": {"specs", "layout", "walls"},
    # configio reads the rule table's recipe data; rules read normalized configs (siblings); the normalizer counts a
    # layout string's stages with layout's grammar parser, as Megatron-LM derives VPP from it
    "configio": {"specs", "layout", "rules"},
    "rules": {"specs", "layout", "walls", "configio"},
    "planner": {"specs", "layout", "walls", "rules", "profile", "configio"},
    "emit": {"specs", "layout", "walls", "rules", "configio", "planner"},
    # a sweep reads its candidates' logs (profile) against their saved predictions (planner), for a release (configio)
    "sweep": {"specs", "layout", "walls", "profile", "planner", "configio"},
    # a report lays out what the commands' JSON holds (planner/result_text.py words a saved result)
    "report": {"planner"},
}


def _imports(package: str) -> set[str]:
    found = set()
    for path in (SRC / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found |= {n.split(".")[1] for n in names if n.startswith("moetune.") and n.count(".") >= 1}
    return found - {package}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_lower_layers(package):
    sub_packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    upward = (_imports(package) & sub_packages) - ALLOWED[package]
    assert not upward, f"moetune.{package} imports {sorted(upward)}"
