"""`moetune sweep write` and `sweep ingest` as a user runs them: a plan's top candidates emitted as benchmarks and
submitted (a stand-in sbatch on PATH records what Slurm is asked), then their logs read back."""

import contextlib
import io
import json
import os
import statistics
import subprocess
import tomllib

import pytest
from tests.cli.cli_run import run

from moetune.cli.main import main

GBS, SEQ, WORLD = 512, 4096, 16


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    """A real plan: Qwen3-30B-A3B on 16 H100, its five fastest configurations that fit."""
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", str(WORLD), "--gbs", str(GBS), "--top", "5",
                     "--json"]) == 0
    path.write_text(out.getvalue())
    return path


@pytest.fixture
def fake_sbatch(tmp_path, monkeypatch):
    """An sbatch that records its directory and arguments and answers a job id as --parsable does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    script = bin_dir / "sbatch"
    script.write_text(f'#!/usr/bin/env bash\nn=$(( $(wc -l < "{calls}" 2>/dev/null || echo 0) + 501 ))\n'
                      f'echo "$PWD $*" >> "{calls}"\necho "$n;cluster"\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


def _sweep(plan_file, out, capsys, *extra):
    code, stdout, err = run(["sweep", "write", str(plan_file), "--out", str(out), *extra], capsys)
    assert code == 0, err
    return stdout


def test_each_candidate_is_the_plans_result_set_to_benchmark(plan_file, tmp_path, capsys):
    out = tmp_path / "sweep"
    _sweep(plan_file, out, capsys, "--top", "3", "--iters", "40")
    results = json.loads(plan_file.read_text())["results"]
    manifest = json.loads((out / "sweep.json").read_text())
    assert [c["folder"] for c in manifest["candidates"]] == ["r01", "r02", "r03"]
    assert manifest["iters"] == 40 and manifest["skip"] == 13
    for rank, folder in enumerate(("r01", "r02", "r03")):
        overrides = (out / folder / "overrides.txt").read_text().splitlines()
        lay = results[rank]["layout"]
        assert f"model.expert_model_parallel_size={lay['ep']}" in overrides
        assert f"model.pipeline_model_parallel_size={lay['pp']}" in overrides
        # Bridge's performance scripts' benchmark settings (scripts/performance/utils/overrides.py)
        assert {"train.train_iters=40", "logger.log_interval=1", "logger.log_throughput=true", "checkpoint.save=null",
                "train.eval_iters=0", "train.manual_gc=true", "train.manual_gc_interval=100",
                "scheduler.lr_decay_iters=40", "scheduler.lr_warmup_iters=10",
                "rerun_state_machine.check_for_nan_in_loss=false"} <= set(overrides)
        args = (out / folder / "megatron_lm_args.txt").read_text().splitlines()
        assert {"--train-iters 40", "--log-interval 1", "--log-throughput", "--eval-iters 0", "--manual-gc",
                "--manual-gc-interval 100", "--lr-decay-iters 40", "--lr-warmup-iters 10",
                "--no-check-for-nan-in-loss-and-grad"} <= set(args)
        assert manifest["candidates"][rank]["result"] == results[rank]
    assert subprocess.run(["bash", "-n", str(out / "submit.sh")]).returncode == 0


def test_submit_runs_each_candidate_from_its_folder_one_at_a_time(plan_file, tmp_path, capsys, fake_sbatch,
                                                                  monkeypatch):
    monkeypatch.setenv("RECIPE", "qwen3_30b_a3b_pretrain_config")
    out = tmp_path / "sweep"
    stdout = _sweep(plan_file, out, capsys, "--top", "2", "--submit")
    calls = fake_sbatch.read_text().splitlines()
    assert len(calls) == 2
    for call, folder in zip(calls, ("r01", "r02"), strict=True):
        where, *args = call.split()
        assert where == str(out / folder) and args[-1] == "sbatch.sh"
        assert f"--output={out / folder}/train-%j.log" in args and "--dependency=singleton" in args
    assert (out / "jobs.txt").read_text().split() == ["r01", "501", "r02", "502"]
    assert "submitted: r01 501" in stdout


@pytest.mark.parametrize(("args", "words"), [
    (["--iters", "10", "--skip", "10"], "--skip 10: must be below --iters (10)"),
    (["--set", "train.train_iters=5"], "the sweep sets train.train_iters for every benchmark, as Bridge's "
                                       "performance scripts do (sweep_cmd.benchmark_sets); the benchmark's length is "
                                       "--iters"),
    (["--set", "scheduler.lr_warmup_iters=2000"], "the sweep sets scheduler.lr_warmup_iters"),
])
def test_write_refuses_in_one_line(plan_file, tmp_path, capsys, args, words):
    code, _, err = run(["sweep", "write", str(plan_file), "--out", str(tmp_path / "s"), *args], capsys)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()


def test_write_keeps_an_earlier_sweeps_logs(plan_file, tmp_path, capsys):
    _sweep(plan_file, tmp_path / "s", capsys, "--top", "1")
    code, _, err = run(["sweep", "write", str(plan_file), "--out", str(tmp_path / "s")], capsys)
    assert code == 2 and "already holds a sweep" in err


def test_submit_without_sbatch_says_where_to_run_it(plan_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch
    code, _, err = run(["sweep", "write", str(plan_file), "--out", str(tmp_path / "s"), "--submit"], capsys)
    assert code == 2 and "sbatch is not on PATH" in err and not (tmp_path / "s").exists()


def bridge_log(seconds: list[float], gbs: int = GBS, oom: bool = False) -> str:
    """A Megatron Bridge job's stdout, one iteration line a step (log_interval 1), in the format of Bridge's
    training/utils/train_utils.py training_log (as tests/profile/fixtures/megatron_bridge_oom.log)."""
    lines = ["> initializing torch distributed ...", "Starting training loop at iteration 0"]
    for i, s in enumerate(seconds, 1):
        lines.append(f" [2026-11-29 10:00:00] iteration {i:8d}/{len(seconds):8d} | consumed samples: {i * gbs:12d} | "
                     f"elapsed time per iteration (ms): {s * 1000:.1f} | throughput per GPU (TFLOP/s/GPU): 250.0 | "
                     f"learning rate: 1.000000E-05 | global batch size: {gbs:5d} | lm loss: 1.100000E+01 | "
                     "loss scale: 1.0 | grad norm: 5.000 | number of skipped iterations:   0 | "
                     "number of nan iterations:   0 |")
        if i == 1:
            lines.append("[Rank 0] (after 1 iterations) memory (GB) | mem-allocated-gigabytes: 60.1 | "
                         "mem-reserved-gigabytes: 70.2 | mem-max-allocated-gigabytes: 68.0 | "
                         "mem-max-reserved-gigabytes: 71.5 | mem-alloc-retires: 0")
    if oom:
        lines.append("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    return "\n".join(lines) + "\n"


@pytest.fixture
def swept(plan_file, tmp_path, capsys):
    out = tmp_path / "sweep"
    _sweep(plan_file, out, capsys, "--top", "4", "--iters", "30")
    return out


def _tokens(seconds: list[float], skip: int = 10) -> float:
    return GBS * SEQ / statistics.median(seconds[skip:]) / WORLD


def test_ingest_measures_each_log_against_its_prediction(swept, capsys):
    predicted = [c["result"]["time"]["tokens_per_s_per_gpu"]
                 for c in json.loads((swept / "sweep.json").read_text())["candidates"]]
    # r01 runs 10% slower than predicted, r02 as predicted; warm-up iterations slow, then a little jitter
    # (to the tenth of a millisecond the log prints)
    r01 = [40.0] * 3 + [round(GBS * SEQ / WORLD / (0.9 * predicted[0]) * (1 + 0.002 * (i % 3)), 4) for i in range(27)]
    r02 = [40.0] * 3 + [round(GBS * SEQ / WORLD / predicted[1], 4)] * 27
    (swept / "r01" / "train-501.log").write_text(bridge_log(r01))
    (swept / "r02" / "slurm-502.out").write_text(bridge_log(r02))
    (swept / "r03" / "train-503.log").write_text(bridge_log([30.0] * 2, oom=True))
    code, stdout, err = run(["sweep", "ingest", str(swept), "--json"], capsys)
    assert code == 0, err
    data = json.loads(stdout)
    rows = {c["folder"]: c for c in data["candidates"]}
    assert rows["r01"]["status"] == "measured" and rows["r01"]["timed_iterations"] == 20
    assert rows["r01"]["measured_tokens_per_s_per_gpu"] == pytest.approx(_tokens(r01))
    assert rows["r01"]["error"] == pytest.approx(predicted[0] / _tokens(r01) - 1)
    assert rows["r01"]["measured_max_reserved_bytes"] == pytest.approx(71.5e9)
    assert rows["r02"]["error"] == pytest.approx(0.0, abs=1e-3)
    assert rows["r03"]["status"] == "out of memory" and rows["r03"]["false_fit"] is True
    assert rows["r04"]["status"] == "no log"
    assert data["fastest"] == "r02"
    # the refit lowers the H100 constants toward r01 and r02 (both measured at or below the prediction)
    refit = {r["run_id"]: r for r in data["refit"]["runs"]}
    assert set(refit) == {"r01", "r02"} and data["refit"]["fitted"]["h100"]["compute_scale"] < 1


def test_ingest_reads_the_table_and_writes_constants_plan_takes(swept, tmp_path, capsys):
    predicted = json.loads((swept / "sweep.json").read_text())["candidates"][0]["result"]["time"]
    slow = [GBS * SEQ / WORLD / (0.8 * predicted["tokens_per_s_per_gpu"])] * 30
    (swept / "r01" / "train-1.log").write_text(bridge_log(slow))
    (swept / "r02" / "train-2.log").write_text(bridge_log(slow[:8]))  # stopped before the timing starts
    (swept / "r03" / "train-3.log").write_text(bridge_log(slow, gbs=256))  # another batch than planned
    code, stdout, err = run(["sweep", "ingest", str(swept), "--json"], capsys)
    rows = {c["folder"]: c for c in json.loads(stdout)["candidates"]}
    assert rows["r02"]["status"] == "too short"
    assert rows["r02"]["detail"].startswith("logged to iteration 8; the timing starts after 10")
    assert (rows["r03"]["status"], rows["r03"]["detail"]) == ("other run", "ran global batch 256 (planned 512)")
    written = tmp_path / "mine.toml"
    code, stdout, err = run(["sweep", "ingest", str(swept), "--write", str(written)], capsys)
    assert code == 0, err
    assert "+25.0%" in stdout and "too short" in stdout  # r01: predicted / measured - 1
    assert "h100" in tomllib.loads(written.read_text())
    code, stdout, err = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16",
                             "--efficiency", str(written), "--json"], capsys)
    assert code == 0, err


def test_ingest_names_a_false_fit_with_the_headroom_that_leaves_it_out(swept, tmp_path, capsys):
    (swept / "r01" / "train-9.log").write_text(bridge_log([30.0], oom=True))
    written = tmp_path / "mine.toml"
    code, stdout, err = run(["sweep", "ingest", str(swept), "--write", str(written)], capsys)
    assert "false fit" in stdout and "--headroom above" in stdout
    # nothing timed: the table, then exit 1 saying no constants were written
    assert code == 1 and "nothing to refit" in err and f"{written} not written" in err and not written.exists()


def test_ingest_says_which_candidate_measured_fastest(swept, capsys):
    manifest = json.loads((swept / "sweep.json").read_text())
    fast = [GBS * SEQ / WORLD / (1.1 * manifest["candidates"][2]["result"]["time"]["tokens_per_s_per_gpu"])] * 30
    slow = [s * 1.2 for s in fast]
    (swept / "r01" / "train-1.log").write_text(bridge_log(slow))
    (swept / "r03" / "train-3.log").write_text(bridge_log(fast))
    code, stdout, _ = run(["sweep", "ingest", str(swept)], capsys)
    assert code == 0 and "r03 measured fastest, +20.0% over the pick" in stdout and "--rank 3" in stdout


def test_the_fastest_without_the_pick_names_the_candidates_within_its_noise(swept, capsys):
    """The pick not timed, r02 and r03 measured 0.2% apart: 'fastest' says they are within the noise of each other."""
    manifest = json.loads((swept / "sweep.json").read_text())
    base = GBS * SEQ / WORLD / manifest["candidates"][1]["result"]["time"]["tokens_per_s_per_gpu"]
    (swept / "r02" / "train-2.log").write_text(bridge_log([base] * 30))
    (swept / "r03" / "train-3.log").write_text(bridge_log([base * 1.002] * 30))
    code, stdout, _ = run(["sweep", "ingest", str(swept)], capsys)
    assert code == 0 and "r02 measured fastest of those timed (the pick was not), within the noise of r03" in \
        " ".join(stdout.split())


@pytest.mark.parametrize(("make", "words"), [
    (lambda d: None, "no such directory"),
    (lambda d: d.mkdir(), "no sweep.json"),
    (lambda d: (d.mkdir(), (d / "sweep.json").write_text("{")), "not valid JSON"),
    (lambda d: (d.mkdir(), (d / "sweep.json").write_text('{"moetune_sweep": 1, "plan": "p", "iters": 5, '
                                                           '"skip": 9, "candidates": []}')), "skip (9) must be below"),
    (lambda d: (d.mkdir(), (d / "sweep.json").write_text('{"a": 1}')), "not a moetune sweep manifest"),
])
def test_ingest_refuses_what_is_not_a_sweep_in_one_line(tmp_path, capsys, make, words):
    make(tmp_path / "d")
    code, _, err = run(["sweep", "ingest", str(tmp_path / "d")], capsys)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1


def test_a_result_megatron_refuses_is_named_and_nothing_is_written(plan_file, tmp_path, capsys):
    """A plan edited by hand into knobs Megatron-Core refuses (delayed wgrad without EP overlap): emit's rule errors,
    exit 1, named by the result, and no candidate folder written."""
    data = json.loads(plan_file.read_text())
    data["results"][1]["knobs"].update(delay_wgrad=True, ep_overlap=False)
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    code, _, err = run(["sweep", "write", str(edited), "--out", str(tmp_path / "s"), "--top", "2"], capsys)
    assert code == 1 and err.startswith("error: result 2:") and "rule error" in err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(("edit", "words"), [
    (lambda r: r.update(time={}), "candidate r02: its result's time.tokens_per_s_per_gpu is None"),
    (lambda r: r["memory"].update(peak_bytes="x"), "candidate r02: its result's memory.peak_bytes is 'x'"),
])
def test_a_result_without_its_predictions_is_one_line_and_nothing_is_written(plan_file, tmp_path, capsys, edit,
                                                                             words):
    """A hand edit that removes a prediction ingest compares (manifest.PREDICTED) had raised a traceback after the
    candidates' folders were written, leaving a sweep without its sweep.json."""
    data = json.loads(plan_file.read_text())
    edit(data["results"][1])
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    code, _, err = run(["sweep", "write", str(edited), "--out", str(tmp_path / "s"), "--top", "2"], capsys)
    assert code == 2 and err == f"error: {edited}: {words}, not a positive number; pass unmodified `moetune plan " \
                                "--json` output\n"
    assert not (tmp_path / "s").exists()


