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


def test_modelzoo_explain_example_runs_as_written(monkeypatch, capsys):
    """README's Megatron-MoE-ModelZoo example, pasted as rendered (a code span's line breaks are spaces), runs: it had
    left the layout `Et|(tt|)*30mL` unquoted inside --mlm-args, which the shell splits at | and ( ), and exited 2. Its
    flags are the best practice's (tests/modelzoo_launch.py, from run_deepseek_v3_h100.sh)."""
    import shlex

    from modelzoo_launch import H100_ENV, H100_FLAGS, MODELZOO
    from moetune.cli.main import main

    text = (REPO / "README.md").read_text()
    span = text[text.index("`TP=2 PP=8 EP=64"):]
    words = shlex.split(span[1:span.index("`", 1)].replace("\n", " "))
    env = dict(w.split("=", 1) for w in words[:words.index("moetune")])
    args = words[words.index("moetune") + 1:]
    assert env == H100_ENV
    assert shlex.split(args[args.index("--mlm-args") + 1]) == shlex.split(H100_FLAGS)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args[args.index("model_configs/benchmarking/DeepSeek-V3.yaml")] = str(MODELZOO)  # the fixture is that file
    assert main(args) == 0
    assert "pipeline layout Et|(tt|)*30mL" in capsys.readouterr().out
