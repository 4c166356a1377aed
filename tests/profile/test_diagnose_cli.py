"""`moetune diagnose` as a user runs it: the JSON contract and the readable report."""

import json
import re

import pytest

from moetune.cli.main import main
from moetune.profile import diagnose, trace_json
from moetune.profile.synthetic import deepep_rank_wait, write_trace

KEYS = {"ranks", "step_seconds", "breakdown", "idle", "exposed_communication_seconds", "dominant_wall", "evidence",
        "recommendations"}


def test_json_contract_on_a_real_trace(traces_dir, capsys):
    code = main(["diagnose", str(traces_dir / "a100_2rank_allreduce.json.gz"), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and KEYS <= data.keys()
    assert data["ranks"] == 1 and isinstance(data["step_seconds"], float)
    assert all(isinstance(v, float) for v in data["breakdown"].values())
    assert data["idle"]["seconds"] == pytest.approx(
        sum(v for k, v in data["idle"].items() if k not in ("seconds", "comm_kernel_wait")))
    assert data["dominant_wall"] == "host_overhead"
    for rec in data["recommendations"]:
        assert {"rule", "change", "why"} <= rec.keys() and all("=" in c for c in rec["change"])


def test_table_report(tmp_path, capsys):
    path = write_trace(deepep_rank_wait(), tmp_path / "rank0.json.gz")
    code = main(["diagnose", str(path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "Dominant wall: communication" in out and "deepep" in out and "model.moe_deepep_num_sms=32" in out


def _log_at(fixtures_dir, tmp_path, ms: float):
    """The Megatron-LM fixture log with every iteration timed `ms` (the synthetic traces' steps are milliseconds)."""
    text = (fixtures_dir / "megatron_lm_qwen3_30b_a3b.log").read_text()
    path = tmp_path / "run.log"
    path.write_text(re.sub(r"elapsed time per iteration \(ms\): [0-9.]+", f"elapsed time per iteration (ms): {ms}",
                           text))
    return path


def test_directory_and_log_together(traces_dir, fixtures_dir, tmp_path, capsys):
    # two of the 16 ranks the log's argument dump records (world_size 16)
    (tmp_path / "traces").mkdir()
    write_trace(deepep_rank_wait(rank=0, world_size=16), tmp_path / "traces" / "r0.json.gz")
    write_trace(deepep_rank_wait(rank=1, world_size=16), tmp_path / "traces" / "r1.json.gz")
    code = main(["diagnose", str(tmp_path / "traces"), "--log", str(_log_at(fixtures_dir, tmp_path, 7.0)), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["ranks"] == 2 and len(data["per_rank"]) == 2
    assert data["log"]["iterations_logged"] == 8
    # the log's argument dump tailors the advice: it names the experts, so MoE advice needs no --config
    assert data["facts"]["moe"] is True and data["facts"]["config.model.num_moe_experts"] == 128


def test_a_directory_passes_over_json_that_is_not_a_trace(tmp_path, capsys):
    """A plan.json saved beside the traces is not a rank (it had failed the whole run as "has no trace events"): the
    directory's traces are read and one note names what was passed over; named on its own, the file stays an error,
    and a directory of nothing but such files is one error line."""
    traces = tmp_path / "traces"
    traces.mkdir()
    write_trace(deepep_rank_wait(rank=0, world_size=2), traces / "r0.json.gz")
    write_trace(deepep_rank_wait(rank=1, world_size=2), traces / "r1.json")
    (traces / "plan.json").write_text(json.dumps({"model": "qwen3-30b-a3b", "results": []}))
    code = main(["diagnose", str(traces), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["ranks"] == 2
    skipped = [n for n in data["notes"] if "plan.json" in n]
    assert len(skipped) == 1 and "traceEvents" in skipped[0] and "r0" not in skipped[0]
    code = main(["diagnose", str(traces / "plan.json")])
    err = capsys.readouterr().err
    assert code == 2 and "plan.json" in err and err.count("\n") == 1 and "Traceback" not in err
    only = tmp_path / "plans"
    only.mkdir()
    (only / "plan.json").write_text("{}")
    code = main(["diagnose", str(only)])
    err = capsys.readouterr().err
    assert code == 2 and "no Kineto traces" in err and "plan.json" in err and err.count("\n") == 1


def test_a_broken_trace_in_a_directory_is_still_an_error(tmp_path, capsys):
    """Only JSON objects without traceEvents are passed over: a cut trace (not valid JSON) or an empty traceEvents
    list in a directory is named, not skipped."""
    for name, text in (("r1.json", '{"traceEvents": [{"ph": "X"'), ("r1.json", '{"traceEvents": []}')):
        traces = tmp_path / f"t{len(text)}"
        traces.mkdir()
        write_trace(deepep_rank_wait(rank=0, world_size=2), traces / "r0.json")
        (traces / name).write_text(text)
        code = main(["diagnose", str(traces)])
        err = capsys.readouterr().err
        assert code == 2 and "r1.json" in err, err


def test_a_log_of_another_run_than_the_traces_is_refused(fixtures_dir, tmp_path, capsys):
    """A log whose iterations take more than 3x the traces' step (41 s against 6.6 ms) is another run's."""
    (tmp_path / "traces").mkdir()
    write_trace(deepep_rank_wait(rank=0, world_size=16), tmp_path / "traces" / "r0.json.gz")
    code = main(["diagnose", str(tmp_path / "traces"), "--log",
                 str(fixtures_dir / "megatron_lm_qwen3_30b_a3b.log")])
    err = capsys.readouterr().err
    assert code == 2 and "x the traces'" in err and "one run" in err and "Traceback" not in err


def test_stdlib_json_fallback_matches_ijson(tmp_path, monkeypatch):
    path = write_trace(deepep_rank_wait(), tmp_path / "rank0.json")
    streamed = diagnose([path]).to_dict()
    monkeypatch.setattr(trace_json, "ijson", None)
    loaded = diagnose([path]).to_dict()
    assert loaded["breakdown"] == streamed["breakdown"] and loaded["idle"] == streamed["idle"]


@pytest.mark.parametrize("sets, param_gather", [
    ((), True),  # Adam's recipe runs the distributed optimizer: the parameter all-gather overlaps too
    (("optimizer.optimizer=muon",), False),  # Muon's leaves it off: parameter-gather overlap would be refused
    (("ddp.use_distributed_optimizer=false",), True),  # the optimizer's switch, left to Adam's recipe, turns both on
    (("ddp.use_distributed_optimizer=false", "optimizer.use_distributed_optimizer=false"), False),
])
def test_dp_overlap_advice_reads_the_optimizer_as_the_run_syncs_it(traces_dir, capsys, sets, param_gather):
    """The advice asks the distributed optimizer as Bridge syncs its two switches (configio/finalize.py): a Muon
    config that set neither had been told to overlap the parameter all-gather it does not run."""
    args = ["diagnose", str(traces_dir / "a100_16rank_sendrecv_rank0.json.gz"), "--gpu", "a100", "--gpus", "16",
            "--set", "model.num_moe_experts=8", "--json"]
    assert main(args + [a for s in sets for a in ("--set", s)]) == 0
    advice = {r["rule"]: r for r in json.loads(capsys.readouterr().out)["recommendations"]}
    assert ("ddp.overlap_param_gather=true" in advice["comm.dp_overlap"]["change"]) is param_gather


def test_a_megatron_lm_launch_is_told_its_changes_as_arguments(tmp_path, capsys):
    """diagnose of a run given as Megatron-LM arguments had listed its next changes as Megatron Bridge overrides
    ('comm_overlap.overlap_moe_expert_parallel_comm=true'), which such a launch cannot set."""
    path = write_trace(deepep_rank_wait(), tmp_path / "rank0.json.gz")
    launch = ("--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep --expert-model-parallel-size 8 "
              "--bf16")
    code = main(["diagnose", str(path), "--mlm-args", launch])
    out = capsys.readouterr().out
    assert code == 0 and "Next changes (Megatron-LM arguments)" in out and "--moe-deepep-num-sms 32" in out
    assert "--overlap-moe-expert-parallel-comm; drop --moe-shared-expert-overlap" in out and "comm_overlap." not in out


def test_a_config_that_contradicts_the_logs_argument_dump_is_refused(fixtures_dir, capsys):
    """The log's argument dump is what ran (EP 16, alltoall); --mlm-args saying EP 8 and DeepEP had tailored the advice
    to them in silence (with --model it was already refused). Agreeing with the dump, or saying what it does not,
    reads as before."""
    log = str(fixtures_dir / "megatron_lm_qwen3_30b_a3b.log")
    wrong = "--expert-model-parallel-size 8 --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep"
    assert main(["diagnose", "--log", log, "--gpu", "h100", "--mlm-args", wrong]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "contradicts the argument dump" in err and "--expert-model-parallel-size 8 (the log ran 16)" in err
    assert main(["diagnose", "--log", log, "--gpu", "h100", "--mlm-args", "--expert-model-parallel-size 16"]) == 0


def test_a_logs_argument_dump_is_the_runs_config_for_model(fixtures_dir, tmp_path, capsys):
    """A Megatron-LM log's argument dump holds the layout, the knobs and the world size (validate_args' world_size):
    diagnose --model had asked for --config and then --gpus beside it. --gpus that contradicts the dump is named as
    the flag (it had read as the log timing 'another job'), and the advice is said in Megatron-LM arguments."""
    text = (fixtures_dir / "megatron_lm_qwen3_30b_a3b.log").read_text()
    log = tmp_path / "run.log"
    log.write_text(text.replace("  global_batch_size ..", "  bf16 .............. True\n  global_batch_size ..", 1))
    args = ["diagnose", "--log", str(log), "--model", "qwen3-30b-a3b", "--gpu", "h100"]
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["world_size"] == 16 and out["comparison"]["step_seconds"]["measured"] > 0
    assert main(args + ["--gpus", "32"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--gpus 32 (the log ran 16)" in err and "another job" not in err


def test_model_takes_the_gpu_count_the_traces_record(traces_dir, capsys):
    """The 2-rank A100 trace records world size 2: diagnose --model needs no --gpus beside it (it had asked for one),
    and the prediction is for 2 GPUs."""
    trace = str(traces_dir / "a100_2rank_allreduce.json.gz")
    args = ["diagnose", trace, "--model", "qwen3-30b-a3b", "--gpu", "a100", "--json", "--mlm-args",
            "--bf16 --expert-model-parallel-size 2 --global-batch-size 8 --micro-batch-size 1 --seq-length 4096"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["world_size"] == 2 and out["comparison"]["available"]


@pytest.mark.parametrize(("domain", "nvl72"), [(72, True), (8, False)])
def test_a_log_on_a_rack_scale_cluster_file_reads_as_nvl72(fixtures_dir, tmp_path, capsys, domain, nvl72):
    """The platform of a log alone is --gpu's as the planner reads it (specs/platform.py): B200s in a cluster file's
    72-GPU NVLink domain are the seeds' NVL72 row, where diagnose had matched GB200/GB300 names only."""
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(f'gpu = "b200"\nnvlink_domain = {domain}\n')
    log = str(fixtures_dir / "megatron_lm_qwen3_30b_a3b.log")
    assert main(["diagnose", "--log", log, "--gpu", str(cluster), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["facts"]["gpu.nvl72"] is nvl72