def test_set_may_add_to_the_recipe_but_not_change_the_plan(plan_file, tmp_path, capsys):
    code, _, err = run(["sweep", "write", str(plan_file), "--out", str(tmp_path / "a"), "--set",
                        "dataset.seq_length=8192"], capsys)
    assert code == 2 and "it changes dataset.seq_length, which the plan set to 4096" in err
    assert not (tmp_path / "a").exists()
    _sweep(plan_file, tmp_path / "b", capsys, "--top", "1", "--set", "dataset.data_path=/data/x")
    assert 'dataset.data_path="/data/x"' in (tmp_path / "b" / "r01" / "overrides.txt").read_text()


def test_the_first_iteration_is_never_timed_by_default(plan_file, tmp_path, capsys):
    _sweep(plan_file, tmp_path / "s", capsys, "--top", "1", "--iters", "2")
    assert json.loads((tmp_path / "s" / "sweep.json").read_text())["skip"] == 1


def test_write_notes_fewer_results_than_asked_and_a_candidate_that_will_not_fit(plan_file, tmp_path, capsys):
    code, out, _ = run(["sweep", "write", str(plan_file), "--out", str(tmp_path / "s"), "--top", "9", "--json"],
                       capsys)
    assert code == 0 and "the plan holds 5 result(s), so 5 of --top 9 are written" in json.loads(out)["notes"][0]
    code, out, _ = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "8", "--ep", "8", "--precision", "bf16",
                        "--json"], capsys)
    (tmp_path / "e.json").write_text(out)
    code, out, _ = run(["sweep", "write", str(tmp_path / "e.json"), "--out", str(tmp_path / "e"), "--json"], capsys)
    written = json.loads(out)
    assert code == 0 and written["candidates"][0]["fits"] is False and "predicted NOT to fit" in written["notes"][0]


