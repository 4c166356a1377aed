"""Launch scripts are read as bash runs them: Megatron-LM's own examples build their arguments in bash arrays,
append under `if`, and run the training script from a string inside an sbatch here-document."""

from pathlib import Path

import pytest

from moetune.configio import load_config
from moetune.configio.shell import launch_words
from moetune.errors import MoetuneError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MIXTRAL_REAL = FIXTURES / "mlm_train_mixtral_8x7b_distributed.sh"  # bash arrays, as Megatron-LM ships it
MIXTRAL_FLAT = FIXTURES / "mixtral_8x7b_megatron_lm.sh"  # the same launch with its arrays expanded by hand
FSDP = FIXTURES / "mlm_sbatch_mfsdp_deepseek_v3.sh"
MAMBA = FIXTURES / "mlm_mamba_train.sh"  # picks its model size in a `case`


def _words(text: str, env: dict | None = None) -> list[str]:
    return launch_words(text, "t.sh", env or {})


def test_megatron_lm_mixtral_example_reads_as_its_hand_expanded_launch():
    real = load_config([MIXTRAL_REAL], gpu="h100", gpus=32)
    flat = load_config([MIXTRAL_FLAT], gpu="h100", gpus=32)
    model = {k: v for k, v in flat.items() if k.split(".")[0] in ("model", "train", "ddp", "mixed_precision", "env")}
    assert model and {k: real.get(k) for k in model} == model


def test_fsdp_sbatch_example_reads_the_branch_its_defaults_take():
    config = load_config([FSDP], gpu="h100", gpus=64)
    # PRETRAIN_ARGS, then the USE_MEGATRON_FSDP=1 branch (its default) appends the Megatron FSDP flags; the line
    # runs from TRAINING_CMD under `bash -c` in the sbatch here-document
    assert config["ddp.use_megatron_fsdp"] is True
    assert config["ddp.data_parallel_sharding_strategy"] == "optim_grads_params"
    assert config["ddp.fsdp_double_buffer"] is True
    assert config["model.expert_model_parallel_size"] == 8 and config["train.micro_batch_size"] == 4
    assert config["model.moe_flex_dispatcher_backend"] == "hybridep"
    assert config["env.NCCL_IB_SL"] == "1"  # exported at the top


def test_mamba_example_reads_the_case_arm_its_model_scale_picks():
    config = load_config([MAMBA], gpu="h100", gpus=8)
    # MODEL_SCALE="800M": TENSOR_MODEL_PARALLEL_SIZE=1, HIDDEN_SIZE=1024, NUM_ATTENTION_HEADS=16, GLOBAL_BATCH_SIZE=32
    assert config["model.hidden_size"] == 1024 and config["model.num_attention_heads"] == 16
    assert config["model.tensor_model_parallel_size"] == 1 and config["train.global_batch_size"] == 32
    assert config["model.hybrid_layer_pattern"] == "M-M-M--M-*M-M-M-M--*M-M-M-M-*M--M-M-M-*M-M--M-M-"


def test_fsdp_sbatch_example_without_fsdp_takes_the_other_branch():
    words = launch_words(FSDP.read_text(), str(FSDP), {"USE_MEGATRON_FSDP": "0"})
    assert "--use-megatron-fsdp" not in words and "--overlap-grad-reduce" in words


