"""Megatron-LM / Megatron Bridge log reading, and diagnosis from a log (alone or with a trace)."""

import re
import statistics

import pytest

from moetune.errors import MoetuneError
from moetune.profile import diagnose, parse_log, read_log
from moetune.profile.synthetic import compute_bound, write_trace

MLM = "megatron_lm_qwen3_30b_a3b.log"
BRIDGE = "megatron_bridge_oom.log"
STEADY_MS = [41250.3, 41190.8, 41302.1, 41248.0, 41275.6, 41231.9, 41260.4]  # iterations 2..8 of MLM


def test_megatron_lm_iterations_and_args(fixtures_dir):
    log = read_log(fixtures_dir / MLM)
    assert [it.iteration for it in log.iterations] == list(range(1, 9))
    assert log.iterations[0].elapsed_ms == 98765.4
    assert log.iteration_seconds == pytest.approx(statistics.median(STEADY_MS) / 1000)
    assert log.tflops_per_gpu == pytest.approx(244.0)
    assert log.iterations[-1].global_batch_size == 1024
    assert log.iterations[-1].fields["lm loss"] == pytest.approx(10.76543)
    assert log.args["seq_length"] == "4096" and log.args["moe_token_dispatcher_type"] == "alltoall"
    assert log.tokens_per_second_per_gpu == pytest.approx(1024 * 4096 / (41250.3 / 1000) / 16)


def test_megatron_lm_memory_report_in_mib(fixtures_dir):
    log = read_log(fixtures_dir / MLM)
    assert len(log.memory) == 2
    first = log.memory[0]
    assert (first.rank, first.after_iteration) == (0, 1)
    assert first.allocated_bytes == pytest.approx(40123.45 * 2**20)
    assert first.max_allocated_bytes == pytest.approx(61234.56 * 2**20)
    assert log.peak_reserved_bytes == pytest.approx(65012.00 * 2**20)
    assert log.alloc_retries == 0 and not log.oom_lines


def test_bridge_memory_report_in_gb_and_oom(fixtures_dir):
    log = read_log(fixtures_dir / BRIDGE)
    assert log.peak_reserved_bytes == pytest.approx(79.1e9)
    assert log.memory[0].allocated_bytes == pytest.approx(71.234e9)
    assert log.alloc_retries == 3
    assert len(log.oom_lines) == 1 and "CUDA out of memory" in log.oom_lines[0]
    assert log.iteration_seconds == pytest.approx(15.2341)  # a single interval is all there is


def test_log_alone_names_the_memory_wall(fixtures_dir):
    r = diagnose(log=fixtures_dir / BRIDGE)
    assert r.dominant_wall == "memory"
    assert r.ranks == 0 and r.step_seconds == pytest.approx(15.2341)
    assert any("out-of-memory" in e for e in r.evidence)
    rules = [rec.rule for rec in r.recommendations]
    assert rules[0] == "mem.selective_recompute" and "mem.optimizer_offload" in rules


def test_healthy_log_alone_cannot_split_the_walls(fixtures_dir):
    r = diagnose(log=fixtures_dir / MLM)
    assert r.dominant_wall == "undetermined" and r.recommendations == []


def test_log_peak_against_trace_capacity(fixtures_dir, tmp_path):
    sc = compute_bound(world_size=16)  # one of the 16 ranks the log's argument dump records
    trace = write_trace(sc, tmp_path / "rank0.json.gz")
    log = tmp_path / "run.log"  # the fixture log timed like the synthetic trace (a log 3x off is another run's)
    step_ms = diagnose([trace]).step_seconds * 1e3
    log.write_text(re.sub(r"elapsed time per iteration \(ms\): [0-9.]+", f"elapsed time per iteration (ms): {step_ms}",
                          (fixtures_dir / MLM).read_text()))
    r = diagnose([trace], log=log)
    assert r.memory["fraction"] == pytest.approx(65012.00 * 2**20 / sc.device_memory_bytes)
    assert r.dominant_wall == "compute"  # 80% of HBM is not the memory wall
    assert r.log["tflops_per_gpu"] == pytest.approx(244.0)


