"""A log that holds a job restarted from a checkpoint: told from one run by Megatron's start-up lines, not only by an
iteration number that goes back, and checkpoint saves within a run do not split it."""

import re

import pytest

from moetune.profile import parse_log, read_log

MLM = "megatron_lm_qwen3_30b_a3b.log"
BRIDGE = "megatron_bridge_oom.log"
# Checkpoint lines as Megatron-LM megatron/training/checkpointing.py @ core_v0.18.2 prints them (save_checkpoint,
# load_checkpoint): saves recur within a run; a relaunch loads the last one.
SAVE = ("[2025-05-18 10:07:00.000000] saving checkpoint at iteration {it:7d} to /ckpt in torch_dist format\n"
        "  [2025-05-18 10:07:30.000000] successfully saved checkpoint from iteration {it:7d} to /ckpt "
        "[ t 1/1, p 1/1 ]\n")
LOAD = (" loading distributed checkpoint from /ckpt at iteration {it}\n"
        "  successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration {it}\n")


def _resumed(text: str, after: int) -> str:
    """The fixture's run as a relaunch that resumes after iteration `after`: iteration, consumed-samples and
    memory-report counts moved on (as Megatron logs them on a resumed run), the checkpoint load before 'training',
    and another seq_length and step time so its figures are told from the first run's."""
    text = re.sub(r"iteration +(\d+)/ +10 \| consumed samples: +(\d+)",
                  lambda m: f"iteration {int(m[1]) + after:8d}/      20 | consumed samples: "
                            f"{int(m[2]) + after * 1024:12d}", text)
    text = re.sub(r"\(after (\d+) iterations\)", lambda m: f"(after {int(m[1]) + after} iterations)", text)
    text = text.replace("training ...\n", LOAD.format(it=after) + "training ...\n")
    return text.replace("seq_length ...................................... 4096",
                        "seq_length ...................................... 2048").replace(
        "elapsed time per iteration (ms): 41", "elapsed time per iteration (ms): 31")


@pytest.mark.parametrize("after", [8, 7, 3])  # resumes past, at, and below the last iteration the first run logged
def test_a_relaunch_from_a_checkpoint_is_a_second_run(fixtures_dir, tmp_path, after):
    """A relaunch that resumed at iteration 9 had been read as one run of 16 iterations with the first run's
    arguments, and one that resumed at 8 had its first iteration dropped as 'logged twice': only an iteration
    number going back told a second run. Now Megatron's start-up lines do, whatever iteration it resumes at."""
    first = (fixtures_dir / MLM).read_text() + SAVE.format(it=8)
    second = _resumed((fixtures_dir / MLM).read_text(), after)
    path = tmp_path / "restarted.log"
    path.write_text(first + second)
    log, alone = read_log(path), parse_log(second)
    assert [it.iteration for it in log.iterations] == [it.iteration for it in alone.iterations] == \
        list(range(after + 1, after + 9))
    assert log.iteration_seconds == alone.iteration_seconds < read_log(fixtures_dir / MLM).iteration_seconds
    assert log.args["seq_length"] == "2048" and len(log.memory) == len(alone.memory) == 2
    assert log.memory[0].after_iteration == after + 1
    start = len(first.splitlines()) + second.splitlines().index(next(x for x in second.splitlines()
                                                                     if x.startswith("using world size"))) + 1
    assert log.notes == [f"--log {path} holds 2 runs (Megatron started again 1 time(s): its start-up lines printed "
                         f"anew, or iteration numbers going back): the figures are the last run's, from line {start}, "
                         f"iteration {after + 1} on"]


def test_checkpoint_saves_within_a_run_do_not_split_it(fixtures_dir):
    """Periodic checkpoint saves (and their 'successfully saved' lines) are no restart: one run, no note."""
    text = (fixtures_dir / MLM).read_text()
    saving = re.sub(r"(iteration +(\d+)/ +10 \|.*\n)", lambda m: m[1] + (SAVE.format(it=int(m[2]))
                                                                          if int(m[2]) % 2 == 0 else ""), text)
    assert saving.count("saving checkpoint at iteration") == 4
    log, plain = parse_log(saving), parse_log(text)
    assert [it.iteration for it in log.iterations] == list(range(1, 9)) and not log.notes
    assert log.iteration_seconds == plain.iteration_seconds and log.args == plain.args