def test_submit_passes_sbatch_args_and_is_checked_before_anything_is_written(plan_file, tmp_path, capsys,
                                                                            fake_sbatch, monkeypatch):
    monkeypatch.delenv("RECIPE", raising=False)
    monkeypatch.delenv("ENGINE", raising=False)
    code, _, err = run(["sweep", "write", str(plan_file), "--out", str(tmp_path / "a"), "--submit"], capsys)
    assert code == 2 and "set RECIPE" in err and not (tmp_path / "a").exists()
    monkeypatch.setenv("ENGINE", "megatron-lm")
    _sweep(plan_file, tmp_path / "b", capsys, "--top", "1", "--submit", "--sbatch-args", "--account=A --partition=P")
    assert fake_sbatch.read_text().split()[-3:] == ["--account=A", "--partition=P", "sbatch.sh"]
    code, _, err = run(["sweep", "write", str(plan_file), "--out", str(tmp_path / "c"), "--sbatch-args", "-A x"],
                       capsys)
    assert code == 2 and "add --submit" in err


@pytest.mark.parametrize(("content", "words"), [
    ("{}", "not a `moetune plan --json` or `estimate --json` output"),
    ("[1, 2]", "not a `moetune plan --json` or `estimate --json` output"),
    ('{"moetune_sweep": 1, "plan": "/p.json"}', "a sweep's manifest; pass the plan it was written from (/p.json)"),
])
def test_write_names_what_its_input_is_not(tmp_path, capsys, content, words):
    (tmp_path / "in.json").write_text(content)
    code, _, err = run(["sweep", "write", str(tmp_path / "in.json"), "--out", str(tmp_path / "s")], capsys)
    assert code == 2 and words in err and str(tmp_path / "in.json") in err


