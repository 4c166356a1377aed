"""A saved plan or estimate cut short (a copy interrupted, `--json > plan.json` killed mid-write) reads the same to
every command that takes it: one line naming the file, where the parse stopped, that the file ends there, and the
command that saves it again; exit 2 (files.json_error). They had said it three ways: 'not valid JSON (Expecting ','
delimiter: line 4 column 1 (char 40))', 'JSON syntax error at line 4: ...' and, for a trace, 'ends early
(truncated?)'."""

import pytest
from cli_run import run

# a plan's JSON (cli/plan_output.py plan_json writes candidates_evaluated first) cut after its third line
PLAN = '{\n  "candidates_evaluated": 12,\n  "results": [\n'
# Python's json module: the value the "[" opens is expected at line 4, column 1, where the text ends
WHERE = "not valid JSON (line 4, column 1: Expecting value; the file ends there: truncated?)"


def _cut(tmp_path, text: str = PLAN, name: str = "plan.json"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("args, named", [
    (["explain", "--plan", "{p}"], "--plan {p}"),
    (["explain", "{p}"], "{p}"),
    (["emit", "{p}"], "{p}"),
    (["report", "{p}", "--out", "{d}/r.html"], "{p}"),
    (["check", "{p}"], "{p}"),
    (["sweep", "write", "{p}", "--out", "{d}/sweep"], "{p}"),
    (["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "8", "--config", "{p}"], "{p}"),
    (["diagnose", "{d}/trace.json", "--plan", "{p}"], "--plan {p}"),
])
def test_every_reader_of_a_saved_plan_says_one_line(args, named, tmp_path, capsys):
    path = _cut(tmp_path)
    (tmp_path / "trace.json").write_text('{"traceEvents": []}')  # diagnose reads --plan before the traces

    def fill(word: str) -> str:
        return word.format(p=path, d=tmp_path)
    code, out, err = run([fill(a) for a in args], capsys)
    expected = f"error: {fill(named)}: {WHERE}; save it again with `moetune plan ... --json > {path}`"
    assert code == 2 and err.strip() == expected, err


def test_a_cut_estimate_names_estimate_and_a_baseline_names_it_whatever_was_cut(tmp_path, capsys):
    """An estimate's JSON starts with its model's name (planner/estimate.py Estimate.to_json): the hint names the
    command that wrote it; --baseline takes an estimate alone, so a cut plan given there is told to be an estimate."""
    estimate = _cut(tmp_path, '{\n  "model": "qwen3-30b-a3b",\n  "gpu": ', "estimate.json")
    code, _, err = run(["report", str(estimate), "--out", str(tmp_path / "r.html")], capsys)
    assert code == 2 and err.strip().endswith(f"; save it again with `moetune estimate ... --json > {estimate}`")
    assert "(line 3, column 10: Expecting value; the file ends there: truncated?)" in err
    plan = _cut(tmp_path)
    code, _, err = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "8", "--gbs", "64", "--baseline",
                        str(plan)], capsys)
    assert code == 2 and err.strip() == (f"error: --baseline {plan}: {WHERE}; save it again with `moetune estimate "
                                         f"... --json > {plan}`")


def test_json_that_is_wrong_inside_is_not_called_cut(tmp_path, capsys):
    """A comma too many mid-file is no truncation: the line says where, not that the file ends there."""
    path = _cut(tmp_path, '{\n  "candidates_evaluated": 12,,\n  "results": []\n}\n')
    code, _, err = run(["explain", "--plan", str(path)], capsys)
    assert code == 2 and "(line 2, column 30: Expecting property name enclosed in double quotes);" in err
    assert "truncated" not in err and len(err.strip().splitlines()) == 1


def test_a_cut_trace_reads_the_same_way(tmp_path, capsys):
    """diagnose's trace reader words a trace cut short as the saved-result readers do; its fix is the profiler's."""
    path = _cut(tmp_path, '{"traceEvents": [{"name": "k", "ph": "X", "ts": 1, "dur": 2},', "trace.json")
    code, _, err = run(["diagnose", str(path)], capsys)
    assert code == 2 and err.startswith(f"error: trace {path}: not valid JSON (")
    assert err.strip().endswith("; the file ends there: truncated?); export it again from torch.profiler"), err


# A plan whose search found nothing that fits (`results: []`; planner/search.py), as `plan --json` writes it
EMPTY = '{"candidates_evaluated": 12, "results": []}'


@pytest.mark.parametrize("args, named", [
    (["explain", "{p}"], "{p}"),
    (["emit", "{p}"], "{p}"),
    (["report", "{p}", "--out", "{d}/r.html"], "{p}"),
    (["check", "{p}"], "{p}"),
    (["sweep", "write", "{p}", "--out", "{d}/sweep"], "{p}"),
    (["diagnose", "{d}/trace.json", "--plan", "{p}"], "--plan {p}"),
])
def test_every_reader_of_an_empty_plan_names_it(args, named, tmp_path, capsys):
    """diagnose had said 'nothing to explain or emit' without naming --plan's file."""
    path = _cut(tmp_path, EMPTY)
    (tmp_path / "trace.json").write_text('{"traceEvents": []}')
    code, _, err = run([a.format(p=path, d=tmp_path) for a in args], capsys)
    expected = f"error: {named.format(p=path)}: the plan has no results (nothing fit): no configuration in it to read"
    assert code == 2 and err.strip() == expected, err


@pytest.mark.parametrize("field, value, said", [
    ("tp", "2", "layout.tp '2'"),  # it had quoted Python's "'<' not supported between 'str' and 'int'"
    ("ep", True, "layout.ep True"),
    ("gpus", 16.0, "gpus 16.0"),
])
def test_a_retyped_layout_size_is_named(field, value, said, tmp_path, capsys):
    import json

    code, out, _ = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "8", "--json"], capsys)
    saved = json.loads(out)
    (saved if field == "gpus" else saved["layout"])[field] = value
    path = tmp_path / "estimate.json"
    path.write_text(json.dumps(saved))
    code, _, err = run(["explain", str(path)], capsys)
    assert code == 2 and err.strip() == (f"error: {path} holds {said}, not a whole number: pass unmodified "
                                         "`moetune plan/estimate --json` output"), err
