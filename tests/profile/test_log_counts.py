"""An iteration line whose count does not read (`5x`, `-5`, more digits than a count holds) or passes the run's total
had been dropped or used without a word: it is passed over with a note, as a line out of sequence is. Megatron-LM
writes the count as `iteration {:8d}/{:8d}` of iteration and --train-iters (megatron/training/training.py:2628 @
core_v0.18.2), from 1 up to the total (the loop at :3401, `while iteration < args.train_iters`)."""

import pytest

from moetune.errors import MoetuneError
from moetune.profile import parse_log, read_log

MLM = "megatron_lm_qwen3_30b_a3b.log"  # iterations 1..8 of 10 after the start-up lines and argument dump
FIFTH, SEVENTH = "iteration        5/      10", "iteration        7/      10"


def _line_of(text: str, part: str) -> int:
    return text.splitlines().index(next(x for x in text.splitlines() if part in x)) + 1


@pytest.mark.parametrize("count, said", [
    ("iteration       5x/      10", "5x/ 10"),  # a character written into the digits
    ("iteration       -5/      10", "-5/ 10"),  # no count Megatron writes
    ("iteration 1234567890123/      10", "1234567890123/ 10"),  # more digits than a count holds
    ("iteration    10000/      10", "10000/ 10"),  # past the run's total
    ("iteration        5/     1x0", "5/ 1x0")])  # the total garbled
def test_a_count_that_does_not_read_is_passed_over_with_a_note(fixtures_dir, count, said):
    text = (fixtures_dir / MLM).read_text()
    garbled = text.replace(FIFTH, count)
    log, plain = parse_log(garbled, "x.log"), read_log(fixtures_dir / MLM)
    assert [it.iteration for it in log.iterations] == [1, 2, 3, 4, 6, 7, 8] and log.args == plain.args
    assert log.notes == [f"--log x.log: 1 iteration line(s) whose count does not read passed over (first at line "
                         f"{_line_of(text, FIFTH)}: 'iteration {said}', where Megatron writes a number from 1 up "
                         "to the run's total, --train-iters; the line garbled, another process's output written "
                         "into it?)"]


def test_two_such_lines_are_counted_in_one_note(fixtures_dir):
    """Two lines (the 5th and the 7th), one note: their count and the first one's line."""
    text = (fixtures_dir / MLM).read_text()
    log = parse_log(text.replace(FIFTH, "iteration       5x/      10").replace(SEVENTH, "iteration 70000/ 10"), "x.log")
    assert [it.iteration for it in log.iterations] == [1, 2, 3, 4, 6, 8]
    assert len(log.notes) == 1 and log.notes[0].startswith(
        f"--log x.log: 2 iteration line(s) whose count does not read passed over (first at line "
        f"{_line_of(text, FIFTH)}: 'iteration 5x/ 10'")


def test_a_count_past_the_total_is_not_read_in_a_log_of_iteration_lines_alone(fixtures_dir):
    """Without start-up lines (the last rank's stdout alone) the last line's 8 logged as 10000 of 10 had been read as
    iteration 10000, without a word."""
    lines = [x for x in (fixtures_dir / MLM).read_text().splitlines() if "elapsed time per iteration" in x]
    lines[7] = lines[7].replace("iteration        8/      10", "iteration    10000/      10")
    log = parse_log("\n".join(lines), "x.log")
    assert [it.iteration for it in log.iterations] == list(range(1, 8))
    assert len(log.notes) == 1 and "(first at line 8: 'iteration 10000/ 10'" in log.notes[0]


def test_a_log_whose_counts_all_fail_to_read_is_one_error_line(fixtures_dir, tmp_path):
    lines = [x for x in (fixtures_dir / MLM).read_text().splitlines() if "elapsed time per iteration" in x]
    path = tmp_path / "x.log"
    path.write_text("\n".join(x.replace("/      10 |", "/       x |") for x in lines))
    with pytest.raises(MoetuneError, match=r"none of its 8 iteration line\(s\) has a count that reads \(first at line "
                                           r"1: 'iteration 1/ x'.*; pass the log as Megatron wrote it$"):
        read_log(path)
