"""One candidate's log measured (sweep/measure.py) and the manifest's checks (sweep/manifest.py), without the CLI."""

import json
import os
import re
import shutil
import statistics
from pathlib import Path

import pytest

from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.sweep.manifest import Candidate, Sweep, read_manifest, write_manifest
from moetune.sweep.measure import find_log, measure

# Megatron-LM's stdout for a Qwen3-30B-A3B job, iterations 1-8 of 10 (tests/profile/fixtures: formats cited there)
LOG = Path(__file__).resolve().parents[1] / "profile" / "fixtures" / "megatron_lm_qwen3_30b_a3b.log"
def _planned(global_batch_size=1024, seq_length=4096, world=16, ep=16, mbs=1, tp=1):
    """The job the fixture ran (its argument dump: Qwen3-30B-A3B on 16 GPUs at EP 16, MBS 1), or another."""
    return estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), Layout(world_size=world, ep=ep, tp=tp),
                    Workload(seq_length=seq_length, micro_batch_size=mbs, global_batch_size=global_batch_size),
                    Knobs(), with_time=False)


def _times_after(skip: int) -> list[float]:
    """The fixture's iteration times after SKIP, read here with a plain split of its lines."""
    out = []
    for line in LOG.read_text().splitlines():
        if " iteration " in line and "elapsed time per iteration (ms):" in line:
            number = int(line.split(" iteration ")[1].split("/")[0])
            ms = float(line.split("elapsed time per iteration (ms):")[1].split("|")[0])
            if number > skip:
                out.append(ms / 1000)
    return out


def test_a_megatron_lm_log_is_timed_past_the_warm_up(tmp_path):
    shutil.copy(LOG, tmp_path / "train-7.log")
    found = measure(tmp_path, _planned(), skip=3)
    seconds = _times_after(3)
    assert found.ok and found.timed == len(seconds) == 5
    assert found.step_seconds == pytest.approx(statistics.median(seconds))
    assert found.tokens_per_s_per_gpu == pytest.approx(1024 * 4096 / statistics.median(seconds) / 16)
    assert found.peak_reserved_bytes == pytest.approx(65012.0 * 2**20)  # "max reserved" in MiB, the largest reported
    assert found.tflops_per_gpu is not None and 243 < found.tflops_per_gpu < 245
    assert 0 < found.spread < 0.01  # the fixture's steady iterations lie within a fraction of a percent


def test_the_warm_up_left_out_changes_the_figure(tmp_path):
    shutil.copy(LOG, tmp_path / "train-7.log")
    everything = measure(tmp_path, _planned(), skip=0)
    assert everything.timed == 8 and everything.step_seconds == pytest.approx(statistics.median(_times_after(0)))


def test_the_newest_log_is_the_last_attempt(tmp_path):
    old, new = tmp_path / "slurm-1.out", tmp_path / "train-2.log"
    old.write_text("x")
    new.write_text("y")
    os.utime(old, (1, 1))
    assert find_log(tmp_path) == (new, 2)
    (tmp_path / "notes.txt").write_text("z")  # not a log
    assert find_log(tmp_path) == (new, 2)
    # a copy that gave both the same time, or the older the later one: Slurm's job ids order the attempts
    first, retry = tmp_path / "train-999.log", tmp_path / "train-1000.log"
    first.write_text("a")
    retry.write_text("b")
    os.utime(retry, (1, 1))
    assert find_log(tmp_path)[0] == retry


def test_a_log_of_another_run_is_not_timed(tmp_path):
    """The global batch of its iteration lines, the sequence length and world size of Megatron-LM's argument dump."""
    shutil.copy(LOG, tmp_path / "train-7.log")
    found = measure(tmp_path, _planned(global_batch_size=512), skip=3)
    assert found.status == "other run" and found.tokens_per_s_per_gpu is None
    assert found.detail == "ran global batch 1024 (planned 512)"
    found = measure(tmp_path, _planned(seq_length=8192, world=32), skip=3)
    assert (found.status, found.detail) == ("other run",
                                            "ran sequence length 4096 (planned 8192), GPUs 16 (planned 32)")


