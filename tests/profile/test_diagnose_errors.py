"""Malformed, truncated, empty or CPU-only input: one clear line, non-zero exit, never a traceback."""

import gzip
import json
import re

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
    # an error page saved under a trace's name had read as 'not valid JSON: lexical error', nothing about the .gz
    "page.json.gz": (lambda p, t: p.write_text("<html>404</html>"), "it is not gzip-compressed though named .gz"),
    # binary bytes: yajl's message had come out as a bytes repr with the file's unprintable bytes in it
    "binary.json": (lambda p, t: p.write_bytes(bytes(range(128, 256)) * 3), "lexical error: invalid "
                                                                              "char in json text."),
    "other.json": (lambda p, t: p.write_text('{"hello": [1, 2, 3]}'), "no traceEvents"),
    "cpu_only.json": (lambda p, t: _cpu_only(p), "CPU-only"),
    "numbers.json": (lambda p, t: p.write_text('{"traceEvents": [1, 2, 3]}'), "no traceEvents"),
    "empty_list.json": (lambda p, t: p.write_text('{"traceEvents": []}'), "or an empty list"),
    # had read 'no traceEvents, or an empty list' for a key that is there, holding something else (the audit's case)
    "events_number.json": (lambda p, t: p.write_text('{"traceEvents": 5}'), "traceEvents as a number, not a list"),
    "events_object.json": (lambda p, t: p.write_text('{"schemaVersion": 1, "traceEvents": {"a": 1}}'),
                           "traceEvents as an object, not a list"),
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
    assert "b'" not in err and "\\x" not in err and all(c.isprintable() for c in err.strip())


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


KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "ts": 10, "dur": 5, "pid": 0, "tid": 7}
METADATA = {
    "rank_word.json": ({"distributedInfo": {"rank": "zero", "world_size": 2}}, KERNEL, "distributedInfo"),
    "dist_str.json": ({"distributedInfo": "x"}, KERNEL, "distributedInfo"),
    "props_int.json": ({"deviceProperties": 5}, KERNEL, "deviceProperties"),
    "props_words.json": ({"deviceProperties": [{"id": 0, "totalGlobalMem": "lots", "computeMajor": "x"}]}, KERNEL,
                         "deviceProperties"),
    "rank_past_world.json": ({"distributedInfo": {"rank": 5, "world_size": 2}}, KERNEL, "rank 5 outside world size 2"),
    "args_str.json": ({}, {**KERNEL, "args": "x"}, "malformed event"),
    "negative_dur.json": ({}, {**KERNEL, "dur": -5}, "has dur -5: not a duration"),
    "no_dur.json": ({}, {k: v for k, v in KERNEL.items() if k != "dur"}, "has dur missing: not a duration"),
    # a kernel without ts had been passed over, and a trace of such kernels read as 'a CPU-only profile'
    "no_ts.json": ({}, {k: v for k, v in KERNEL.items() if k != "ts"}, "GPU event 'k' has no ts"),
    # a kernel of 31 years, an infinite one (1e400 parses as inf) and a 401-digit integer (float() overflows)
    "huge_dur.json": ({}, {**KERNEL, "dur": 10**15}, "not a duration between 0 and an hour"),
    "huge_int_dur.json": ({}, {**KERNEL, "dur": 10**400}, "not a duration between 0 and an hour"),
    # a kernel's ts of 401 digits had overflowed the trace's wall-clock span (OverflowError), one of 1e18 us no clock
    "huge_int_ts.json": ({}, {**KERNEL, "ts": 10**400}, "is past any clock's"),
    "huge_ts.json": ({}, {**KERNEL, "ts": 10**18}, "ts 1000000000000000000 is past any clock's"),
    "step_no_dur.json": ({}, {**KERNEL, "cat": "user_annotation", "name": "ProfilerStep#3", "dur": None},
                         "ProfilerStep#3 at ts 10 has dur None"),
    "step_zero_dur.json": ({}, {**KERNEL, "cat": "user_annotation", "name": "ProfilerStep#3", "dur": 0},
                           "lasts 0 us"),
}


@pytest.mark.parametrize("name", sorted(METADATA))
def test_malformed_metadata_or_kernel_is_one_line(name, tmp_path, capsys):
    header, event, message = METADATA[name]
    path = tmp_path / name
    path.write_text(json.dumps({**header, "traceEvents": [event]}))
    code, out, err = cli([path], capsys)
    assert code == 2 and out == "" and message in err
    assert err.startswith(f"error: trace {path}") and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("other", "what"), [({"world_size": 16}, "world sizes (8 vs 16)"),
                                             ({"device_name": "Tesla V100-SXM2-32GB"}, "GPUs")])