def test_a_bridge_relaunch_after_an_oom_leaves_the_oom_with_the_first_run(fixtures_dir):
    """A Megatron Bridge run that ran out of memory, relaunched (with a smaller footprint) from iteration 0: its
    iteration 1 had been dropped as 'logged twice' and the first launch's OOM and 79.1 GB peak had stood as the
    relaunch's. Bridge prints no argument dump; its start-up lines (training/initialize.py, setup.py, train.py)
    tell the relaunch."""
    relaunch = (
        "> initializing torch distributed ...\n"
        "time to initialize megatron (seconds): 95.123\n"
        "Starting training loop at iteration 0\n"
        " [2025-06-01 13:00:01] iteration        1/     100 | consumed samples:          256 | elapsed time per "
        "iteration (ms): 16011.7 | throughput per GPU (TFLOP/s/GPU): 171.5 | global batch size:   256 |\n"
        "[Rank 0] (after 1 iterations) memory (GB) | mem-allocated-gigabytes: 60.1 | mem-reserved-gigabytes: 68.0 | "
        "mem-max-allocated-gigabytes: 66.2 | mem-max-reserved-gigabytes: 70.2 | mem-alloc-retires: 0\n"
        " [2025-06-01 13:00:15] iteration        2/     100 | consumed samples:          512 | elapsed time per "
        "iteration (ms): 14002.5 | throughput per GPU (TFLOP/s/GPU): 196.1 | global batch size:   256 |\n"
    )
    log = parse_log((fixtures_dir / BRIDGE).read_text() + relaunch)
    assert [it.iteration for it in log.iterations] == [1, 2] and log.iteration_seconds == pytest.approx(14.0025)
    assert not log.oom_lines and log.peak_reserved_bytes == pytest.approx(70.2e9) and log.alloc_retries == 0
    assert len(log.notes) == 1 and "2 runs" in log.notes[0] and "iteration 1 on" in log.notes[0]


def test_iteration_lines_alone_split_where_the_number_goes_back(fixtures_dir):
    """With no start-up lines (a log cut to its iteration lines), a lower iteration number still starts a run, on the
    line after the previous run's last iteration line."""
    lines = [x for x in (fixtures_dir / MLM).read_text().splitlines() if "elapsed time per iteration" in x]
    log = parse_log("\n".join(lines[:5] + lines[2:]))
    assert [it.iteration for it in log.iterations] == list(range(3, 9))
    assert len(log.notes) == 1 and "from line 6, iteration 3 on" in log.notes[0]


def test_a_launch_that_failed_at_start_up_is_passed_over(fixtures_dir):
    """Between two runs, a launch that ran out of memory before its first iteration: the last run starts at the
    launch that logged iterations (its start-up lines printed again), so the failed launch's OOM is not its."""
    text = (fixtures_dir / MLM).read_text()
    header = text[text.index("using world size"):text.index("[after dataloaders")]
    failed = header + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB.\n"
    first, second = text + failed, _resumed(text, 8)
    log = parse_log(first + second)
    assert [it.iteration for it in log.iterations] == list(range(9, 17)) and not log.oom_lines
    start = len(first.splitlines()) + [x.startswith("using world size") for x in second.splitlines()].index(True) + 1
    assert len(log.notes) == 1 and "2 runs (Megatron started again 1 time(s)" in log.notes[0]
    assert f"from line {start}," in log.notes[0]


def test_a_last_launch_that_failed_at_start_up_is_said_and_keeps_its_oom(fixtures_dir):
    """A log that ends with a relaunch which ran out of memory before its first iteration: its OOM had been counted
    against the run before it (whose figures the log gives); now that run's figures stand without it, and a note says
    the last launch failed, with its OOM line."""
    text = (fixtures_dir / MLM).read_text()
    header = text[text.index("using world size"):text.index("[after dataloaders")]
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB."
    log, plain = parse_log(text + header + oom + "\n"), parse_log(text)
    assert [it.iteration for it in log.iterations] == list(range(1, 9)) and not log.oom_lines
    assert log.iteration_seconds == plain.iteration_seconds and log.args == plain.args
    start = len(text.splitlines()) + 1
    assert log.notes == [f"--log <log>: the last launch, from line {start}, logged no iteration and ran out of memory "
                         f"({oom}): the figures are the run before it"]


def test_a_first_launch_that_failed_at_start_up_is_passed_over(fixtures_dir):
    """A log that opens with a launch which ran out of memory before its first iteration (micro-batch 2), relaunched
    at micro-batch 1: the failed launch's OOM and arguments had stood as the run's (diagnose named memory the wall of a
    run that trained at 63.5 GiB); now the run starts at the relaunch, and a note says what was passed over."""
    text = (fixtures_dir / MLM).read_text()
    header = text[text.index("using world size"):text.index("[after dataloaders")]
    mbs = "micro_batch_size ................................ "
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB."
    failed = header.replace(mbs + "1", mbs + "2") + oom + "\n"
    log, alone = parse_log(failed + text), parse_log(text[text.index("using world size"):])
    assert [it.iteration for it in log.iterations] == list(range(1, 9)) and not log.oom_lines
    assert log.args == alone.args and log.args["micro_batch_size"] == "1"
    start = len(failed.splitlines()) + [x.startswith("using world size") for x in text.splitlines()].index(True) + 1
    assert log.notes == [f"--log <log>: the launch(es) before line {start} logged no iteration and ran out of memory "
                         f"({oom}): the figures are the launch from line {start}"]
