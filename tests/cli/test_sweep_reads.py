"""sweep write with --set reads each candidate's result once (check_cmd.read_inputs_under): its config with the user's
--set and the plan's own, which --set may add to but not change (sweep_cmd._keeps_the_plan), come from one read of
the plan file, where it had been read twice a candidate."""

import pytest
from tests.cli.cli_run import run, saved

from moetune.cli.check_cmd import read_inputs, read_inputs_under
from moetune.cli.sweep_cmd import benchmark_sets
from moetune.configio import load


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    """A real plan: Qwen3-30B-A3B on 16 H100, its two fastest configurations that fit."""
    return saved(tmp_path_factory.mktemp("plan") / "plan.json",
                 ["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--top", "2"])


@pytest.fixture
def file_reads(monkeypatch) -> list:
    """Each input file load.py reads, in order."""
    reads, real = [], load.read_file
    monkeypatch.setattr(load, "read_file", lambda path, *a, **k: reads.append(path) or real(path, *a, **k))
    return reads


def test_a_set_reads_each_candidate_once(plan_file, tmp_path, capsys, file_reads):
    code, _, err = run(["sweep", "write", str(plan_file), "--out", str(tmp_path / "s"), "--top", "2", "--set",
                        "dataset.data_path=/data/x"], capsys)
    assert code == 0, err
    assert len(file_reads) == 2  # one a candidate, where each had been read with and without the --set
    code, _, err = run(["sweep", "write", str(plan_file), "--out", str(tmp_path / "c"), "--top", "2", "--set",
                        "dataset.seq_length=8192"], capsys)
    assert code == 2 and "it changes dataset.seq_length, which the plan set to 4096" in err  # still held to the plan


@pytest.mark.parametrize("rank", [1, 2])
def test_one_read_under_each_set_list_is_two_reads(plan_file, rank, file_reads):
    """The configs read once under each --set list are those of a read under each: the same merge and settling."""
    bench = tuple(f"{k}={v}" for k, v in benchmark_sets(30).items())
    lists = [("dataset.data_path=/data/x", "~logger.log_params_norm", *bench), bench]
    apart = [read_inputs([plan_file], sets, None, None, None, None, rank) for sets in lists]
    reads = len(file_reads)
    together = read_inputs_under([plan_file], lists, None, None, None, None, rank)
    assert together == apart and [list(c) for c in together] == [list(c) for c in apart]  # key order too
    assert len(file_reads) == reads + 1