def test_traces_of_two_runs_are_refused(other, what, tmp_path):
    a = write_trace(compute_bound(rank=0), tmp_path / "a.json.gz")
    b = write_trace(compute_bound(rank=1, **other), tmp_path / "b.json.gz")
    with pytest.raises(MoetuneError, match=re.escape(f"record different {what}")):
        diagnose([a, b])


def _log(path, ms: str, lines: int = 10):
    path.write_text("".join(
        f" [2026-01-01 00:00:00] iteration {10 * i:8d}/     100 | consumed samples: 640 | elapsed time per iteration "
        f"(ms): {ms} | throughput per GPU (TFLOP/s/GPU): 345.6 | learning rate: 1.0E-04 | global batch size:    64 | "
        "lm loss: 5.1E+00 |\n" for i in range(1, lines + 1)))
    return path


def test_log_value_that_is_not_a_number_is_an_error(tmp_path, capsys):
    code, _, err = cli(["--log", _log(tmp_path / "t.log", "abc")], capsys)
    assert code == 2 and "line 1: elapsed time per iteration (ms) 'abc' is not a number" in err


def test_log_and_traces_of_different_runs(tmp_path):
    trace = write_trace(compute_bound(), tmp_path / "a.json.gz")
    step = diagnose([trace]).step_seconds
    far = diagnose([trace], log=_log(tmp_path / "far.log", f"{2000 * step:.1f}"))
    assert any("2.00x the traces'" in n for n in far.notes)  # past 1.5x: a note
    with pytest.raises(MoetuneError, match="5.00x the traces' .* step, more than profiling changes a step"):
        diagnose([trace], log=_log(tmp_path / "other.log", f"{5000 * step:.1f}"))  # past 3x: another run's
    near = diagnose([trace], log=_log(tmp_path / "near.log", f"{1100 * step:.1f}"))
    assert not any("the traces'" in n for n in near.notes)
    log = _log(tmp_path / "mem.log", f"{1000 * step:.1f}")
    log.write_text(log.read_text() + "[Rank 0] (after 10 iterations) memory (MB) | allocated: 1.0 | max allocated: "
                   "1.0 | reserved: 1.0 | max reserved: 90000.0\n")  # 87.9 GiB on an 80 GB H100
    with pytest.raises(MoetuneError, match="exceeds the GPU's 79.6 GiB"):
        diagnose([trace], log=log)


def test_idle_gpu_with_no_cause_is_not_called_compute_bound(tmp_path):
    path = tmp_path / "idle.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100, "pid": 0, "tid": 1},
        {**KERNEL, "ts": 500}]}))
    result = diagnose([path])
    assert result.dominant_wall == "undetermined" and "busy only 0%" in result.wall_reason


def test_a_log_alone_takes_capacity_and_shape_from_the_flags(tmp_path, capsys):
    """A Megatron Bridge log prints no argument dump: --gpu gives the capacity, --gpus and model.seq_length the
    tokens per GPU (64 x 4096 tokens / 1.0 s / 16 GPUs)."""
    log = _log(tmp_path / "t.log", "1000.0")
    code, out, _ = cli(["--log", log, "--gpu", "h100", "--gpus", "16", "--set", "model.seq_length=4096", "--json"],
                       capsys)
    data = json.loads(out)
    assert code == 0 and data["log"]["tokens_per_second_per_gpu"] == 64 * 4096 / 16
    assert data["memory"]["capacity_bytes"] == 78 * 2**30


def test_a_trace_given_twice_is_not_two_ranks(tmp_path, capsys):
    path = tmp_path / "bare.json"
    path.write_text(json.dumps([KERNEL]))
    code, _, err = cli([path, tmp_path / "." / "bare.json"], capsys)
    assert code == 2 and "is given twice" in err


def test_gpu_flag_must_be_the_traces_architecture(tmp_path, capsys):
    trace = write_trace(compute_bound(), tmp_path / "a.json.gz")  # an H100 (compute capability 9.0)
    code, _, err = cli([trace, "--gpu", "gb200"], capsys)
    assert code == 2 and "--gpu gb200 is blackwell but" in err and "(hopper, compute capability 9.0)" in err
    assert cli([trace, "--gpu", "h100"], capsys)[0] == 0


@pytest.mark.parametrize("extra, where", [(["--gpus", "64"], "--gpus/the config says 64"),
                                          (["--log", "LOG16"], "says 16")])
def test_world_size_of_log_and_flags_must_be_the_traces(extra, where, tmp_path, capsys):
    trace = write_trace(compute_bound(), tmp_path / "a.json.gz")  # world size 8
    log = _log(tmp_path / "t.log", "1000.0")
    log.write_text("  world_size ...................................... 16\n" + log.read_text())
    code, _, err = cli([trace, *[str(log) if x == "LOG16" else x for x in extra]], capsys)
    assert code == 2 and "says world size 8" in err and where in err