@pytest.mark.parametrize(("script", "expected"), [
    # defaults, arrays, appends, elements holding spaces, integer arithmetic
    ('N=${N:-"2"}\nA=(--a $N)\nA+=(--b "x y")\npython t.py "${A[@]}" --c $((N*4))',
     ["--a", "2", "--b", "x y", "--c", "8"]),
    # an unquoted expansion splits at blanks; a quoted one does not
    ('X="--p 1"\npython t.py $X "$X"', ["--p", "1", "--p 1"]),
    # an unset variable keeps its text, for the flag reader to name it
    ("python t.py --tp ${TP}", ["--tp", "${TP}"]),
    # a default's own quotes keep it one word; defaults nest
    ('python t.py --a ${Z:-"q r"} --b ${X:-${Y:-7}}', ["--a", "q r", "--b", "7"]),
    # a test reads an unset variable as empty; `[[ ]]` matches globs
    ('if [ -n "$KEY" ]; then A=--x; elif [[ $M == gb* ]]; then A=--y; else A=--z; fi\npython t.py $A', ["--z"]),
    ('M=gb200\nif [[ $M == gb* ]]; then A=--y; fi\npython t.py $A', ["--y"]),
    ('[ "$M" = "" ] && A=--e || A=--f\npython t.py $A', ["--e"]),
    ('mkdir -p out || { echo failed; exit 1; }\npython t.py --k', ["--k"]),
    # redirections, pipes and comments are not arguments; echo names a .py without running it
    ('echo "running t.py"\npython t.py --k 1 2>&1 | tee log.txt  # a comment', ["--k", "1"]),
    # a condition moetune cannot decide around commands that set nothing it reads is passed over
    ('if [ ! -f "$S" ]; then\n  echo "t.py not found"; exit 1\nfi\npython t.py --k', ["--k"]),
    # a here-document that feeds cat is text, not script (its quote is never closed)
    ("cat <<EOF > notes.txt\ndon't\nEOF\npython t.py --k", ["--k"]),
    # a command substitution holding quotes inside double quotes is kept, not run
    ('mkdir -p "$(dirname "$P")"\npython t.py --save "$(dirname "$P")"', ["--save", '$(dirname "$P")']),
    # a here-string (`<<<`) is one word fed to the loop, not a here-document swallowing the lines after it
    # (Megatron-LM tests/functional_tests/shell_test_utils/_run_training.sh)
    ('while read -r l; do\n  X+=$l\ndone <<<"$S"\nif [ 1 = 1 ]; then A=--k; fi\npython t.py $A', ["--k"]),
    # `case` over a word the script knows takes the first arm that matches, nested alike
    # (Megatron-LM examples/mamba/train.sh picks its model size so)
    ('S=8B\ncase "$S" in\n  "800M")\n    TP=1\n    ;;\n  8B|16B) TP=4; case $TP in 4) PP=2 ;; *) PP=9 ;; esac\n'
     '    ;;\n  *) echo bad; exit 1 ;;\nesac\npython t.py --tp $TP --pp $PP', ["--tp", "4", "--pp", "2"]),
    ('case x in\n  (y) A=--y ;;\n  (x) A=--x ;;\nesac\npython t.py --k $A', ["--k", "--x"]),
    # clauses joined inside [[ ]] (&&, ||, !) and by -a/-o in [ ], -v, and an unset operand as 0 in a [[ ]]
    # comparison, as bash evaluates them (Megatron-LM examples/post_training/modelopt/finetune.sh tests CP so)
    ('if [[ -v CP && "$CP" != "1" ]]; then B=fused; else B=auto; fi\n'
     'if [ -n "$B" -a "$B" = auto ]; then C=yes; else C=no; fi\n'
     'if [[ $R -gt 1 && $(yq x) == true ]]; then K=2; else K=1; fi\n'
     'if [[ ! -v CP || $CP == 1 ]]; then D=d1; else D=d2; fi\npython t.py $B $C $K $D', ["auto", "yes", "1", "d1"]),
    ('CP=2\nif [[ -v CP && "$CP" != "1" ]]; then B=fused; else B=auto; fi\n'
     'if [[ ! -v CP || $CP == 1 ]]; then D=d1; else D=d2; fi\npython t.py $B $D', ["fused", "d2"]),
    # bash arithmetic: comparisons, the ternary, C division, octal/hex, logic and shifts (Pai-Megatron-Patch's
    # run_mcore_*.sh set TP_COMM_OVERLAP=$(( ($TP > 1) ? 1 : 0 ))); the values real bash prints
    ('TP=4; PP=8; L=61\nA=$(( ($TP > 1) ? 1 : 0 ))\nB=$(( ($L / $PP) % 3 ))\nF=$(( (L - 1) % (PP - 1) ))\n'
     'E=$(( -7 / 2 )),$(( -7 % 2 )),$(( 2**10 )),$(( 0x10 + 010 )),$(( TP >= 4 && PP < 8 || !0 )),$(( 1 << 3 ^ 1 ))\n'
     'python t.py $A $B $F $E', ["1", "1", "4", "-3,-1,1024,24,1,9"]),
    # `eval` runs its words, joined, as script: the line, its quotes and a newline inside the string as bash reads
    # them (Pai-Megatron-Patch's run_mcore_*.sh end in `eval ${run_cmd}`)
    ('O="--bf16"\nrun_cmd="torchrun --nproc_per_node 8 t.py\n ${O} --moe-layer-freq \'([1]*48)\'"\n'
     'echo ${run_cmd}\neval ${run_cmd}', ["--bf16", "--moe-layer-freq", "([1]*48)"]),
    # a lone unset variable the script sets on another path is dropped, as bash drops it; one it never sets, or
    # after a -flag, keeps its text for the flag reader to name
    ('if [ "$OFF" = 1 ]; then opt="--optimizer-cpu-offload"; fi\npython t.py --lr 1 ${opt} --tp ${TP} $X',
     ["--lr", "1", "--tp", "${TP}", "$X"]),
    # after a switch it is no value of the switch's: dropped too (Pai-Megatron-Patch's run_mcore_qwen3.sh with no
    # checkpoint to load: `${pr_options} ${load_option}`, --bf16 then a load_option its `if` left unset)
    ('P=none\nif [ $P != none ]; then load="--load $P"; fi\npython t.py --bf16 ${load} --lr 1',
     ["--bf16", "--lr", "1"]),
    # `find -name "*.py"` names no script to run: a glob, and find no launcher (Pai-Megatron-Patch's
    # run_mcore_moonlight.sh copies its checkpoint's *.py files so before `eval ${run_cmd}`)
    ('find -L $C -maxdepth 1 -type f -name "*.py" -print0 | xargs -0 cp -t $S\npython t.py --k', ["--k"]),
    # an undecidable `if` whose other branches all `exit`: a script that reaches its launch took the one left
    ('if [[ -f "$P" ]]; then A=--x; else echo missing; exit 1; fi\npython t.py $A', ["--x"]),
    ('if [ -f "$P" ]; then echo found; exit 0; fi\nA=--y\nif [ -d "$Q" ]; then A=--z; exit 0; fi\npython t.py $A',
     ["--y"]),
    # calling a function that sets nothing the launch reads changes nothing
    ('function log {\n  echo "$@"\n}\nlog hi\npython t.py --k', ["--k"]),
    # `export NAME=value` after `then` on the `if` line assigns, as it does on a line of its own
    ('if [ 1 = 1 ]; then export TP=8; fi\npython t.py --tp $TP', ["--tp", "8"]),
    # "${A[*]}" is one word; unquoted it splits (Megatron-Bridge examples/models/gpt_oss/slurm_pretrain.sh)
    ('A=(a "b c")\npython t.py "${A[*]}" ${A[*]}', ["a b c", "a", "b", "c"]),
    # a backslash-newline inside double quotes joins the lines, and `bash -lc` (options run together) runs its
    # string (Megatron-Bridge examples/models/deepseek_v4/slurm_pretrain.sh: CMD="... \\<newline> ...", then
    # `$SRUN_CMD bash -lc "...; $CMD"`)
    ('CMD="torchrun --nnodes=2 \\\n    t.py \\\n    --k 1"\nsrun -l bash -o pipefail -lc "\n  cd /w\n  $CMD\n"',
     ["--k", "1"]),
    # `let` assigns bash's integer arithmetic (megablocks-style launchers: let TOTAL_GPUs=$NGPUs*$NNodes); one it
    # cannot compute leaves the name unknown
    ('N=4; M=2\nlet T=$N*$M\nlet T+=1 "U = T / 2"\nlet "V == 1" W=$Q*$N\npython t.py $T $U $W',
     ["9", "4", "$(let-line-4)"]),
    # `(` inside an argument is text, as users write --moe-layer-freq
    ("python t.py --moe-layer-freq ([0]*3+[1]*5)", ["--moe-layer-freq", "([0]*3+[1]*5)"]),
])
def test_bash_forms(script, expected):
    words = _words(script)
    assert words[words.index("t.py") + 1:] == expected


