"""The seeds' rules as data (data/rules.yaml) and the engine that evaluates them on a config."""

from moetune.rules.derive import EXTERNAL, derive
from moetune.rules.engine import Finding, evaluate
from moetune.rules.table import Rule, Table, load_table

__all__ = ["EXTERNAL", "Finding", "Rule", "Table", "derive", "evaluate", "load_table"]
