"""plan's closing Next line recommends only commands that run: each one it gives in backquotes, run as written on the
plan it saved, exits 0."""

import re
import shlex

from cli_run import run

BASE = ["plan", "olmoe-1b-7b", "--gpu", "h100", "--top", "1"]


def _next_commands(job, tmp_path, capsys) -> tuple[str, list[str]]:
    """(the Next line, its commands) of JOB run in TMP_PATH, with the plan saved where the line says."""
    code, out, _ = run(job, capsys)
    line = " ".join(out.split()).split("Next: ", 1)[1]
    code_json, saved, _ = run([*job, "--json"], capsys)
    assert code == code_json == 0
    (tmp_path / "plan.json").write_text(saved)
    return line, re.findall(r"`([^`]+)`", line)


def _run_all(commands, capsys) -> None:
    for command in commands:
        if command.startswith("--json"):
            continue
        words = shlex.split(command)
        code, _, err = run(words[1:], capsys)
        assert words[0] == "moetune" and code == 0, (command, err)


def test_a_force_balanced_plan_is_emitted_as_a_benchmark(tmp_path, capsys, monkeypatch):
    """emit refuses force-balanced routing (random router logits) without --benchmark: the line had recommended the
    plain `moetune emit plan.json`, which now exits 2; it passes --benchmark and says what a training run plans. The
    pick's check says the same once."""
    monkeypatch.chdir(tmp_path)
    job = [*BASE, "--gpus", "8", "--gbs", "64", "--routing", "force-balance"]
    line, commands = _next_commands(job, tmp_path, capsys)
    emit = next(c for c in commands if c.startswith("moetune emit"))
    assert emit.endswith("--benchmark") and "--routing dropless" in line
    _run_all(commands, capsys)
    out = run(job, capsys)[1]
    assert out.count("Check on #1 warning dispatcher.force_balance_not_for_training") == 1


def test_a_dropless_plan_is_not_told_to_benchmark(tmp_path, capsys, monkeypatch):
    """The routing note under a dropless plan had ended 'published benchmark recipes run --routing force-balance',
    read as advice to train that way; it says what that routing is."""
    monkeypatch.chdir(tmp_path)
    job = [*BASE, "--gpus", "32", "--gbs", "256"]
    line, commands = _next_commands(job, tmp_path, capsys)
    assert "--benchmark" not in line and any(c.startswith("moetune emit") for c in commands)
    out = " ".join(run(job, capsys)[1].split())
    routing = out.split("Routing: ", 1)[1].split("Next: ", 1)[0]
    assert "run --routing force-balance" not in routing and "not a way to train" in routing


def test_a_plan_on_part_of_a_node_names_what_to_plan_to_launch(tmp_path, capsys, monkeypatch):
    """12 GPUs over 8-GPU nodes (the audit: Qwen3-30B-A3B on 12 H100): plan warns scale.partial_node, and its Next line
    had still recommended `moetune emit plan.json` and the check of its files, which emit refuses ('not a multiple of
    8 GPUs per node'). It recommends what runs, and names the whole-node counts to plan for a launch."""
    monkeypatch.chdir(tmp_path)
    job = [*BASE, "--gpus", "12", "--gbs", "96"]
    line, commands = _next_commands(job, tmp_path, capsys)
    assert not any(c.startswith(("moetune emit", "moetune check")) for c in commands), commands
    assert "refuses 12 GPUs over 8-GPU nodes" in line and "--gpus 8 or 16" in line
    _run_all(commands, capsys)
    code, _, err = run(["emit", "plan.json"], capsys)
    assert code == 2 and "not a multiple of 8 GPUs per node" in err  # what the line no longer recommends
    # the counts it names emit: 16 is two whole nodes
    code, out, _ = run([*BASE, "--gpus", "16", "--gbs", "96", "--json"], capsys)
    (tmp_path / "p16.json").write_text(out)
    assert run(["emit", "p16.json"], capsys)[0] == 0