def test_ingest_of_a_file_says_to_pass_the_directory(plan_file, capsys):
    code, _, err = run(["sweep", "ingest", str(plan_file)], capsys)
    assert code == 2 and "is a file; pass the --out directory" in err


@pytest.mark.parametrize("setting", ["model.mtp_num_layers=1", "model.moe_expert_capacity_factor=1.0",
                                     "mixed_precision=bf16_mixed", "ddp.bucket_size=1000"])
def test_set_may_not_reach_what_the_prediction_reads(plan_file, tmp_path, capsys, setting):
    code, _, err = run(["sweep", "write", str(plan_file), "--out", str(tmp_path / "s"), "--set", setting], capsys)
    assert code == 2 and f"--set {setting}: the sweep measures the plan's own configurations" in err
    assert not (tmp_path / "s").exists()


def test_candidates_within_the_noise_keep_the_pick(swept, capsys):
    manifest = json.loads((swept / "sweep.json").read_text())
    step = GBS * SEQ / WORLD / manifest["candidates"][0]["result"]["time"]["tokens_per_s_per_gpu"]
    (swept / "r01" / "train-1.log").write_text(bridge_log([step] * 30))
    (swept / "r03" / "train-3.log").write_text(bridge_log([step * 0.995] * 30))  # 0.5% faster: within the noise
    code, stdout, _ = run(["sweep", "ingest", str(swept)], capsys)
    assert code == 0 and "the pick (r01) and r03 measured within the noise of each other: keep the pick" in stdout


