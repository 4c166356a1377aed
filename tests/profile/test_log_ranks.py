"""Which rank's lines a log holds: Megatron prints the iteration lines from the last rank and the start-up lines (and
Megatron-LM's argument dump) from rank 0 (megatron/training @ core_v0.18.2: print_rank_last, print_rank_0, is_rank0),
so the last rank's stdout alone lacks the arguments; diagnose says once what that costs."""

import re

import pytest

from moetune.cli.main import main
from moetune.profile import diagnose, parse_log, read_log

MLM = "megatron_lm_qwen3_30b_a3b.log"
BRIDGE = "megatron_bridge_oom.log"
NOTE = "has none of the lines Megatron prints from rank 0"


def _by_rank(fixtures_dir) -> tuple[str, str]:
    """The Megatron-LM fixture as two ranks' stdout: rank 0's (start-up lines, argument dump, its memory reports;
    DP 16, so the last rank prints none) and the last rank's (the iteration lines)."""
    lines = (fixtures_dir / MLM).read_text().splitlines(keepends=True)
    last = [x for x in lines if "elapsed time per iteration" in x]
    return "".join(x for x in lines if x not in last), "".join(last)


def _rank0_notes(r) -> list[str]:
    return [n for n in r.notes if NOTE in n]


def test_the_last_rank_alone_is_flagged_and_diagnose_says_what_it_costs(fixtures_dir, tmp_path):
    path = tmp_path / "last_rank.log"
    path.write_text(_by_rank(fixtures_dir)[1])
    log = read_log(path)
    assert len(log.iterations) == 8 and not log.argument_dump and not log.rank0_lines and not log.memory
    assert log.iteration_seconds == read_log(fixtures_dir / MLM).iteration_seconds and not log.notes
    r = diagnose(log=path)
    (note,) = _rank0_notes(r)
    assert note.startswith(f"--log {path} ") and "argument dump" in note and "iteration numbers go back" in note
    assert "tokens/s/GPU needs seq_length and the GPU count" in note and r.log["tokens_per_second_per_gpu"] is None
    given = diagnose(log=path, config={"model.seq_length": 4096, "cluster.num_gpus": 16})
    (note,) = _rank0_notes(given)  # tokens/s/GPU from the config: that cost is not said
    assert "tokens/s/GPU" not in note and given.log["tokens_per_second_per_gpu"] == pytest.approx(
        read_log(fixtures_dir / MLM).tokens_per_second_per_gpu)


@pytest.mark.parametrize("name", [MLM, BRIDGE])
def test_a_whole_job_stdout_gets_no_such_note(fixtures_dir, name):
    """Both fixtures hold rank 0's start-up lines beside the last rank's iteration lines (Bridge: no argument dump,
    but its start-up lines)."""
    assert parse_log((fixtures_dir / name).read_text()).rank0_lines
    assert not _rank0_notes(diagnose(log=fixtures_dir / name))


def test_rank0s_node_log_then_the_last_nodes_read_as_one_run(fixtures_dir):
    """On several nodes torchrun writes each node's ranks apart: rank 0's node's log followed by the last node's is
    one run with the arguments, memory reports and iterations of the whole job's stdout."""
    first, last = _by_rank(fixtures_dir)
    log, whole = parse_log(first + last), read_log(fixtures_dir / MLM)
    assert log.rank0_lines and not log.notes and log.args == whole.args
    assert [it.iteration for it in log.iterations] == list(range(1, 9)) and len(log.memory) == 2
    assert log.tokens_per_second_per_gpu == whole.tokens_per_second_per_gpu


def test_cli_prints_the_note_once_and_its_help_names_the_whole_stdout(fixtures_dir, tmp_path, capsys):
    path = tmp_path / "last_rank.log"
    path.write_text(_by_rank(fixtures_dir)[1])
    assert main(["diagnose", "--log", str(path)]) == 0
    assert capsys.readouterr().out.count(NOTE) == 1
    assert main(["diagnose", "--help"]) == 0
    assert "whole stdout" in re.sub(r"\s+", " ", capsys.readouterr().out)
