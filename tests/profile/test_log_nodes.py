"""A relaunched job's node logs joined as docs/diagnose.md asks (rank 0's node's log, then the last node's): rank 0's
part holds both launches' start-up lines, the last node's both launches' iteration lines (Megatron-LM prints them from
rank 0 and the last rank: training.py print_rank_0 / print_rank_last @ core_v0.18.2). Built from the real-format
fixture's own lines, as tests/profile/test_log_restart.py builds a relaunch; the relaunch's time stamps moved two hours
on, as a relaunch's are."""

import re
from datetime import datetime, timedelta

import pytest
from tests.profile.test_log_restart import MLM, _resumed

from moetune.profile import diagnose, parse_log

STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?")  # the fixture's datetime lines and iteration lines
ITERATION = "elapsed time per iteration"


def _later(text: str, hours: int) -> str:
    """text with every time stamp `hours` on, written as it was (with or without microseconds)."""
    def on(m: re.Match) -> str:
        moved = datetime.fromisoformat(m[0]) + timedelta(hours=hours)
        return moved.isoformat(sep=" ", timespec="microseconds" if "." in m[0] else "seconds")
    return STAMP.sub(on, text)


def _by_node(text: str) -> tuple[str, str]:
    """A launch's whole stdout as rank 0's node's lines and the last node's (its iteration lines)."""
    lines = text.splitlines(keepends=True)
    return "".join(x for x in lines if ITERATION not in x), "".join(x for x in lines if ITERATION in x)


def _launches(fixtures_dir, after: int) -> tuple[str, str]:
    """The fixture's run, and its relaunch resuming after iteration `after` (seq_length 2048, 31 s steps), two
    hours later."""
    text = (fixtures_dir / MLM).read_text()
    return text, _later(_resumed(text, after), 2)


def _unstamped(fixtures_dir, after: int) -> tuple[str, str]:
    """_launches with the iteration lines' time stamps taken out."""
    return tuple(re.sub(r" \[[^]]*\] iteration", " iteration", x) for x in _launches(fixtures_dir, after))


def _joined(first: str, second: str, *failed: str) -> tuple[str, int]:
    """Rank 0's node's log of both launches (and any that failed after them) followed by the last node's; and the
    line (from 1) of the start-up line `second` begins with in rank 0's part (its first, the world size)."""
    (r0_a, last_a), (r0_b, last_b) = _by_node(first), _by_node(second)
    begins = [x.startswith("using world size") for x in r0_b.splitlines()].index(True)
    return r0_a + r0_b + "".join(failed) + last_a + last_b, len(r0_a.splitlines()) + begins + 1


@pytest.mark.parametrize("after", [0, 3, 8])  # from scratch, resumed below the last iteration logged, resumed past it
def test_a_relaunch_in_joined_node_logs_is_its_own_run(fixtures_dir, after):
    """Both launches' iteration lines had been read as one launch's: from scratch the relaunch's 8 lines were passed
    over as 'out of sequence' (the first run's 41.25 s read, with the relaunch's seq_length), resumed at 9 the two
    runs' 16 iterations were one run, at 4 the iterations 4..8 passed over and 9..11 kept. Now the relaunch is its own
    run, read as the same two launches in one whole stdout (test_log_restart.py) read."""
    first, second = _launches(fixtures_dir, after)
    text, start = _joined(first, second)
    log, whole, alone = parse_log(text, "job.log"), parse_log(first + second), parse_log(second)
    assert [it.iteration for it in log.iterations] == [it.iteration for it in whole.iterations] == \
        list(range(after + 1, after + 9))
    assert log.iteration_seconds == whole.iteration_seconds == alone.iteration_seconds == pytest.approx(31.2503)
    assert log.args == whole.args and log.args["seq_length"] == "2048"
    assert [m.after_iteration for m in log.memory] == [after + 1, after + 2]
    assert log.tokens_per_second_per_gpu == whole.tokens_per_second_per_gpu
    rank0 = len(_by_node(first)[0].splitlines()) + len(_by_node(second)[0].splitlines())
    assert log.notes == [f"--log job.log is rank 0's node's log (to line {rank0}) followed by another node's (from "
                         f"line {rank0 + 1}), whose iteration lines are paired with rank 0's launches by their time "
                         "stamps, and holds 2 runs (Megatron started again 1 time(s)): the figures are the last run's, "
                         f"its start-up from line {start} and its iteration lines from line {rank0 + 9}, iteration "
                         f"{after + 1} on"]