def test_the_advice_to_run_a_candidate_follows_the_plan_file(plan_file, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(plan_file.read_text())
    out = tmp_path / "s"
    _sweep(plan, out, capsys, "--top", "3")
    predicted = json.loads((out / "sweep.json").read_text())["candidates"][2]["result"]["time"]["tokens_per_s_per_gpu"]
    fast = [GBS * SEQ / WORLD / predicted] * 30
    (out / "r01" / "train-1.log").write_text(bridge_log([s * 1.2 for s in fast]))
    (out / "r03" / "train-3.log").write_text(bridge_log(fast))
    assert f"run it with `moetune emit {plan} --rank 3`" in run(["sweep", "ingest", str(out)], capsys)[1]
    plan.write_text(plan.read_text().replace('"micro_batch_size": 1', '"micro_batch_size": 2'))  # planned again
    assert "no longer holds the result it ran" in run(["sweep", "ingest", str(out)], capsys)[1]


def test_ingest_and_report_do_not_write_over_their_inputs(plan_file, swept, capsys):
    for args in (["sweep", "ingest", str(swept), "--write", str(swept / "sweep.json")],
                 ["sweep", "ingest", str(swept), "--write", str(plan_file)],
                 ["report", str(plan_file), "--out", str(plan_file)],
                 ["report", str(plan_file), "--out", str(swept / "sweep.json"), "--sweep", str(swept)]):
        code, _, err = run(args, capsys)
        assert code == 2 and "is one of this command's inputs" in err, args
    assert json.loads((swept / "sweep.json").read_text())["moetune_sweep"] == 1


def test_a_set_that_raises_a_warning_is_named_per_candidate(plan_file, tmp_path, capsys):
    """A plan's own candidates write without a warning; --set env.CUDA_DEVICE_MAX_CONNECTIONS=1 is a sweep's to give
    (the cluster's variables), yet it serializes EP overlap's second stream (rule env.ep_overlap_connections), so
    each candidate that overlaps is named with it, where it had been written in silence."""
    plain = _sweep(plan_file, tmp_path / "plain", capsys, "--top", "2")
    assert "warning(s)" not in plain
    stdout = _sweep(plan_file, tmp_path / "one", capsys, "--top", "2", "--set", "env.CUDA_DEVICE_MAX_CONNECTIONS=1")
    overlapped = [r["knobs"]["ep_overlap"] for r in json.loads(plan_file.read_text())["results"][:2]]
    assert any(overlapped)
    for folder, overlap in zip(("r01", "r02"), overlapped, strict=True):
        named = f"{folder}: the config raises 1 warning(s): env.ep_overlap_connections" in " ".join(stdout.split())
        assert named == overlap


def test_ingest_says_it_sets_aside_the_plans_efficiency_file(tmp_path, capsys):
    """A plan made under --efficiency: the refit starts from the shipped constants (as calibrate --runs does), so the
    file it writes holds the refit alone; ingest says so, where it had dropped that file's constants in silence."""
    eff = tmp_path / "mine.toml"
    eff.write_text("[h100]\ngemm_eff = 0.35\n")
    code, out, err = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", str(WORLD), "--gbs", str(GBS), "--top",
                          "2", "--efficiency", str(eff), "--json"], capsys)
    assert code == 0, err
    plan = tmp_path / "plan.json"
    plan.write_text(out)
    swept = tmp_path / "sweep"
    _sweep(plan, swept, capsys, "--top", "1", "--iters", "30")
    predicted = json.loads((swept / "sweep.json").read_text())["candidates"][0]["result"]["time"]
    (swept / "r01" / "train-1.log").write_text(bridge_log([GBS * SEQ / WORLD / predicted["tokens_per_s_per_gpu"]] * 30))
    code, stdout, err = run(["sweep", "ingest", str(swept), "--write", str(tmp_path / "out.toml")], capsys)
    assert code == 0, err
    said = " ".join(stdout.split())
    assert f"the plan was made under --efficiency {eff}" in said and "holds the refit alone" in said