def test_log_without_megatron_lines_is_one_clear_error(tmp_path):
    path = tmp_path / "notes.log"
    path.write_text("hello\nnothing to see\n")
    with pytest.raises(MoetuneError, match="no Megatron iteration lines"):
        read_log(path)
    with pytest.raises(MoetuneError, match="no such file"):
        read_log(tmp_path / "missing.log")


def test_parse_log_ignores_unrelated_lines():
    log = parse_log("INFO something | a: 1\n iteration 5/ 9 | no timing here |\n")
    assert log.iterations == [] and log.memory == []


@pytest.mark.parametrize("elapsed", ["-5.0", "0.0", "1e400"])
def test_an_iteration_time_that_cannot_be_is_one_line(elapsed):
    """A negative, zero or infinite step time had printed a negative step and TFLOP/s."""
    line = (f" [2025-01-01 00:00:00] iteration      100/    1000 | consumed samples: 100 | elapsed time per iteration "
            f"(ms): {elapsed} | throughput per GPU (TFLOP/s/GPU): 300.0 | global batch size:   256 |")
    with pytest.raises(MoetuneError, match="must be a positive, finite number"):
        parse_log(line, "x.log")


def test_a_log_of_two_runs_is_read_as_its_last_run(fixtures_dir, tmp_path, capsys):
    """Two runs appended to one file (iteration numbers 1..8 twice) had been read as one run of 16 iterations, with
    the first run's arguments: the last run's iterations, arguments and memory count, and a note says so."""
    from moetune.cli.main import main
    first = (fixtures_dir / MLM).read_text()
    second = first.replace("seq_length ...................................... 4096",
                           "seq_length ...................................... 2048").replace(
        "elapsed time per iteration (ms): 41", "elapsed time per iteration (ms): 31")
    assert second != first
    path = tmp_path / "appended.log"
    path.write_text(first + second)
    log, last = read_log(path), parse_log(second)
    assert [it.iteration for it in log.iterations] == [it.iteration for it in last.iterations] == list(range(1, 9))
    assert log.iteration_seconds == last.iteration_seconds < read_log(fixtures_dir / MLM).iteration_seconds
    assert log.args["seq_length"] == "2048" and len(log.memory) == len(last.memory)
    relaunch = len(first.splitlines()) + 6  # the second run's first start-up line ("using world size"), past its header
    assert second.splitlines()[5].startswith("using world size")
    assert len(log.notes) == 1 and "2 runs" in log.notes[0] and f"line {relaunch}," in log.notes[0]
    assert not last.notes and not read_log(fixtures_dir / MLM).notes
    code = main(["diagnose", "--log", str(path), "--json"])
    out = capsys.readouterr().out
    assert code == 0 and "2 runs" in out


def test_an_iteration_logged_twice_in_a_row_counts_once(fixtures_dir):
    """Two ranks' output in one file logs each iteration twice: counted once, and said."""
    lines = (fixtures_dir / MLM).read_text().splitlines()
    doubled = [x for line in lines for x in ([line, line] if " iteration " in line else [line])]
    log, plain = parse_log("\n".join(doubled)), read_log(fixtures_dir / MLM)
    assert [it.iteration for it in log.iterations] == [it.iteration for it in plain.iterations]
    assert log.iteration_seconds == plain.iteration_seconds
    assert len(log.notes) == 1 and "8 iteration(s) twice in a row" in log.notes[0]


def _line(i: int, ms: float, gbs: int, loss: str = "1.0", nans: int = 0) -> str:
    """One iteration line as Megatron-LM's training_log prints it."""
    return (f" [2025-01-01 00:00:00] iteration {i:8d}/     100 | consumed samples: {i * gbs} | elapsed time per "
            f"iteration (ms): {ms} | throughput per GPU (TFLOP/s/GPU): 244.0 | global batch size: {gbs:5d} | "
            f"lm loss: {loss} | number of nan iterations: {nans:3d} |")


