"""Functions and loops run as bash runs them (configio/shell_loops.py): a function where it is called, a `for` over
words moetune can expand, a `while` whose test it decides, with `break`, `continue`, `return`, `local`, and an `exit`
on the way ending the read as it would outside them."""

from pathlib import Path

import pytest

from moetune.configio import load_config
from moetune.configio.shell import launch_words
from moetune.errors import MoetuneError

GPTOSS = Path(__file__).resolve().parent / "fixtures" / "mlm_gptoss_02_train.sh"  # Megatron-LM examples/gptoss


def _words(text: str, args: tuple[str, ...] = ()) -> list[str]:
    return launch_words(text, "t.sh", {}, list(args))


def test_a_function_runs_where_it_is_called_with_its_own_arguments_and_locals():
    # the Megatron-MoE-ModelZoo's runtime.conf: set_model_configs exports TP, PP, EP ... for the model it is given
    script = ('m=outer\nset_cfg() {\n  local m=$1\n  if [ "$m" = big ]; then export TP=8; else export TP=2; fi\n'
              '}\nset_cfg big\npython t.py --tp $TP --m $m --first $1')
    assert _words(script, ("a1",))[-6:] == ["--tp", "8", "--m", "outer", "--first", "a1"]
    assert "TP=8" in _words(script, ("a1",))  # exported inside the function, seen by the launch


def test_return_ends_the_function_and_the_caller_goes_on():
    script = "f() {\n  TP=2\n  return 0\n  TP=4\n}\nf\nTP2=$TP\npython t.py --tp $TP2"
    assert _words(script)[-1] == "2"


def test_a_usage_function_that_exits_stops_the_read_with_the_way_past():
    script = ('usage() {\n  echo "usage: $0 NODES TP"\n  exit 1\n}\nif [ $# -lt 2 ]; then\n  usage\nfi\n'
              "python t.py --tensor-model-parallel-size $2")
    with pytest.raises(MoetuneError, match=r"t.sh line 3: bash ends the script here \(exit 1\), after it echoes "
                                           r"'usage: t.sh NODES TP', .*--script-args") as err:
        _words(script)
    assert "\n" not in str(err.value)
    assert _words(script, ("1", "4"))[-1] == "4"


def test_a_for_loop_runs_once_a_word_and_builds_what_the_launch_reads():
    script = "ARGS=()\nfor f in bf16 use-flash-attn; do\n  ARGS+=(--$f)\ndone\npython t.py ${ARGS[@]}"
    assert _words(script)[-2:] == ["--bf16", "--use-flash-attn"]
    over_args = "for a; do\n  [ \"$a\" = --fp8 ] && P=fp8\ndone\npython t.py --p $P"
    assert _words(over_args, ("x", "--fp8"))[-1] == "fp8"  # `for NAME` alone runs over "$@"


def test_break_and_continue_leave_or_skip_as_bash_does():
    script = ("N=0\nfor i in 1 2 3 4; do\n  if [ $i = 2 ]; then continue; fi\n  if [ $i = 4 ]; then break; fi\n"
              "  N=$((N + i))\ndone\npython t.py --n $N")
    assert _words(script)[-1] == "4"  # 1 + 3
    nested = "for a in 1 2; do\n  for b in 1 2; do\n    X=$a$b\n    break 2\n  done\ndone\npython t.py --x $X"
    assert _words(nested)[-1] == "11"


def test_an_exit_inside_a_loop_on_the_path_bash_takes_ends_the_read():
    script = 'for v in DATA; do\n  if [ -z "${!v}" ]; then echo "$v unset"; exit 1; fi\ndone\npython t.py --k'
    with pytest.raises(MoetuneError, match=r"line 2: bash ends the script here \(exit 1\)"):
        _words(script.replace("${!v}", "$DATA"))
    assert launch_words(script.replace("${!v}", "$DATA"), "t.sh", {"DATA": "/d"})[-1] == "--k"


def test_megatron_lm_gptoss_example_reads_the_options_it_is_given():
    # examples/gptoss/02_train.sh parses --tokenizer / --data ... in `while [[ $# -gt 0 ]]; do case $1 in`
    words = launch_words(GPTOSS.read_text(), str(GPTOSS), {}, ["--tokenizer", "/tok", "--data", "/d/text"])
    assert words[words.index("--tokenizer-model") + 1] == "/tok" and "--mock-data" not in words
    assert "--mock-data" in launch_words(GPTOSS.read_text(), str(GPTOSS), {})  # no options: its MOCK defaults
    with pytest.raises(MoetuneError, match=r"bash ends the script here \(exit 1\), after it echoes 'Unknown option: "
                                           r"--tp'"):
        load_config([GPTOSS], gpu="h100", gpus=8, script_args="--tp 2")
    with pytest.raises(MoetuneError, match=r"bash ends the script here \(exit 0\), after it echoes 'Usage: "):
        load_config([GPTOSS], gpu="h100", gpus=8, script_args="--help")


def test_a_loop_that_would_start_the_training_is_not_run():
    with pytest.raises(MoetuneError, match="runs inside a 'for'"):
        _words("for EP in 8 16; do\n  python t.py --expert-model-parallel-size $EP\ndone")