def test_only_exported_variables_reach_the_launch():
    words = _words("export A=1\nB=2\nexport B2\nC=3 python t.py --k")
    assert words[:words.index("python")] == ["A=1", "C=3"]
    assert _words("if [ 1 = 1 ]; then export TP=8; fi\npython t.py")[0] == "TP=8"  # exported after `then` too


def test_a_script_run_with_flags_is_the_launch():
    # the Megatron-MoE-ModelZoo's best_practice/*/run_*.sh hand the flags to sbatch_benchmarking.sh; what follows
    # the run is not its arguments
    words = _words("export MODEL=DeepSeek-V3\nPR=mxfp8 PP=8 bash sbatch_benchmarking.sh \\\n  --mtp-num-layers 1\n"
                   "echo submitted")
    assert words == ["MODEL=DeepSeek-V3", "PR=mxfp8", "PP=8", "bash", "sbatch_benchmarking.sh", "--mtp-num-layers", "1"]


@pytest.mark.parametrize(("script", "needle"), [
    ("if grep -q x f; then ARGS+=(--bf16); fi\npython t.py ${ARGS[@]}", "line 1: moetune cannot tell whether"),
    ("for EP in 8 16; do\n  python t.py --expert-model-parallel-size $EP\ndone", "line 1: the training command runs "
                                                                                 "inside a 'for'"),
    ("case $(hostname) in\n  a*) TP=2 ;;\nesac\npython t.py --tp $TP", "line 1: moetune cannot tell which arm"),
    ("PP=8 bash run.sh --mtp-num-layers 1\nPP=4 bash run.sh --mtp-num-layers 1", r"line 2: a second run \(the first at "
                                                                                r"line 1\)"),
    ("for EP in 8 16; do\n  bash run.sh --expert-model-parallel-size $EP\ndone", "runs inside a 'for'"),
    # a file of flag variables for a launch script to splice in (Megatron-LM examples/post_training/modelopt/conf/)
    ('echo "Qwen3"\nMODEL_ARGS=" \\\n  --num-layers 48 \\\n"', "MODEL_ARGS reads as a launch script's shell variable"),
    # a function moetune cannot enter (calls deeper than configio/shell_loops.py MAX_CALLS) that sets variables is
    # not passed over in silence
    ("f() {\n  TP=2\n  f\n}\nf\npython t.py --tp $TP", r"line 3: calls f \(a function, line 1\)"),
    # an unset variable's text kept in another's value is not compared as text either (Pai-Megatron-Patch's
    # run_mcore_*.sh: ENV=$1, then `if [ $ENV = dsw ]`); the condition is shown as bash would test it
    ("ENV=$1\nif [ $ENV = dsw ]; then\n  A=1\nelif [ $ENV = dlc ]; then\n  A=2\nfi\npython t.py $A",
     r"line 2: moetune cannot tell whether `\[ \$1 = dsw \]` holds"),
    ("S=$1\ncase $S in\n  a*) TP=2 ;;\nesac\npython t.py --tp $TP", r"its word, '\$1', is a command's output or"),
    # a loop's launch is found in any of its statements: a string run under `bash -c`, a line after an echo
    ('for C in a b; do\n  CMD="python t.py --k $C"\n  srun bash -c "$CMD"\ndone', "runs inside a 'for'"),
    ('while [ -z "$DONE" ]; do\n  python t.py --k\n  DONE=1\ndone', "runs inside a 'while'"),
    # a command's output in a test is not compared as text
    ('if [ "$(hostname)" = n1 ]; then TP=2; fi\npython t.py --tp $TP', "line 1: moetune cannot tell whether"),
    ("python t.py --tp '2", "the ' opened here is never closed"),
    ("if [ 1 = 1 ]; then\npython t.py", "this 'if' lacks its"),
])
def test_scripts_moetune_cannot_read_are_one_line_errors(script, needle):
    with pytest.raises(MoetuneError, match=needle) as err:
        _words(script)
    assert "\n" not in str(err.value)


