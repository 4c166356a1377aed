"""Malformed, truncated, empty or CPU-only input: one clear line, non-zero exit, never a traceback."""

import gzip
import json

import pytest

from moetune.cli.main import main
from moetune.errors import MoetuneError
from moetune.profile import diagnose, read_trace
from moetune.profile.synthetic import compute_bound, write_trace


def cli(args, capsys):
    code = main(["diagnose", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def _cpu_only(path):
    evs = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 5.0, "args": {}},
           {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0, "dur": 9.0}]
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": evs}))


def _truncated_gz(path, tmp_path):
    good = write_trace(compute_bound(), tmp_path / "good.json.gz").read_bytes()
    path.write_bytes(good[: len(good) // 2])


def _truncated_json(path, tmp_path):
    good = write_trace(compute_bound(), tmp_path / "good.json").read_text()
    path.write_text(good[: len(good) // 2])


CASES = {
    "empty.json": (lambda p, t: p.write_bytes(b""), "is empty"),
    "blank.json.gz": (lambda p, t: p.write_bytes(gzip.compress(b"  \n")), "is empty"),
    "cut.json.gz": (_truncated_gz, "truncated"),
    "cut.json": (_truncated_json, "truncated"),
    "garbage.json": (lambda p, t: p.write_text("this is not json {"), "not valid JSON"),
    "other.json": (lambda p, t: p.write_text('{"hello": [1, 2, 3]}'), "no traceEvents"),
    "cpu_only.json": (lambda p, t: _cpu_only(p), "CPU-only"),
    "numbers.json": (lambda p, t: p.write_text('{"traceEvents": [1, 2, 3]}'), "no traceEvents"),
    "bad_ts.json": (lambda p, t: p.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": "x"}]}'),
                    "malformed event"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_trace_is_one_line_and_exit_2(name, tmp_path, capsys):
    make, message = CASES[name]
    path = tmp_path / name
    make(path, tmp_path)
    with pytest.raises(MoetuneError, match=message):
        read_trace(path)
    code, out, err = cli([path], capsys)
    assert code == 2 and out == ""
    assert err.startswith("error: trace ") and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_missing_inputs(tmp_path, capsys):
    code, _, err = cli([tmp_path / "nope.json"], capsys)
    assert code == 2 and "no such file" in err
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    code, _, err = cli([empty_dir], capsys)
    assert code == 2 and "holds no .json" in err
    code, _, err = cli([], capsys)
    assert code == 2 and "at least one trace" in err


def test_two_traces_of_the_same_rank(tmp_path):
    a = write_trace(compute_bound(rank=0), tmp_path / "a.json.gz")
    b = write_trace(compute_bound(rank=0), tmp_path / "b.json.gz")
    with pytest.raises(MoetuneError, match="both record rank 0"):
        diagnose([a, b])