@pytest.mark.parametrize("after", [0, 3])
def test_without_time_stamps_the_count_going_back_pairs_them(fixtures_dir, after):
    """Iteration lines without their time stamps: the count going back splits the last node's part, and its runs pair
    with rank 0's launches from the last. (A relaunch that goes on from the last number logged shows in the stamps
    alone.)"""
    first, second = _unstamped(fixtures_dir, after)
    log = parse_log(_joined(first, second)[0])
    assert [it.iteration for it in log.iterations] == list(range(after + 1, after + 9))
    assert log.args["seq_length"] == "2048" and log.iteration_seconds == pytest.approx(31.2503)
    (note,) = log.notes
    assert "by their count going back, from the last launch on, and holds 2 runs" in note


def test_without_time_stamps_launches_and_runs_that_do_not_match_are_said(fixtures_dir):
    """Three launches in rank 0's part (the last failed at start-up) and two runs of iteration lines, no stamps: the
    pairing from the last cannot tell which launch logged which, and the note says so."""
    first, second = _unstamped(fixtures_dir, 0)
    failed = first[first.index("using world size"):first.index("training ...")]
    (note, *_) = parse_log(_joined(first, second, failed)[0]).notes
    assert "(3 launches, 2 runs of iteration lines: which launch logged which is not told)" in note


def test_rank0s_log_of_the_relaunch_alone(fixtures_dir):
    """Rank 0's log of the relaunch alone (its first launch's written over) before the last node's of both: the
    first run's iteration lines, stamped before the relaunch's start-up, had been read as its own (the relaunch's 8
    lines passed over as out of sequence)."""
    first, second = _launches(fixtures_dir, 0)
    log = parse_log(_by_node(second)[0] + _by_node(first)[1] + _by_node(second)[1])
    assert [it.iteration for it in log.iterations] == list(range(1, 9))
    assert log.iteration_seconds == pytest.approx(31.2503) and log.args["seq_length"] == "2048"
    assert len(log.notes) == 1 and "by their time stamps, and holds 2 runs" in log.notes[0]


def test_a_last_launch_that_failed_at_start_up_is_said_and_its_oom_left_out(fixtures_dir):
    """A third launch ran out of memory in its first step (after its dataloaders were built, four hours on): its time
    stamp pairs none of the iteration lines with it, so the figures are the relaunch's, without its OOM; the GPU's
    memory its OOM states is read all the same (a launch passed over ran on the job's GPUs: log_stops.py)."""
    first, second = _launches(fixtures_dir, 0)
    text = first[first.index("using world size"):]
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of "
           "79.11 GiB of which 1.02 GiB is free.")
    failed = _later(text[:text.index("training ...")], 4) + oom + "\n"
    joined, _ = _joined(first, second, failed)
    log = parse_log(joined, "job.log")
    assert [it.iteration for it in log.iterations] == list(range(1, 9)) and not log.oom_lines
    assert log.args["seq_length"] == "2048" and log.iteration_seconds == pytest.approx(31.2503)
    assert log.oom_capacity_bytes == pytest.approx(79.11 * 2**30)
    start = len((_by_node(first)[0] + _by_node(second)[0]).splitlines()) + 1
    assert len(log.notes) == 2 and "holds 2 runs" in log.notes[0]
    assert log.notes[1] == (f"--log job.log: the last launch, from line {start}, logged no iteration and ran out of "
                            f"memory ({oom}): the figures are the run before it")


def test_diagnose_reads_the_relaunch(fixtures_dir, tmp_path):
    """diagnose's step and tokens/s/GPU are the relaunch's (31.25 s, seq_length 2048), where they had been the first
    run's step with the relaunch's sequence length (3,177 tokens/s/GPU, from neither run)."""
    path = tmp_path / "job.log"
    path.write_text(_joined(*_launches(fixtures_dir, 0))[0])
    r = diagnose(log=path)
    assert r.step_seconds == pytest.approx(31.2503)
    # 1024 sequences x 2048 tokens / 31.2503 s / 16 GPUs (the relaunch's argument dump)
    assert r.log["tokens_per_second_per_gpu"] == pytest.approx(1024 * 2048 / 31.2503 / 16)
    assert sum("is rank 0's node's log" in n for n in r.notes) == 1
