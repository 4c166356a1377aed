"""README's Python API example runs as written (from the repository root, as a reader would paste it)."""

import contextlib
import io
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_python_api_example_runs(monkeypatch):
    text = (REPO / "README.md").read_text()
    code = text[text.index("## Python API"):].split("```python", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(REPO)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    first, second = out.getvalue().split("\n")[:2]
    peak_gib, fits, tokens, wall = first.split()
    assert 0 < float(peak_gib) < 78 and fits == "True" and float(tokens) > 0 and wall in (
        "compute", "communication", "bubble", "host")
    assert float(second) > 0


def test_readme_counts_the_rules_the_table_holds():
    """The rule count README gives `check` is the table's: two rules landing beside each other had left it one short."""
    import re

    from moetune.rules.table import load_table

    (count,) = re.findall(r"against (\d+) rules", (REPO / "README.md").read_text())
    assert int(count) == len(load_table().rules)