def test_a_log_of_another_layout_or_model_is_not_timed(tmp_path):
    """A launch's own MODEL_ARGS (EXTRA_ARGS win over the emitted flags) may run another layout, micro-batch or model
    than the candidate: its argument dump says so, and the log is another run's, not timed or refitted."""
    shutil.copy(LOG, tmp_path / "train-7.log")
    found = measure(tmp_path, _planned(ep=8, mbs=2), skip=3)
    assert found.status == "other run" and found.tokens_per_s_per_gpu is None
    assert found.detail == "ran expert_model_parallel_size 16 (planned 8), micro_batch_size 1 (planned 2)"
    dots = "." * 37
    (tmp_path / "train-7.log").write_text(LOG.read_text().replace(f"num_experts {dots} 128", f"num_experts {dots} 256"))
    assert measure(tmp_path, _planned(), skip=3).detail == "ran num_experts 256 (planned 128)"


def test_what_is_not_a_timing_is_said(tmp_path):
    assert measure(tmp_path / "gone", _planned(), skip=3).status == "no folder"
    assert measure(tmp_path, _planned(), skip=3).status == "no log"
    (tmp_path / "train-1.log").write_bytes(b"\x00\x01 random bytes\n")
    found = measure(tmp_path, _planned(), skip=3)
    assert found.status == "no iteration" and "no Megatron line" in found.detail
    (tmp_path / "train-1.log").write_text("using world size: 16, data-parallel size: 16\n")
    assert "started, no iteration logged yet" in measure(tmp_path, _planned(), skip=3).detail
    text = re.sub(r"elapsed time per iteration \(ms\): [\d.]+", "elapsed time per iteration (ms): nan",
                  LOG.read_text())
    (tmp_path / "train-1.log").write_text(text)
    found = measure(tmp_path, _planned(), skip=3)
    assert found.status == "unreadable log" and "'nan'" in found.detail and not found.detail.startswith("--log")
    # one garbled line among readable ones (two ranks' output interleaved) is passed over, and said
    text = LOG.read_text().replace("elapsed time per iteration (ms): 41302.1", "elapsed time per iteration (ms): nan")
    (tmp_path / "train-1.log").write_text(text)
    found = measure(tmp_path, _planned(), skip=3)
    assert found.status == "measured" and any("passed over" in n for n in found.notes)


def test_a_log_of_another_run_that_ran_out_of_memory_is_another_run(tmp_path):
    """Its OOM says nothing of the planned configuration: no false fit."""
    (tmp_path / "train-1.log").write_text(LOG.read_text() + "RuntimeError: CUDA error: out of memory\n")
    found = measure(tmp_path, _planned(seq_length=8192), skip=3)
    assert found.status == "other run" and found.peak_reserved_bytes is None
    found = measure(tmp_path, _planned(), skip=3)  # the CUDA runtime's own OOM message counts too
    assert found.status == "out of memory" and "CUDA error: out of memory" in found.detail


def test_a_line_averaging_warm_up_iterations_is_not_timed(tmp_path):
    """Megatron's log line averages the iterations since the one before (log_interval): with an interval of 4 the line
    at iteration 4 holds iterations 1-4, the one at 8 holds 5-8; past a skip of 3 only the second is timed."""
    lines = [x for x in LOG.read_text().splitlines() if " iteration " not in x or any(
        f" iteration {n:8d}/" in x for n in (4, 8))]
    (tmp_path / "train-1.log").write_text("\n".join(lines) + "\n")
    found = measure(tmp_path, _planned(), skip=3)
    assert found.ok and found.timed == 1 and found.detail == "iterations 8-8"
    assert measure(tmp_path, _planned(), skip=5).status == "too short"


def test_a_relaunch_in_one_log_is_timed_on_the_last_run_and_said(tmp_path):
    first = LOG.read_text().split("[Rank 0] (after 2 iterations)")[0] + "torch.OutOfMemoryError: CUDA out of memory.\n"
    (tmp_path / "train-1.log").write_text(first + LOG.read_text())
    found = measure(tmp_path, _planned(), skip=3)
    assert found.ok and found.timed == 5 and any("holds 2 runs" in n for n in found.notes)


