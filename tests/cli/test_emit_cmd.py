"""emit as a user runs it: the check line it ends with, and a hand-edited saved result refused by name."""

import json

import pytest
from cli_run import run

from moetune.cli.main import main


def test_emit_names_the_check_of_the_launch_as_it_runs(tmp_path):
    """emit --out ends with the check of env.sh beside the arguments (HybridEP's topology lives in env.sh): the job's
    GPU and count where the config names them, none where it does not, paths quoted for a shell."""
    import shlex

    from moetune.cli.emit_cmd import check_command

    out = tmp_path / "my run"
    line = check_command({"cluster.gpu": "b300", "cluster.num_gpus": 16}, out)
    assert shlex.split(line) == ["moetune", "check", str(out / "env.sh"), str(out / "megatron_lm_args.txt"),
                                 "--gpu", "b300", "--gpus", "16"]
    assert "--gpu" not in check_command({}, out) and "None" not in check_command({}, out)


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("adam_moments_bytes", 3, "must be 4 (FP32 Adam moments) or 2"),
    ("main_grads_fp32", "yes", "takes true or false"),
    ("routing", "random", "choose dropless or force-balance"),
])
def test_a_hand_edited_saved_knob_is_refused_by_name(field, value, needle, tmp_path, capsys):
    assert main(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    data["knobs"][field] = value
    path = tmp_path / "e.json"
    path.write_text(json.dumps(data))
    code, _, err = run(["emit", str(path)], capsys)
    assert code == 2 and needle in err and "Traceback" not in err


def test_a_saved_result_on_part_of_a_node_names_the_fix_emit_takes(tmp_path, capsys):
    """A 12-H100 estimate (12 over 8-GPU nodes) saved and emitted: the refusal had said 'change --gpus', which emit
    refuses for a saved result (priced for 12); the --set it names instead emits."""
    assert main(["estimate", "olmoe-1b-7b", "--gpu", "h100", "--gpus", "12", "--gbs", "96", "--json"]) == 0
    path = tmp_path / "e.json"
    path.write_text(capsys.readouterr().out)
    code, _, err = run(["emit", str(path)], capsys)
    assert code == 2 and "--set cluster.gpus_per_node=N" in err
    code, _, _ = run(["emit", str(path), "--gpus", "16"], capsys)
    assert code == 2
    code, out, _ = run(["emit", str(path), "--set", "cluster.gpus_per_node=4"], capsys)
    assert code == 0 and "--nodes=3" in out


def test_emit_names_the_warnings_a_set_brings(tmp_path, capsys):
    """emit writes a config that only warns, and says which rules warn: beside the files with --out, on stderr (not
    among the files on stdout) without it. A plan's own pick raises none."""
    plan = tmp_path / "plan.json"
    code, stdout, err = run(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "512", "--top", "1",
                             "--json"], capsys)
    assert code == 0, err
    plan.write_text(stdout)
    assert json.loads(stdout)["results"][0]["knobs"]["ep_overlap"]
    code, stdout, _ = run(["emit", str(plan), "--out", str(tmp_path / "plain")], capsys)
    assert code == 0 and "warning(s)" not in stdout
    one = ["--set", "env.CUDA_DEVICE_MAX_CONNECTIONS=1"]
    code, stdout, _ = run(["emit", str(plan), *one, "--out", str(tmp_path / "one")], capsys)
    assert code == 0 and "raises 1 warning(s): env.ep_overlap_connections" in " ".join(stdout.split())
    code, stdout, err = run(["emit", str(plan), *one], capsys)
    assert code == 0 and "env.ep_overlap_connections" in err and "warning(s)" not in stdout


@pytest.mark.parametrize("inputs", [["--set", "model.expert_model_parallel_size=8"],
                                    ["--mlm-args", "--tensor-model-parallel-size 2"]])
def test_a_rank_past_a_config_is_refused(inputs, capsys):
    """--rank picks among a saved plan's results; beside a config (one configuration) --rank 2 had been passed over
    and the config emitted as if it were the plan's second result."""
    code, out, err = run(["emit", *inputs, "--gpus", "8", "--rank", "2"], capsys)
    assert code == 2 and out == ""
    assert err == ("error: --rank 2: picks a result of a saved plan (`moetune plan --json`), and the inputs hold none; "
                   "drop --rank, or pass the plan\n")
    assert run(["emit", *inputs, "--gpus", "8", "--rank", "1"], capsys)[0] == 0  # the default, said or not
