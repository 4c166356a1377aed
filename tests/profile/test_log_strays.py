"""One iteration line whose number its neighbours contradict (a typo, or another process's output written over its
digits) is passed over with a note; it had split the log into two runs. A real relaunch, whose count restarts and goes
on from the restart, still splits."""

import re

import pytest

from moetune.profile import parse_log, read_log

MLM = "megatron_lm_qwen3_30b_a3b.log"  # iterations 1..8, log_interval 1 (Megatron-LM training.py training_log lines)
FIFTH = "iteration        5/      10"


@pytest.mark.parametrize("garbled", ["2", "9", "0"])  # below the count (a typo), above it (a digit written over), and
def test_one_out_of_sequence_iteration_is_passed_over(fixtures_dir, garbled):  # a zeroed number
    """Iteration 5 logged as 2 had made the log 'two runs' read from that line (iterations 2, 6, 7, 8), and as 9 had
    kept 6, 7, 8 only: the figures of a third of the run, and a relaunch said where there was none. (75, past the
    run's total of 10, had been a case here: it is now a count that does not read, test_log_counts.py.)"""
    text = (fixtures_dir / MLM).read_text()
    assert text.count(FIFTH) == 1
    log = parse_log(text.replace(FIFTH, f"iteration {garbled:>8}/      10"), "x.log")
    plain = read_log(fixtures_dir / MLM)
    assert [it.iteration for it in log.iterations] == [1, 2, 3, 4, 6, 7, 8]
    assert log.args == plain.args and len(log.memory) == len(plain.memory) == 2
    # the step times are the fixture's iterations 2..8 less the passed-over 5th (41248.0 ms): 41250.3, 41190.8,
    # 41302.1, 41275.6, 41231.9, 41260.4 ms, median the mean of the middle two (41250.3 + 41260.4) / 2
    assert log.iteration_seconds == pytest.approx(41.25535)
    line = text.splitlines().index(next(x for x in text.splitlines() if FIFTH in x)) + 1
    assert log.notes == [f"--log x.log: 1 iteration line(s) out of sequence passed over (first at line {line}: "
                         f"iteration {garbled} between 4 and 6; the number garbled, another process's output written "
                         "into the line?): no relaunch, the lines after it go on with the count"]


def _iteration_lines(fixtures_dir) -> list[str]:
    return [x for x in (fixtures_dir / MLM).read_text().splitlines() if "elapsed time per iteration" in x]


def test_a_relaunch_whose_count_goes_on_from_the_restart_still_splits(fixtures_dir):
    """Iteration lines alone (no start-up lines), 1..8 then 3..8: the line after the 3 goes on from it (4), not from
    8, so it is a relaunch, not a stray."""
    lines = _iteration_lines(fixtures_dir)
    log = parse_log("\n".join(lines + lines[2:]))
    assert [it.iteration for it in log.iterations] == list(range(3, 9))
    assert len(log.notes) == 1 and "holds 2 runs" in log.notes[0] and "from line 9, iteration 3 on" in log.notes[0]


def test_a_relaunch_with_start_up_lines_splits_where_its_numbers_would_look_garbled(fixtures_dir):
    """A relaunch from a checkpoint at iteration 2 with --log-interval 3 logs 3, 6: seen through its start-up lines the
    3 has no neighbour before it in its launch, so it is not read as a stray between the first run's 5 and the 6."""
    text = (fixtures_dir / MLM).read_text()
    header = text[text.index("using world size"):text.index("[after dataloaders")]
    first = [x for x in text.splitlines() if not re.search(r"iteration +[678]/", x)]  # stopped after iteration 5
    lines = _iteration_lines(fixtures_dir)
    second = [re.sub(r"iteration +2/", "iteration        3/", lines[1]),
              re.sub(r"iteration +5/", "iteration        6/", lines[4])]
    log = parse_log("\n".join(first) + "\n" + header + "training ...\n" + "\n".join(second))
    assert [it.iteration for it in log.iterations] == [3, 6]
    assert len(log.notes) == 1 and "holds 2 runs" in log.notes[0]


def test_an_out_of_sequence_last_line_is_no_stray(fixtures_dir):
    """A lower number on the last iteration line has no line after it to contradict it: it may be a relaunch that
    logged one iteration, so it splits as before."""
    lines = _iteration_lines(fixtures_dir)
    log = parse_log("\n".join(lines + [lines[1]]))
    assert [it.iteration for it in log.iterations] == [2]
    assert len(log.notes) == 2 and "holds 2 runs" in log.notes[0] and "times one iteration" in log.notes[1]


def _numbered(fixtures_dir, numbers: list[int]) -> str:
    """The fixture's iteration lines (no start-up lines: the last rank's stdout alone), renumbered, of a run of 100
    iterations (the fixture's total, 10, is below the numbers: Megatron logs none past its total)."""
    lines = _iteration_lines(fixtures_dir)
    return "\n".join(re.sub(r"iteration +\d+/ +\d+", f"iteration {n:>8}/     100", lines[i % len(lines)])
                      for i, n in enumerate(numbers))


def test_a_relaunch_logging_its_first_iteration_is_no_stray(fixtures_dir):
    """--log-interval 10: the run logs 1 (its first iteration), 10 .. 40 and dies; resumed from its checkpoint at 30,
    Megatron-LM logs the relaunch's first iteration, 31, then 40, 50 (training.py training_log: `iteration %
    args.log_interval == 0 or is_first_iteration`, :2597 @ core_v0.18.2). The first run's 40, between 30 and 31, had
    been passed over as a garbled line and the two runs read as one (1 .. 30, 31, 40, 50, no relaunch said)."""
    log = parse_log(_numbered(fixtures_dir, [1, 10, 20, 30, 40, 31, 40, 50]), "x.log")
    assert [it.iteration for it in log.iterations] == [31, 40, 50]
    assert len(log.notes) == 1 and "holds 2 runs" in log.notes[0] and "iteration 31 on" in log.notes[0]


