"""emit says which release's names it writes. The audit: a plan emitted with no release named is written in the
newest names (Megatron Bridge main), which `moetune check --megatron-bridge 0.5.0` of it refuses (dataset.seq_length is
only a property there; 0.4.2 gave 5 errors), while neither the console, the files nor the suggested check said so."""

import json
import shlex

import pytest
from cli_run import run, saved

from moetune.emit import FILES

JOB = ["plan", "olmoe-1b-7b", "--gpu", "h100", "--gpus", "8", "--gbs", "64", "--top", "1"]
# megatron_names.csv's header: the commits its names were read at (docs/rules.md "Names")
BRIDGE_AT, MLM_AT = "067f987df03b", "d98e8a64ddf3"


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    return saved(tmp_path_factory.mktemp("rel") / "plan.json", JOB)


def _emit(plan_file, out_dir, capsys, *release) -> str:
    code, out, err = run(["emit", str(plan_file), *release, "--out", str(out_dir)], capsys)
    assert code == 0, err
    return " ".join(out.split())


def _headers(out_dir) -> dict[str, str]:
    """Each file's opening lines, as one line."""
    return {name: " ".join(" ".join((out_dir / name).read_text().splitlines()[:10]).split()) for name in FILES}


def test_with_none_named_the_newest_names_are_said_and_how_to_name_another(plan_file, tmp_path, capsys):
    out_dir = tmp_path / "run"
    said = _emit(plan_file, out_dir, capsys)
    assert f"written for Megatron Bridge and Megatron-LM main (names as of Megatron-Bridge @{BRIDGE_AT} and " \
           f"Megatron-LM @{MLM_AT}, newer than Megatron Bridge 0.6.0 and Megatron-Core 0.19)" in said
    assert "--megatron-bridge X.Y.Z (0.2.0 to 0.6.0)" in said and "--megatron-core X.Y (0.13 to main)" in said
    for name, head in _headers(out_dir).items():
        assert f"Megatron-Bridge @{BRIDGE_AT}" in head and "--megatron-bridge X.Y.Z" in head, name
    # why it matters: Bridge 0.5.0 has no dataset.seq_length field to take the newest names' override
    code, out, _ = run(["check", str(out_dir / "overrides.txt"), "--megatron-bridge", "0.5.0", "--json"], capsys)
    assert code == 1 and "check.not_in_release" in {f["rule"] for f in json.loads(out)["findings"]}


def test_a_named_release_is_said_everywhere_and_its_check_passes(plan_file, tmp_path, capsys):
    """Bridge v0.5.0 pins Megatron-LM d0b3b775498a, Megatron-Core 0.18.0 (data/bridge_pins.csv)."""
    out_dir = tmp_path / "run"
    said = _emit(plan_file, out_dir, capsys, "--megatron-bridge", "0.5.0")
    named = "Megatron Bridge 0.5.0 (Megatron-Core 0.18.0 at Megatron-LM d0b3b775498a) (--megatron-bridge 0.5.0)"
    assert f"written for {named}" in said
    for name, head in _headers(out_dir).items():
        assert f"Written for {named}" in head, name
    check = said.split("check the launch as it runs: ", 1)[1]
    words = shlex.split(check)
    assert words[-2:] == ["--megatron-bridge", "0.5.0"]
    for args in (words[1:], ["check", str(out_dir / "overrides.txt"), "--megatron-bridge", "0.5.0"]):
        code, out, err = run(args, capsys)
        assert code == 0 and "0 error(s)" in out, (args, err)


def test_json_says_it_too(plan_file, capsys):
    code, out, _ = run(["emit", str(plan_file), "--megatron-core", "0.17", "--json"], capsys)
    assert code == 0 and json.loads(out)["written_for"] == "Megatron-Core 0.17 (--megatron-core 0.17)"