def test_a_batch_that_ramps_up_is_timed_at_its_last_size():
    """--rampup-batch-size: 12 iterations at 256 (10.25 s) before 8 at 1024 (41 s). The step had been the median over
    both sizes (10.25 s) while tokens/s took the last size: 4x fast. Both now time the last size, and a note says so."""
    text = "\n".join([_line(i, 10250.0, 256) for i in range(1, 13)] + [_line(i, 41000.0, 1024) for i in range(13, 21)])
    log = parse_log(text, "ramp.log")
    assert log.iteration_seconds == pytest.approx(41.0)
    assert [it.iteration for it in log.steady_iterations()] == list(range(13, 21))
    assert any("the global batch changes (256 -> 1024)" in n and "8 iteration(s) at 1024" in n for n in log.notes)
    steady = parse_log("\n".join(_line(i, 41000.0, 1024) for i in range(1, 9)), "steady.log")
    assert steady.notes == [] and [it.iteration for it in steady.steady_iterations()] == list(range(2, 9))


def test_one_timed_iteration_and_a_loss_that_is_not_finite_are_said():
    one = parse_log(_line(1, 66909.3, 1024), "one.log")
    assert one.iteration_seconds == pytest.approx(66.9093)
    assert any("times one iteration (1), which includes warm-up" in n for n in one.notes)
    nan = parse_log("\n".join([_line(i, 41000.0, 1024) for i in range(1, 6)]
                              + [_line(6, 41000.0, 1024, "nan", 1), _line(7, 41000.0, 1024, "1.0", 2)]), "nan.log")
    assert any("not finite at 2 logged iteration(s) (first 6)" in n for n in nan.notes)


def test_a_run_that_stopped_with_an_error_is_said(tmp_path):
    path = tmp_path / "crash.log"
    path.write_text("\n".join([_line(i, 41000.0, 1024) for i in range(1, 6)]
                              + ["Traceback (most recent call last):", "RuntimeError: NCCL error in: x.cpp:1275"]))
    result = diagnose([], log=path)
    assert any("the run stopped after iteration 5: RuntimeError: NCCL error" in n for n in result.notes)


def test_the_logs_tokens_per_gpu_are_in_the_evidence(fixtures_dir):
    """docs/diagnose.md lists tokens/s/GPU among what a log gives; the report had shown it in JSON alone."""
    log = read_log(fixtures_dir / MLM)
    line = next(x for x in diagnose([], log=log).evidence if x.startswith("log: "))
    assert f"{log.tokens_per_second_per_gpu:,.0f} tokens/s/GPU" in line


def test_an_error_the_run_went_on_past_is_no_stop(tmp_path):
    """A RuntimeError line after iteration 2 with iterations 3-5 after it: the run did not stop there."""
    path = tmp_path / "went_on.log"
    path.write_text("\n".join([_line(1, 41000.0, 1024), _line(2, 41000.0, 1024), "RuntimeError: transient",
                               *[_line(i, 41000.0, 1024) for i in range(3, 6)]]))
    assert read_log(path).failure_lines == []
    assert not any("stopped" in n for n in diagnose([], log=path).notes)


@pytest.mark.parametrize("last", ["[rank5]: RuntimeError: CUDA error: an illegal memory access was encountered",
                                  "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."])
def test_a_stop_after_the_last_iteration_is_said_in_its_usual_forms(last, tmp_path):
    """A rank's error behind torchrun's '[rank5]: ' prefix, and an OOM after ten healthy iterations: each is a stop
    after the last iteration (neither had been said)."""
    path = tmp_path / "stop.log"
    path.write_text("\n".join([_line(i, 41000.0, 1024) for i in range(1, 11)] + [last]))
    assert read_log(path).failure_lines == [last]
    assert any("the run stopped after iteration 10" in n for n in diagnose([], log=path).notes)


def _lines(times_ms) -> str:
    return "".join(f" [2026-01-01 00:00:00] iteration {i:8d}/     100 | consumed samples: 64 | elapsed time per "
                   f"iteration (ms): {ms} | throughput per GPU (TFLOP/s/GPU): 300.0 | global batch size:    64 |\n"
                   for i, ms in enumerate(times_ms, 1))


