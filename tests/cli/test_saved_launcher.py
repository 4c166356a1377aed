"""A saved result records its launcher ("launcher": bridge | megatron-lm), so what reads it back (explain --plan, check,
emit, diagnose --plan) words its fixes for the launch that runs it: a Megatron-LM launch's estimate, saved and
explained, had been told Megatron Bridge's config names ('model.moe_router_dtype=fp32'), which it cannot set."""

import contextlib
import io
import json

import pytest
from cli_run import run

from moetune.cli.main import main
from moetune.profile.synthetic import deepep_rank_wait, write_trace

ARGS = "--expert-model-parallel-size 8 --bf16 --tensor-model-parallel-size 2"
MLM_FIX, BRIDGE_FIX = "--moe-router-dtype fp32", "model.moe_router_dtype=fp32"


def _save(path, gpus: int, args: str):
    """`moetune estimate --mlm-args ... --json` of a Megatron-LM launch, as a user saves it."""
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", str(gpus), "--mlm-args", args,
                     "--json"]) == 0
    path.write_text(out.getvalue())
    return path


@pytest.fixture(scope="module")
def saved_mlm(tmp_path_factory):
    return _save(tmp_path_factory.mktemp("saved") / "mlm.json", 16, ARGS)


def _without(saved, tmp_path, *, counter: bool) -> str:
    """The saved result as an older moetune wrote it: no "launcher"; `counter` False: no FLOP counter either."""
    data = json.loads(saved.read_text())
    del data["launcher"]
    if not counter:
        del data["time"]["flops_convention"]
    path = tmp_path / "older.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_the_saved_json_records_the_launcher(saved_mlm, capsys):
    assert json.loads(saved_mlm.read_text())["launcher"] == "megatron-lm"
    code, out, _ = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "8", "--json"], capsys)
    assert json.loads(out)["launcher"] == "bridge"


@pytest.mark.parametrize("command", ["explain", "check"])
def test_a_saved_megatron_lm_estimate_read_back_gives_megatron_lm_fixes(command, saved_mlm, capsys):
    args = ["explain", "--plan", str(saved_mlm)] if command == "explain" else ["check", str(saved_mlm)]
    code, out, err = run(args, capsys)
    flat = " ".join(out.split())
    assert MLM_FIX in flat and BRIDGE_FIX not in flat and err == "", err


def test_emit_of_a_saved_megatron_lm_estimate_writes_it_as_megatron_lm_runs_it(saved_mlm, capsys):
    """bridge_config writes each plan field a Megatron-LM launch leaves out at Megatron-LM's value, so a recipe's
    (an MTP layer, a shared-expert overlap) cannot survive: the saved result had been emitted as a Bridge config's."""
    code, out, _ = run(["emit", str(saved_mlm), "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["config"]["cluster.launcher"] == "megatron-lm"
    assert "model.mtp_num_layers=null" in data["files"]["overrides.txt"]


def test_diagnose_plan_of_a_saved_megatron_lm_estimate_says_arguments(tmp_path, capsys):
    """diagnose --plan alone (no --config) had said the next changes as Bridge overrides for a Megatron-LM run."""
    trace = write_trace(deepep_rank_wait(), tmp_path / "rank0.json.gz")
    saved = _save(tmp_path / "mlm.json", 8, "--expert-model-parallel-size 8 --bf16 --moe-token-dispatcher-type flex "
                  "--moe-flex-dispatcher-backend deepep")
    code, out, _ = run(["diagnose", str(trace), "--plan", str(saved)], capsys)
    assert code == 0 and "Next changes (Megatron-LM arguments)" in out and "comm_overlap." not in out


def test_a_result_saved_before_the_key_reads_its_launcher_from_its_flop_counter(saved_mlm, tmp_path, capsys):
    """Only a launch read from Megatron-LM arguments counts FLOPs as Megatron-LM does (time.flops_convention), so a
    result saved before "launcher" was recorded still says which it was: no note needed."""
    code, out, err = run(["explain", "--plan", _without(saved_mlm, tmp_path, counter=True)], capsys)
    assert MLM_FIX in " ".join(out.split()) and err == ""


def test_a_result_that_records_neither_is_read_as_bridge_and_says_so_once(saved_mlm, tmp_path, capsys):
    path = _without(saved_mlm, tmp_path, counter=False)
    code, out, err = run(["explain", "--plan", path], capsys)
    assert BRIDGE_FIX in " ".join(out.split())
    assert err.count("\n") == 1 and "does not say which launcher" in err and f"--plan {path}" in err


def test_a_launcher_moetune_does_not_know_is_refused_in_one_line(saved_mlm, tmp_path, capsys):
    data = json.loads(saved_mlm.read_text())
    data["launcher"] = "nemo"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    code, out, err = run(["explain", "--plan", str(path)], capsys)
    assert code == 2 and err.count("\n") == 1 and "launcher is 'nemo'" in err and "Traceback" not in err
