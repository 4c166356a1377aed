"""--script-args: a launch script's positional arguments from the command line, the same in every command that reads
config files (Pai-Megatron-Patch's run_mcore_*.sh take their layout as $1 .. $27)."""

import json
from pathlib import Path

import pytest
from cli_run import run

PAI_QWEN3 = Path(__file__).resolve().parents[1] / "configio" / "fixtures" / "pai_run_mcore_qwen3.sh"
# examples/qwen3/README.md's pretraining arguments, with a path holding a blank to show the shell's quoting
PAI_ARGS = ("dlc A3B 1 8 1e-5 1e-6 128 128 bf16 4 2 1 1 4 true true true false sel false 100000 '/mnt/my data' "
            "/d /ckpt 10000 100 /out")
PAI_ENV = {"WORLD_SIZE": "4", "RANK": "0", "KUBERNETES_CONTAINER_RESOURCE_GPU": "8", "MASTER_ADDR": "h",
           "MASTER_PORT": "1"}


@pytest.fixture(autouse=True)
def launcher_env(monkeypatch):
    for k, v in PAI_ENV.items():
        monkeypatch.setenv(k, v)


def test_check_reads_a_pai_script_with_its_arguments(capsys):
    code, out, _ = run(["check", str(PAI_QWEN3), "--gpu", "h100", "--script-args", PAI_ARGS, "--json"], capsys)
    config = json.loads(out)["config"]
    assert code == 0 and (config["model.tensor_model_parallel_size"], config["model.expert_model_parallel_size"]) \
        == (4, 4)
    assert config["model.num_layers"] == 48 and config["train.train_iters"] == 10000 // 8 // 128


def test_without_them_the_line_says_how_to_give_them(capsys):
    code, _, err = run(["check", str(PAI_QWEN3), "--gpu", "h100"], capsys)
    assert code == 2 and "`[ $1 = dsw ]`" in err and "--script-args" in err and len(err.strip().splitlines()) == 1


def test_an_exit_the_arguments_take_is_one_line(capsys, monkeypatch):
    # $11 PP=4 with MP_PP0_LAYERS=5: (48 - 5) % 3 != 0, Pai's uneven-split `exit -1` and the line it echoes before
    monkeypatch.setenv("MP_PP0_LAYERS", "5")
    args = PAI_ARGS.replace(" 4 2 ", " 4 4 ", 1)
    code, _, err = run(["check", str(PAI_QWEN3), "--gpu", "h100", "--script-args", args], capsys)
    assert code == 2 and "line 363: bash ends the script here (exit -1), after it echoes 'With uneven" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", [["check"], ["emit"], ["estimate", "qwen3-30b-a3b", "--config"],
                                     ["explain", "qwen3-30b-a3b", "--config"], ["diagnose", "--config"]])
def test_every_command_that_reads_a_launch_script_takes_them(capsys, command):
    # one wrong argument ($10, TP=four) shows the script got them all, in order
    args = PAI_ARGS.replace(" 4 ", " four ", 1)
    code, _, err = run([*command, str(PAI_QWEN3), "--gpu", "h100", "--script-args", args], capsys)
    assert code == 2 and "line 348:" in err and "[ four -gt 1 ]" in err


@pytest.mark.parametrize(("inputs", "needle"), [
    (["--set", "model.num_layers=2"], "--script-args: gives the arguments of one launch script (.sh), and the inputs "
                                      "hold none"),
    ([str(PAI_QWEN3), str(PAI_QWEN3)], "and the inputs hold"),
    ([str(PAI_QWEN3), "--script-args", "dlc 'A3B"], "no closing quotation"),
])
def test_bad_use_is_one_line(capsys, inputs, needle):
    extra = [] if "--script-args" in inputs else ["--script-args", "dlc"]
    code, _, err = run(["check", *inputs, *extra], capsys)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_estimate_with_script_args_and_no_config_is_refused(capsys):
    code, _, err = run(["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "8", "--script-args", "dlc"], capsys)
    assert code == 2 and "--script-args" in err and "inputs hold none" in err
