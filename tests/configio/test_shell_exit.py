"""`exit` on the path bash takes ends the read there, with one line naming the script, the line and why; an `exit`
under a condition moetune cannot decide stops nothing (bash may not take it)."""

from pathlib import Path

import pytest

from moetune.configio import load_config
from moetune.configio.mlm import parse_mlm
from moetune.configio.shell import launch_words
from moetune.errors import MoetuneError

PAI_QWEN3 = Path(__file__).resolve().parent / "fixtures" / "pai_run_mcore_qwen3.sh"
# examples/qwen3/README.md's pretraining arguments (A3B, TP4 PP2 CP1 ETP1 EP4), as tests/configio/test_extra_args.py
PAI_ARGS = ("dlc A3B 1 8 1e-5 1e-6 128 128 bf16 4 2 1 1 4 true true true false sel false 100000 /d /d /ckpt 10000 100 "
            "/out").split()
PAI_ENV = {"WORLD_SIZE": "4", "RANK": "0", "KUBERNETES_CONTAINER_RESOURCE_GPU": "8", "MASTER_ADDR": "h",
           "MASTER_PORT": "1"}
USAGE = 'if [ -z "$1" ]; then\n  echo "Usage: $0 <data-path>"\n  exit 1\nfi\npython t.py --data-path $1 --k\n'


def test_a_usage_exit_on_a_missing_argument_stops_with_the_way_past():
    with pytest.raises(MoetuneError, match=r"t.sh line 3: bash ends the script here \(exit 1\), after it echoes "
                                           r"'Usage: t.sh <data-path>', .*pass the script's arguments with "
                                           r"--script-args"):
        launch_words(USAGE, "t.sh", {})
    assert launch_words(USAGE, "t.sh", {}, ["/data"])[-3:] == ["--data-path", "/data", "--k"]
    one_line = 'if [ -z "$1" ]; then echo "Usage: $0 <data-path>"; exit 1; fi; python t.py --data-path $1 --k\n'
    with pytest.raises(MoetuneError, match=r"t.sh line 1: bash ends the script here \(exit 1\)"):
        launch_words(one_line, "t.sh", {})  # the launch after it on its line is no end of the script


@pytest.mark.parametrize(("script", "needle"), [
    # an environment variable the launcher must set (Megatron-LM's examples/multimodal/pretrain_mistral_clip.sh)
    ('if [[ -z $WORKSPACE ]]; then\n  echo "Please set WORKSPACE"\n  exit 1\nfi\npython t.py --k',
     r"line 3: .*echoes 'Please set WORKSPACE', .*set what the script tests as the launcher would$"),
    # an array's length, ${#GPUS[@]}, is no positional parameter: no --script-args hint
    ('GPUS=(0 1)\nN=${#GPUS[@]}\nif [[ -z $WORKSPACE ]]; then\n  echo "Please set WORKSPACE"\n  exit 1\nfi\n'
     'python t.py --k',
     r"line 5: .*set what the script tests as the launcher would$"),
    ("[ -z \"$TP\" ] && { echo 'TP?'; exit 2; }\npython t.py --k", r"line 1: .*\(exit 2\), after it echoes 'TP\?'"),
    ("[ -z \"$TP\" ] && echo 'TP?' && exit 2\npython t.py --k", r"line 1: .*\(exit 2\), after it echoes 'TP\?'"),
    ("case $MODE in\n  a) A=--x ;;\n  *) exit 3 ;;\nesac\npython t.py $A", r"line 3: .*\(exit 3\), before"),
])
def test_an_exit_bash_takes_stops_the_read(script, needle):
    with pytest.raises(MoetuneError, match=needle):
        launch_words(script, "t.sh", {"MODE": "b"})