def test_a_log_alone_gets_its_platform_from_gpu(tmp_path, capsys):
    """No FP8 recipe for an A100 (no FP8 Tensor Cores) where the memory wall (an OOM) would otherwise suggest one."""
    log = _log(tmp_path / "t.log", "1000.0")
    log.write_text(log.read_text() + "[Rank 0] (after 10 iterations) memory (MB) | allocated: 1.0 | max allocated: "
                   "1.0 | reserved: 1.0 | max reserved: 78000.0\n"
                   "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    code, out, _ = cli(["--log", log, "--gpu", "a100", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["dominant_wall"] == "memory" and data["facts"]["gpu.arch"] == "ampere"
    assert "mem.fp8" not in {r["rule"] for r in data["recommendations"]}


def _gemms_on(streams: list[int], path):
    """Ten 1 ms steps of a 0.9 ms GEMM each, spread over `streams` (Transformer Engine's grouped GEMM runs one cuBLAS
    kernel per expert over its 4 compute streams)."""
    events = []
    for i in range(10):
        t0 = 1000 * i
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": t0, "dur": 1000,
                       "pid": 0, "tid": 1})
        for j, stream in enumerate(streams):
            events.append({"ph": "X", "cat": "kernel", "name": "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT",
                           "ts": t0 + 50 + j * 10, "dur": 850, "pid": 0, "tid": stream, "args": {"stream": stream}})
    path.write_text(json.dumps({"deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9,
                                                      "computeMinor": 0, "totalGlobalMem": 85520809984}],
                                "traceEvents": events}))
    return path


def test_te_multi_stream_grouped_gemm_is_not_told_to_turn_grouped_gemm_on(tmp_path):
    moe = {"model.num_moe_experts": 128}
    one = diagnose([_gemms_on([7], tmp_path / "one.json")], config=moe)
    assert "compute.grouped_gemm" in {r.rule for r in one.recommendations}
    four = diagnose([_gemms_on([7, 13, 15, 17], tmp_path / "four.json")], config=moe)
    assert four.facts["gemm_streams"] == 4
    assert "compute.grouped_gemm" not in {r.rule for r in four.recommendations}


@pytest.mark.parametrize(("text", "needle"), [
    # yajl's C backend crashed the process (exit 139) on a number this long
    ('{"traceEvents": [{"name": "k", "ph": "X", "cat": "kernel", "ts": 1, "dur": 1' + "0" * 5000 + "}]}",
     "a number of 512 digits or more"),
    # nesting made ijson's prefixes grow quadratically: minutes at 100,000 levels
    ('{"a": ' + "[" * 100000 + "]" * 100000 + ', "traceEvents": []}', "nests values 128 levels deep"),
    ('{"traceEvents": [{"args": ' + '{"a": ' * 200 + "1" + "}" * 200 + "}]}", "nests values 128 levels deep"),
])
def test_traces_no_profiler_writes_are_refused_before_parsing(tmp_path, capsys, text, needle):
    path = tmp_path / "rank0.json"
    path.write_text(text)
    code, _, err = cli([str(path)], capsys)
    assert code == 2 and needle in err


@pytest.mark.parametrize("value", ["-400", "1e400"])
def test_a_memory_report_no_allocator_prints_is_refused(tmp_path, capsys, value):
    log = tmp_path / "log.txt"
    log.write_text(f"[Rank 0] (after 1 iterations) memory (MB) | allocated: 1 | max allocated: 1 | reserved: 1 | "
                   f"max reserved: {value}\n")
    code, _, err = cli(["--log", str(log)], capsys)
    assert code == 2 and "max_reserved" in err and "must be a finite number >= 0" in err