def test_a_garbled_line_at_a_log_interval_of_ten_is_passed_over(fixtures_dir):
    """Two intervals between its neighbours (30 and 50 at --log-interval 10): the 40 logged as 4 is one line garbled."""
    log = parse_log(_numbered(fixtures_dir, [1, 10, 20, 30, 4, 50, 60]), "x.log")
    assert [it.iteration for it in log.iterations] == [1, 10, 20, 30, 50, 60]
    assert len(log.notes) == 1 and "iteration 4 between 30 and 50" in log.notes[0]


# Megatron-LM's stdout for DeepSeek-V3 on 256 B200s, iterations 1..20 of 20 after its start-up lines and argument dump
DSV3 = "megatron_lm_core018_dsv3_b200.log"


def _garbled(text: str, old: str, new: str) -> tuple[str, int]:
    """text with one iteration line's count `old` written as `new`, and that line's number (from 1)."""
    assert text.count(old) == 1
    return text.replace(old, new), text.splitlines().index(next(x for x in text.splitlines() if old in x)) + 1


@pytest.mark.parametrize("old, new, kept, where", [
    ("iteration       20/      20", "iteration        2/      20", list(range(1, 20)), "after 19, its launch's last"),
    ("iteration        1/      20", "iteration        9/      20", list(range(2, 21)), "before 2, its launch's first")])
def test_a_garbled_first_or_last_line_of_a_launch_is_no_relaunch(fixtures_dir, tmp_path, capsys, old, new, kept,
                                                                   where):
    """One launch (its start-up lines once, then iterations 1..20): a last line logged as 2 (or a first as 9) had been
    read as a relaunch, which threw the argument dump away with the 'first run', so diagnose --model exited 2 for want
    of it. Megatron prints its start-up lines at each launch (log_runs.STARTUP) and, within one, logs rising counts
    (training.py training_log, :2597 @ core_v0.18.2): the line that breaks the rise is garbled."""
    from moetune.cli.main import main
    text, line = _garbled((fixtures_dir / DSV3).read_text(), old, new)
    path = tmp_path / "garbled.log"
    path.write_text(text)
    log, plain = read_log(path), read_log(fixtures_dir / DSV3)
    assert [it.iteration for it in log.iterations] == kept
    assert log.args == plain.args and log.args["world_size"] == "256"
    number, tail = new.split()[1].rstrip("/"), "before it hold" if "last" in where else "after it go on with"
    assert log.notes == [f"--log {path}: 1 iteration line(s) out of sequence passed over (first at line {line}: "
                         f"iteration {number} {where}; the number garbled, another process's output written into the "
                         f"line?): no relaunch, the lines {tail} the count"]
    assert main(["diagnose", "--log", str(path), "--model", "deepseek-v3", "--gpu", "b200"]) == 0
    assert "holds 2 runs" not in capsys.readouterr().out


def test_a_garbled_last_line_of_a_short_run_keeps_the_run(fixtures_dir):
    """Qwen3-30B-A3B, iterations 1..8 with the 8 logged as 3: the run had been 'iteration 3' alone, timed once."""
    eighth, garbled = "iteration        8/      10", "iteration        3/      10"
    text, line = _garbled((fixtures_dir / MLM).read_text(), eighth, garbled)
    log = parse_log(text, "x.log")
    assert [it.iteration for it in log.iterations] == list(range(1, 8)) and log.args["seq_length"] == "4096"
    assert len(log.notes) == 1 and f"(first at line {line}: iteration 3 after 7, its launch's last;" in log.notes[0]


def _launch(fixtures_dir, numbers: list[int]) -> str:
    """The Qwen3 fixture's start-up lines (one launch) and its iteration lines renumbered (of 100)."""
    text = (fixtures_dir / MLM).read_text()
    return text[:text.index("[after dataloaders")] + _numbered(fixtures_dir, numbers) + "\n"


def test_of_two_rises_as_long_the_earlier_lines_stand(fixtures_dir):
    """1, 2, 3, 5, 4 in one launch: 1, 2, 3, 5 and 1, 2, 3, 4 rise as far; the later line is taken as garbled."""
    log = parse_log(_launch(fixtures_dir, [1, 2, 3, 5, 4]), "x.log")
    assert [it.iteration for it in log.iterations] == [1, 2, 3, 5]
    assert len(log.notes) == 1 and "iteration 4 after 5, its launch's last" in log.notes[0]


def test_strays_and_lines_logged_twice_in_one_launch(fixtures_dir):
    """Two garbled lines (the 3 as 30, the 6 as 1) and each line logged twice (two ranks' output in one file): the
    rise is 1, 2, 4, 5, 7, 8, each count once; the garbled lines and their twins are passed over."""
    doubled = [n for n in [1, 2, 30, 4, 5, 1, 7, 8] for _ in (0, 1)]
    log = parse_log(_launch(fixtures_dir, doubled), "x.log")
    assert [it.iteration for it in log.iterations] == [1, 2, 4, 5, 7, 8]
    strays, twice = log.notes
    assert strays.startswith("--log x.log: 4 iteration line(s) out of sequence") and "iteration 30 between 2 and 4" in \
        strays and "6 iteration(s) twice in a row" in twice
