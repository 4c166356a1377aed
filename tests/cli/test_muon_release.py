"""Muon on a release that lacks it: plan, emit, check and estimate --megatron-core / --megatron-bridge refuse or flag
it. Facts: Megatron-LM megatron/training/arguments.py --optimizer takes adam and sgd alone at core_v0.15.0:2197-2199
and adds muon and dist_muon at core_v0.16.0:2056-2058; Megatron Bridge routes them to get_megatron_muon_optimizer
from v0.3.0 (training/optim.py:22 @v0.3.0, absent @v0.2.2), so 0.2.x (a 0.16.0rc0 pin) runs no Muon."""

import json

import pytest
from cli_run import run

PLAN = ["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--seq", "4096", "--gbs", "256",
        "--fix", "optimizer=muon"]


@pytest.mark.parametrize(("option", "lacks"), [
    (["--megatron-core", "0.15"], "Megatron-Core 0.15 lacks: optimizer.optimizer=dist_muon (Megatron-Core has it "
                                  "from 0.16 on)"),
    (["--megatron-bridge", "0.2.2"], "lacks: optimizer.optimizer=dist_muon (Megatron Bridge has it from 0.3.0 on)"),
])
def test_plan_refuses_a_muon_pin_on_a_release_without_muon(capsys, option, lacks):
    """One line naming the pin's value alone: the grid's HybridEP and router-graph sets lack more on 0.15, but
    dist_muon is what every set lacks (release_fit._said)."""
    code, _, err = run([*PLAN, *option], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and lacks in err and "Traceback" not in err
    assert "moe_flex_dispatcher_backend" not in err


@pytest.mark.parametrize("option", [["--megatron-core", "0.16"], ["--megatron-bridge", "0.3.0"]])
def test_plan_runs_muon_from_the_first_release_with_it(capsys, option):
    code, out, _ = run([*PLAN, *option, "--top", "1", "--json"], capsys)
    assert code == 0 and json.loads(out)["results"]


def test_emit_refuses_a_muon_plan_for_a_release_without_muon(tmp_path, capsys):
    """A plan searched with no release named (Muon's layer-wise dist_muon) emitted for 0.15: refused in one line
    (it had written --optimizer dist_muon, which 0.15's parser refuses); for 0.16 it writes it."""
    code, out, _ = run([*PLAN, "--top", "1", "--json"], capsys)
    assert code == 0
    saved = tmp_path / "plan.json"
    saved.write_text(out)
    code, _, err = run(["emit", str(saved), "--megatron-core", "0.15", "--out", str(tmp_path / "old")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "optimizer.optimizer=dist_muon (Megatron-Core has it from 0.16 on)" in err
    assert not (tmp_path / "old").exists()
    code, _, _ = run(["emit", str(saved), "--megatron-core", "0.16", "--out", str(tmp_path / "new")], capsys)
    args = (tmp_path / "new" / "megatron_lm_args.txt").read_text().split()
    assert code == 0 and args[args.index("--optimizer") + 1] == "dist_muon"


def _errors(args, capsys):
    code, out, _ = run(["check", *args, "--json"], capsys)
    return code, {f["rule"]: f for f in json.loads(out)["findings"] if f["severity"] == "error"}


@pytest.mark.parametrize("optimizer", ["muon", "dist_muon"])
def test_check_flags_muon_before_0_16(capsys, optimizer):
    """Said once, by the rule, which names the fix: it covers the release table's optimizer.optimizer=muon and
    =dist_muon rows (rules.yaml covers), which check.not_in_release had said beside it."""
    code, errors = _errors(["--mlm-args", f"--optimizer {optimizer}", "--megatron-core", "0.15"], capsys)
    assert code == 1 and set(errors) == {"optimizer.muon_needs_mcore_016"}
    assert f"optimizer {optimizer}: this release (Megatron-Core before 0.16) has no Muon" in \
        errors["optimizer.muon_needs_mcore_016"]["message"]
    assert errors["optimizer.muon_needs_mcore_016"]["fix"]["optimizer.optimizer"] == "adam"
    assert _errors(["--mlm-args", f"--optimizer {optimizer}", "--megatron-core", "0.16"], capsys) == (0, {})


def test_check_flags_muon_on_bridge_0_2_by_the_release_table(capsys):
    """Bridge 0.2.2's pin is Megatron-Core 0.16.0rc0 (core_at_least counts it 0.16, so the rule is silent), but its
    setup_optimizer sends every name to get_megatron_optimizer, which raises for Muon: the table says so."""
    code, errors = _errors(["--set", "optimizer.optimizer=dist_muon", "--megatron-bridge", "0.2.2"], capsys)
    assert code == 1 and set(errors) == {"check.not_in_release"}
    assert _errors(["--set", "optimizer.optimizer=dist_muon", "--megatron-bridge", "0.3.0"], capsys) == (0, {})


ESTIMATE = ["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "8", "--pp", "2"]


def test_estimate_refuses_muon_before_0_16_naming_the_flags(capsys):
    code, _, err = run([*ESTIMATE, "--optimizer", "muon", "--megatron-core", "0.13"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "the knobs set what Megatron-Core 0.13 lacks: optimizer.optimizer=dist_muon" in err
    assert "change the flags that set them, or upgrade" in err
    assert run([*ESTIMATE, "--optimizer", "muon", "--megatron-core", "0.16"], capsys)[0] == 0