def test_a_nearly_full_gpu_that_fits_is_not_the_memory_wall(tmp_path, capsys):
    """97% of the GPU reserved with no OOM and no allocator retries is PyTorch's caching allocator keeping what it
    freed (seeds/000's memory row: "fits only with aggressive full recompute or OOMs during warmup"): no memory wall,
    no recompute advice, and the evidence says so."""
    log = _log(tmp_path / "t.log", "1000.0")
    log.write_text(log.read_text() + "[Rank 0] (after 10 iterations) memory (MB) | allocated: 1.0 | max allocated: "
                   "1.0 | reserved: 1.0 | max reserved: 77500.0\n")
    code, out, _ = cli(["--log", log, "--gpu", "a100", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["dominant_wall"] != "memory" and not data["recommendations"]
    assert any("caching allocator" in line for line in data["evidence"])


@pytest.mark.parametrize(("pp", "advised"), [(1, False), (4, True)])
def test_a_megatron_lm_logs_argument_dump_tailors_the_advice(pp, advised, tmp_path, capsys):
    """The argument dump a Megatron-LM log starts with is what ran: at PP 1 there is no pipeline split to even out, so
    mem.pp_layout is not advised; the dump's experts make it a MoE run (moe_act recompute) with no --config."""
    log = _log(tmp_path / "t.log", "1000.0")
    dump = "".join(f"  {k} {'.' * 20} {v}\n" for k, v in (("pipeline_model_parallel_size", pp), ("num_experts", 64),
                                                          ("recompute_granularity", None)))
    log.write_text("------------------------ arguments ------------------------\n" + dump + log.read_text()
                   + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    code, out, _ = cli(["--log", log, "--gpu", "h100", "--json"], capsys)
    data = json.loads(out)
    rules = {r["rule"]: r for r in data["recommendations"]}
    assert code == 0 and data["dominant_wall"] == "memory" and data["facts"]["moe"] is True
    assert ("mem.pp_layout" in rules) is advised
    assert rules["mem.selective_recompute"]["overrides"]["model.recompute_modules"][1] == "moe_act"


@pytest.mark.parametrize(("apart_s", "refused"), [(0, False), (3600, True)])
def test_traces_with_a_base_time_are_checked_on_the_wall_clock(tmp_path, apart_s, refused):
    """Kineto writes baseTimeNanoseconds after traceEvents, its ts counting from it (the shared 2-rank A100 trace
    does): two ranks of one run share the clock; one recorded an hour later is another run's."""
    from moetune.profile.synthetic import alltoall_exposed
    base = 1_711_964_646_000_000_000
    for rank in (0, 1):
        path = write_trace(alltoall_exposed(rank=rank, world_size=2), tmp_path / f"rank{rank}.json")
        stamp = base + rank * apart_s * 10**9
        path.write_text(path.read_text().replace('"displayTimeUnit": "ms"}',
                                                 f'"displayTimeUnit": "ms", "baseTimeNanoseconds": {stamp}}}'))
    if refused:
        with pytest.raises(MoetuneError, match="recorded 3,600 s apart and never overlap"):
            diagnose([tmp_path])
    else:
        assert diagnose([tmp_path]).ranks == 2


@pytest.mark.parametrize(("tail", "epoch"), [
    ('"displayTimeUnit": "ms", "baseTimeNanoseconds": 1711964646000000000}', True),
    ('"displayTimeUnit": "ms", "baseTimeNanoseconds": "1711964646000000000"}', True),  # as a string
    ('"displayTimeUnit": "ms", "baseTimeNanoseconds": 1.711964646e18}', True),  # as a float
    ('"displayTimeUnit": {"baseTimeNanoseconds": 1711964646000000000}}', False),  # inside another key's object
])
def test_only_the_traces_own_base_time_puts_it_on_the_wall_clock(tmp_path, tail, epoch):
    path = write_trace(compute_bound(), tmp_path / "rank0.json")
    path.write_text(path.read_text().replace('"displayTimeUnit": "ms"}', tail))
    assert (read_trace(path).epoch_span is not None) is epoch


@pytest.mark.parametrize(("line", "needle"), [
    ("  world_size ...................................... abc\n", "world_size is 'abc'"),
    ("  world_size ...................................... 0\n", "world_size is '0'"),
])
def test_a_log_dump_world_size_that_is_no_count_is_one_line(tmp_path, capsys, line, needle):
    log = _log(tmp_path / "t.log", "1000.0")
    log.write_text("------------------------ arguments ------------------------\n" + line + log.read_text())
    code, _, err = cli(["--log", log], capsys)
    assert code == 2 and needle in err and "Traceback" not in err


def test_numbers_past_pythons_limits_in_a_log_are_not_a_crash(tmp_path, capsys):
    """A 10,000-digit dump value is left out (the dump is read, not checked); a 5,000-digit iteration count is not a
    Megatron line."""
    log = _log(tmp_path / "t.log", "1000.0")
    log.write_text("------------------------ arguments ------------------------\n"
                   f"  hidden_size ..................................... {'9' * 10000}\n" + log.read_text()
                   + f" iteration {'9' * 5000}/      10 | elapsed time per iteration (ms): 1000.0 |\n")
    code, _, err = cli(["--log", log], capsys)
    assert code == 0 and "Traceback" not in err


def test_a_log_passed_as_a_trace_is_pointed_at_log(tmp_path, capsys):
    code, _, err = cli([_log(tmp_path / "run.log", "1000.0")], capsys)
    assert code == 2 and "a training log? pass it as --log FILE" in err