def test_scripts_a_launch_runs_or_sources_are_read_with_their_arguments(tmp_path):
    # Megatron-LM examples/post_training/modelopt: `TP=2 bash finetune.sh Qwen/Qwen3-30B-A3B` runs finetune.sh, which
    # finds its folder from $0, sources conf/arguments.sh, which sources conf/$1.sh for the model's MODEL_ARGS
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "m.sh").write_text('MODEL_ARGS="--num-layers 4 --hidden-size 64"\n')
    (tmp_path / "run.sh").write_text('CFG=$1\nDIR="$(dirname "$(readlink -f "$0")")"\nsource "$DIR/conf/$CFG.sh"\n'
                                     'torchrun --nproc_per_node=$# $DIR/t.py $MODEL_ARGS --tensor-model-parallel-size'
                                     ' $TP\n')
    (tmp_path / "setup.sh").write_text("if grep -q x /etc/hosts; then TP=8; fi\n")  # a child starting no *.py
    launch = tmp_path / "launch.sh"
    launch.write_text("export NCCL_IB_SL=1\nbash setup.sh\nTP=2 bash run.sh m\n")
    here = tmp_path.resolve()
    assert launch_words(launch.read_text(), str(launch), {}) == [
        "NCCL_IB_SL=1", "TP=2", "torchrun", "--nproc_per_node=1", f"{here}/t.py", "--num-layers", "4",
        "--hidden-size", "64", "--tensor-model-parallel-size", "2"]
    config = load_config([launch], gpu="h100", gpus=8)  # a .sh is a launch script, though it starts `TP=2 ...`
    assert config["model.num_layers"] == 4 and config["model.tensor_model_parallel_size"] == 2