@pytest.mark.parametrize("script", [
    'if [ -d "$CKPT" ]; then echo ok; else echo missing; exit 1; fi\npython t.py --k',  # a file test: undecided
    "mkdir -p out || { echo failed; exit 1; }\npython t.py --k",  # a command's status: undecided
    "nvidia-smi -L && exit 0\npython t.py --k",  # a command moetune does not run: its status undecided
    'false && exit 1\npython t.py --k',
    'bash -c "exit 1"\npython t.py --k',  # ends the child shell only
    '[ -z "$TP" ] && ( echo "no TP"; exit 1 )\npython t.py --k',  # a subshell: bash goes on (bash(1) "Compound")
    'if [ -z "$TP" ]; then\n  (exit 3)\nfi\npython t.py --k',
    'echo hi | exit 1\npython t.py --k',  # each command of a pipeline runs in a child shell
    '{ echo "no TP"; exit 1; } | tee log\npython t.py --k',
    '[ -z "$TP" ] && { echo "no TP"; exit 1; } &\nwait\npython t.py --k',  # a background job
    "python t.py --k\nexit 0",  # after the launch
])
def test_an_exit_bash_may_not_take_stops_nothing(script):
    assert launch_words(script, "t.sh", {})[-1] == "--k"


def test_an_exit_that_ends_the_script_where_its_end_would_reads_what_ran():
    # Megatron-LM's sc21 run_figure_*.sh end in `exit 0` after their sbatch: read as the end of the script
    assert launch_words("sbatch run.sbatch\nexit 0\n", "t.sh", {}) == ["sbatch", "run.sbatch", "exit", "0"]


def test_pai_uneven_pipeline_split_exit_names_its_message():
    # MP_PP0_LAYERS=5 at PP 4: (48 - 5) % 3 != 0, and the script echoes why before `exit -1`
    args = list(PAI_ARGS)
    args[10] = "4"
    with pytest.raises(MoetuneError, match=r"pai_run_mcore_qwen3.sh line 363: bash ends the script here \(exit -1\), "
                                           r"after it echoes 'With uneven pipelineing the left over layers must be "
                                           r"divisible by left over stages.'.*check the arguments given"):
        parse_mlm(PAI_QWEN3.read_text(), str(PAI_QWEN3), PAI_ENV | {"MP_PP0_LAYERS": "5"}, args)
    read = {a.key: a.value for a in parse_mlm(PAI_QWEN3.read_text(), str(PAI_QWEN3), PAI_ENV | {"MP_PP0_LAYERS": "6"},
                                              args)}
    assert read["model.pipeline_model_parallel_size"] == 4


def test_a_sourced_file_s_exit_ends_the_script_that_sources_it(tmp_path):
    (tmp_path / "conf.sh").write_text('if [ -z ${1} ]; then\n  echo "name the model"\n  exit 1\nfi\n')
    script = tmp_path / "run.sh"
    script.write_text('source "conf.sh"\ntorchrun pretrain_gpt.py --num-layers 2\n')
    with pytest.raises(MoetuneError, match=r"conf.sh line 3: .*'name the model'.*; pass the script's arguments"):
        load_config([script])
    assert load_config([script], script_args="m")["model.num_layers"] == 2


def test_a_sourced_file_s_return_ends_that_file_alone(tmp_path):
    # bash(1) "return": in a file run by `source`, it stops that file and the script that sources it goes on
    (tmp_path / "conf.sh").write_text('if [ -n "$1" ]; then\n  return 0\nfi\necho "name the model"\nexit 1\n')
    script = tmp_path / "run.sh"
    script.write_text('source "conf.sh"\ntorchrun pretrain_gpt.py --num-layers 2\n')
    assert load_config([script], script_args="m")["model.num_layers"] == 2
    with pytest.raises(MoetuneError, match=r"conf.sh line 5: .*'name the model'"):
        load_config([script])


def test_a_subshell_s_exit_does_not_pick_the_other_branch_of_an_undecided_if():
    # bash may take the `then` (its subshell's exit ends the subshell alone) and go on without A: no guess
    script = 'if [ -f "$CKPT" ]; then\n  (echo "no"; exit 1)\nelse\n  A=--x\nfi\npython t.py $A --k'
    with pytest.raises(MoetuneError, match="line 1: moetune cannot tell whether"):
        launch_words(script, "t.sh", {})
