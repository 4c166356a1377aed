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
