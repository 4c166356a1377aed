"""Force-balanced routing as a new user meets it: Megatron-Core routes on random router logits under
moe_router_force_load_balancing, "[Experimental] ... only for benchmark" (megatron/core/transformer/
transformer_config.py:812-814, moe/router.py:856-858 @core_v0.19.0). A plan made with --routing force-balance had been
emitted as a training launch with no word of it, and checked clean (audit: 0 errors, 0 warnings)."""

import json
import re

import pytest
from cli_run import run, saved

from moetune.emit import FILES

JOB = ["plan", "olmoe-1b-7b", "--gpu", "h100", "--gpus", "8", "--gbs", "64", "--top", "2", "--routing",
       "force-balance"]
RULE = "dispatcher.force_balance_not_for_training"


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    return saved(tmp_path_factory.mktemp("fb") / "plan.json", JOB)


def test_emit_refuses_it_in_one_line_and_writes_nothing(plan_file, tmp_path, capsys):
    for rank in ("1", "2"):
        code, out, err = run(["emit", str(plan_file), "--rank", rank, "--out", str(tmp_path / "run")], capsys)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert "random router logits" in err and "--benchmark" in err and "--routing dropless" in err
    assert not (tmp_path / "run").exists()


def test_a_config_of_ones_own_is_refused_too(capsys):
    """Megatron-LM's own flag, read as the Bridge field: the same run, the same refusal."""
    code, _, err = run(["emit", "--mlm-args", "--num-experts 8 --moe-router-topk 2 --bf16 "
                        "--moe-router-force-load-balancing", "--gpu", "h100", "--gpus", "8"], capsys)
    assert code == 2 and "--benchmark" in err and "Traceback" not in err


def test_with_benchmark_every_file_says_so_first(plan_file, tmp_path, capsys):
    out_dir = tmp_path / "run"
    code, out, err = run(["emit", str(plan_file), "--benchmark", "--out", str(out_dir)], capsys)
    text = " ".join(out.split())
    assert code == 0, err
    assert "benchmark launch: force-balanced routing runs on random router logits" in text
    assert "warning(s)" not in text  # the warning --benchmark answers is not repeated as a note
    for name in FILES:
        head = "\n".join((out_dir / name).read_text().splitlines()[:12])
        assert "moetune emit:" in head and "BENCHMARK launch" in head and "never train from them" in head, name
    assert "model.moe_router_force_load_balancing=true" in (out_dir / "overrides.txt").read_text().splitlines()
    assert "--moe-router-force-load-balancing" in (out_dir / "megatron_lm_args.txt").read_text().splitlines()
    # check of what was written still says it: a warning, with the fix a training run takes
    for name in ("overrides.txt", "megatron_lm_args.txt"):
        code, out, _ = run(["check", str(out_dir / name), "--gpu", "h100", "--gpus", "8", "--json"], capsys)
        found = {f["rule"]: f for f in json.loads(out)["findings"]}
        assert found[RULE]["severity"] == "warning"
        assert found[RULE]["fix"] == {"model.moe_router_force_load_balancing": False}


def test_the_fix_the_refusal_names_for_a_config_emits_a_training_launch(plan_file, capsys):
    code, out, err = run(["emit", str(plan_file), "--set", "model.moe_router_force_load_balancing=false"], capsys)
    assert code == 0, err
    assert "BENCHMARK" not in out and "model.moe_router_force_load_balancing=false" in out


def test_explain_says_it_once(plan_file, capsys):
    code, out, _ = run(["explain", "--plan", str(plan_file)], capsys)
    assert code == 0 and len(re.findall(RULE, out)) == 1
    assert "random router logits" in " ".join(out.split())


def test_a_sweep_writes_it_as_the_benchmark_it_is(plan_file, tmp_path, capsys):
    """sweep write's candidates are benchmarks: written as before, each file saying it is one, no warning note."""
    code, out, err = run(["sweep", "write", str(plan_file), "--out", str(tmp_path / "s"), "--top", "2"], capsys)
    assert code == 0, err
    assert "warning" not in out
    for folder in ("r01", "r02"):
        assert "BENCHMARK launch" in (tmp_path / "s" / folder / "overrides.txt").read_text()


def test_ingest_does_not_advise_training_on_it(plan_file, tmp_path, capsys):
    """The measured fastest of a force-balanced sweep: its advice had been `moetune emit PLAN --rank N`, a training
    launch emit now refuses; it says to plan the training run dropless instead."""
    from tests.cli.test_sweep_cmd import bridge_log

    out = tmp_path / "s"
    assert run(["sweep", "write", str(plan_file), "--out", str(out), "--top", "2"], capsys)[0] == 0
    second = json.loads((out / "sweep.json").read_text())["candidates"][1]["result"]["time"]["tokens_per_s_per_gpu"]
    step = 64 * 4096 / 8 / second  # GBS x sequence / GPUs / tokens a second a GPU
    (out / "r01" / "train-1.log").write_text(bridge_log([step * 1.2] * 30, gbs=64))
    (out / "r02" / "train-2.log").write_text(bridge_log([step] * 30, gbs=64))
    code, said, _ = run(["sweep", "ingest", str(out)], capsys)
    text = " ".join(said.split())
    assert code == 0 and "r02 measured fastest" in text, text
    assert "moetune emit" not in text and "plan again with --routing dropless" in text