def test_a_step_that_slows_or_stalls_is_said_with_its_mean():
    """The figures take the steady median, which reads a run that slows (18 s, then 30 s) or stalls every 7th
    iteration faster than its mean: each is a note with both figures; a steady run has none."""
    slowing = parse_log(_lines([20000] + [18000] * 20 + [30000] * 20), "slow.log")
    assert any("slows over the run" in n and "18.000 s" in n and "30.000 s" in n for n in slowing.notes)
    every_7th = [26000 if i % 7 == 0 else 18000 for i in range(1, 43)]
    note = next(n for n in parse_log(_lines([20000] + every_7th), "gc.log").notes if "stall past" in n)
    assert "6 of 42 iterations" in note and f"mean is {statistics.fmean(every_7th) / 1000:.3f} s" in note
    assert not [n for n in parse_log(_lines([20000] + [18000] * 30), "ok.log").notes if "stall" in n or "slows" in n]
    # a 4x stall every 15th iteration: under a tenth of them, yet the mean 20% over the median
    rare = [72000 if i % 15 == 0 else 18000 for i in range(1, 46)]
    assert any("3 of 45 iterations stall" in n for n in parse_log(_lines([20000] + rare), "rare.log").notes)
    jitter = [18000 + (i % 5) * 90 for i in range(1, 46)]  # +-1% noise: no note
    assert not [n for n in parse_log(_lines([20000] + jitter), "jitter.log").notes if "stall" in n]


def test_a_hung_collective_is_named_as_the_stop():
    """NCCL's watchdog line is the root cause of the aborts printed after it (torchrun's SIGABRT, srun's exit): the
    stop is said by the collective, its group and timeout, where the last line had been quoted, or none at all."""
    watchdog = ("[rank3]:[E1120 09:13:52.114000 2211 ProcessGroupNCCL.cpp:632] [PG ID 4 PG GUID 61(EXPERT_MODEL_"
                "PARALLEL_GROUP) Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=18803, "
                "OpType=ALLTOALL_BASE, NumelIn=25165824, NumelOut=25165824, Timeout(ms)=600000) ran for 600081 "
                "milliseconds before timing out.\n")
    for tail in ("", "terminate called after throwing an instance of 'c10::DistBackendError'\n",
                 "srun: error: node-017: task 0: Exited with exit code 1\n"):
        log = parse_log(_lines([20000] * 5) + watchdog + tail, "hang.log")
        assert log.hung and log.stop_cause == ("NCCL watchdog timeout: ALLTOALL_BASE on EXPERT_MODEL_PARALLEL_GROUP "
                                               "after 600 s, rank 3")


def test_one_garbled_iteration_line_is_passed_over_with_a_note():
    """srun interleaving another rank's line into an iteration line had thrown the other iterations away."""
    text = _lines([20000] * 6).replace("(ms): 20000 |", "(ms): 20[Rank 8] (after 2 iterations) memory (MB) |", 1)
    log = parse_log(text, "spliced.log")
    assert len(log.iterations) == 5 and any("1 iteration line(s) passed over" in n for n in log.notes)


def test_a_gzipped_empty_or_odd_log_reads_or_says_why(tmp_path):
    import gzip
    (tmp_path / "run.log.gz").write_bytes(gzip.compress(_lines([20000] * 4).encode()))
    assert len(read_log(tmp_path / "run.log.gz").iterations) == 4
    (tmp_path / "bad.log.gz").write_text(_lines([20000] * 4))
    with pytest.raises(MoetuneError, match="not a readable gzip"):
        read_log(tmp_path / "bad.log.gz")
    (tmp_path / "empty.log").write_text("\n")
    with pytest.raises(MoetuneError, match="is empty"):
        read_log(tmp_path / "empty.log")
    with pytest.raises(MoetuneError, match="not a regular file"):
        read_log(tmp_path)


def test_a_hang_before_the_first_iteration_is_named(tmp_path):
    """A job whose all-to-all timed out at start-up had been told its log held no iteration lines."""
    (tmp_path / "hang.log").write_text(
        "using world size: 16, data-parallel size: 16\n[rank3]:[E1120 09:13:52 ProcessGroupNCCL.cpp:632] [PG ID 4 PG "
        "GUID 61(EXPERT_MODEL_PARALLEL_GROUP) Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
        "OpType=ALLTOALL_BASE, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.\n"
        "srun: error: node-017: task 0: Exited with exit code 1\n")
    with pytest.raises(MoetuneError, match="hung before its first iteration .NCCL watchdog timeout: ALLTOALL_BASE"):
        read_log(tmp_path / "hang.log")