RESULT = {"time": {"tokens_per_s_per_gpu": 1000.0, "step_seconds": 2.0},
          "memory": {"peak_bytes": 10, "capacity_bytes": 20}, "workload": {"global_batch_size": 8, "seq_length": 4096}}


def test_manifest_round_trip_and_checks(tmp_path):
    sweep = Sweep(plan="/p.json", iters=30, skip=10, release="0.4.2",
                  candidates=[Candidate(rank=1, folder="r01", result=RESULT)])
    write_manifest(sweep, tmp_path)
    assert read_manifest(tmp_path) == sweep
    with pytest.raises(ValueError, match="a plain folder name"):
        Candidate(rank=1, folder="../r01", result=RESULT)
    with pytest.raises(ValueError, match="no candidates"):
        Sweep(plan="p", iters=3, skip=1, release=None, candidates=[])
    with pytest.raises(ValueError, match="skip .-1. must be 0 or more"):
        Sweep(plan="p", iters=3, skip=-1, release=None, candidates=[Candidate(rank=1, folder="r01", result=RESULT)])
    with pytest.raises(ValueError, match="folder r01 holds more than one candidate"):
        Sweep(plan="p", iters=3, skip=1, release=None, candidates=[Candidate(rank=i, folder="r01", result=RESULT)
                                                                   for i in (1, 2)])
    for broken in (5, {**RESULT, "time": {"tokens_per_s_per_gpu": 0, "step_seconds": 2.0}}, {"memory": {}}):
        with pytest.raises(ValueError, match="candidate r01: its result"):
            Candidate(rank=1, folder="r01", result=broken)
    (tmp_path / "sweep.json").write_text(json.dumps({"moetune_sweep": 1, "plan": "p", "iters": 3, "skip": 1,
                                                     "release": "9.9", "candidates": []}))
    with pytest.raises(MoetuneError, match="9.9: not a release"):
        read_manifest(tmp_path)
    (tmp_path / "sweep.json").write_text('{"moetune_sweep": 1, "plan": "p", "iters": 3, "skip": 1}')
    with pytest.raises(MoetuneError, match="no field 'candidates'"):
        read_manifest(tmp_path)


def test_a_run_resumed_from_a_checkpoint_skips_its_own_warm_up(tmp_path):
    """A run resumed at iteration 1000 logs 1001 first: its warm-up is 1001-1003 at a skip of 3, not iterations 1-3
    (it had timed all but one). Its total is past 1008 (Megatron logs no iteration past its --train-iters)."""
    text = LOG.read_text()
    for n in range(8, 0, -1):
        text = text.replace(f" iteration {n:8d}/      10 |", f" iteration {1000 + n:8d}/    2000 |")
    (tmp_path / "train-1.log").write_text(text)
    found = measure(tmp_path, _planned(), skip=3)
    assert found.ok and found.timed == 5 and found.detail == "iterations 1004-1008"


def test_a_run_that_crashed_says_why_it_stopped(tmp_path):
    """A job that died at iteration 5 (an NCCL error) had read only 'too short'; timed before it stopped, its figures
    stand and the crash is a note."""
    lines = LOG.read_text().splitlines()
    cut = next(i for i, x in enumerate(lines) if " iteration        6/" in x)
    crash = "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled system error"
    (tmp_path / "train-1.log").write_text("\n".join(lines[:cut] + [crash]) + "\n")
    found = measure(tmp_path, _planned(), skip=5)
    assert found.status == "failed" and found.detail.endswith(f"it stopped there: {crash}")
    found = measure(tmp_path, _planned(), skip=3)
    assert found.ok and found.timed == 2 and any("stopped after iteration 5" in n for n in found.notes)
    # ingest's "measured fastest ... run it" says so of such a candidate: a full run of it may stop the same way
    from types import SimpleNamespace

    from moetune.sweep.conclusions import _stopped
    assert found.stopped == crash and crash in _stopped(SimpleNamespace(measured=found))
    assert _stopped(SimpleNamespace(measured=measure(tmp_path.parent, _planned(), skip=3))) == ""