def test_a_loop_that_parses_arguments_runs_only_when_given_some():
    # Megatron-LM examples/gptoss/02_train.sh parses its options in `while [[ $# -gt 0 ]]; do case $1 in ...`
    script = ("TP=1\nwhile [[ $# -gt 0 ]]; do\n  case $1 in\n    --tp) TP=\"$2\"; shift 2 ;;\n  esac\ndone\n"
              "python t.py --tensor-model-parallel-size $TP")
    assert launch_words(script, "t.sh", {})[-1] == "1"  # no arguments: the loop never runs
    assert launch_words(script, "t.sh", {}, ["--tp", "4"])[-1] == "4"  # run as bash runs it (tests/configio/
    # test_shell_loops.py); a test moetune cannot decide leaves what the loop sets unknown, not the old 1
    unknown = script.replace("[[ $# -gt 0 ]]", "read -r line")
    assert launch_words(unknown, "t.sh", {}, ["--tp", "4"])[-1] == "$(set-in-while-loop-line-2)"


def test_an_unset_variable_of_flags_is_named(tmp_path):
    # Megatron-LM examples/post_training/modelopt/finetune.sh run alone: MODEL_ARGS comes from the conf file its
    # launcher sources
    script = tmp_path / "finetune.sh"
    script.write_text("torchrun t.py ${MODEL_ARGS} --tensor-model-parallel-size 2\n")
    with pytest.raises(MoetuneError, match=r"got '\$\{MODEL_ARGS\}': MODEL_ARGS is not set") as err:
        load_config([script], gpu="h100", gpus=8)
    assert "\n" not in str(err.value)


def test_a_modelzoo_run_line_fills_its_yaml(tmp_path, monkeypatch):
    # best_practice/deepseek-v3/run_deepseek_v3_h100.sh hands TP, PP, EP ... to sbatch_benchmarking.sh, which fills
    # the model's YAML with them (envsubst) and appends the line's flags after its MODEL_ARGS
    from modelzoo_launch import H100_ENV, MODELZOO
    for name in H100_ENV:
        monkeypatch.delenv(name, raising=False)
    run = tmp_path / "run.sh"
    run.write_text(" ".join(f"{k}={v}" for k, v in H100_ENV.items()) + " PR=fp8 bash sbatch_benchmarking.sh "
                   "--mtp-num-layers 1 --pipeline-model-parallel-layout 'Et|(tt|)*30mL'\n")
    config = load_config([MODELZOO, run], gpu="h100", gpus=1024)  # the YAML first: the run's flags win, as appended
    assert config["model.tensor_model_parallel_size"] == 2 and config["model.expert_model_parallel_size"] == 64
    assert config["train.global_batch_size"] == 8192 and config["model.mtp_num_layers"] == 1
    assert config["model.pipeline_model_parallel_layout"] == "Et|(tt|)*30mL"



def test_a_sourced_file_that_is_not_here_is_named_on_stderr(tmp_path, capsys):
    # bash fails a `source` of a missing file ("No such file or directory") and runs on; moetune had passed over it in
    # silence, leaving the reader to wonder where MODEL_ARGS went
    script = tmp_path / "run.sh"
    script.write_text("source conf/missing.sh\n. ./env.sh || true\ntorchrun t.py --num-layers 2\n")
    assert launch_words(script.read_text(), str(script), {})[-2:] == ["--num-layers", "2"]
    err = capsys.readouterr().err.splitlines()
    assert err == [f"moetune: note: {script} line 1: sources conf/missing.sh, which is not here (nor beside the "
                   "script); what it would set is read as unset",
                   f"moetune: note: {script} line 2: sources ./env.sh, which is not here (nor beside the script); "
                   "what it would set is read as unset"]


@pytest.mark.parametrize(("script", "args", "last"), [
    # bash(1) shift: $1 is the second argument after it, "$@" the rest
    ('MODEL=$1\nshift\npython t.py --model $MODEL --layers "$@"', ["m", "2", "3"],
     ["--model", "m", "--layers", "2", "3"]),
    ('shift 2\npython t.py --layers $1 $#', ["a", "b", "4"], ["--layers", "4", "1"]),
    ('shift 3\npython t.py --layers $1', ["a", "b"], ["--layers", "a"]),  # past $#: nothing moves, status 1
    ('set -- 8 x\npython t.py --layers $1 $#', ["a"], ["--layers", "8", "2"]),  # bash(1) set --
    ('(shift)\npython t.py --layers $1', ["a", "b"], ["--layers", "a"]),  # a subshell's shift moves its own
])
def test_shift_and_set_move_the_positional_parameters(script, args, last):
    assert launch_words(script, "t.sh", {}, args)[-len(last):] == last
