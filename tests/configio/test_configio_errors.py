"""Bad input gets one clear `error:` line and exit code 2 from `moetune check` (and `emit`)."""

import pytest

from moetune.cli.main import main

YAML_SYNTAX = "model:\n  tensor_model_parallel_size: 2\n   expert_model_parallel_size: 8\n"


def run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(("files", "args", "needle"), [
    ({"c.yaml": "model:\n  expert_model_paralel_size: 8\n"}, [], "did you mean model.expert_model_parallel_size"),
    ({"c.yaml": "modle:\n  tensor_model_parallel_size: 2\n"}, [], "unknown config section 'modle'"),
    ({"c.yaml": "model:\n  tensor_model_parallel_size: two\n"}, [], "expects an integer"),
    ({"c.yaml": "model:\n  moe_token_dispatcher_type: deepep\n"}, [], "must be one of allgather, alltoall, flex"),
    ({"c.yaml": YAML_SYNTAX}, [], "YAML syntax error at line 3"),
    ({"c.yaml": "- a\n- b\n"}, [], "expected a Megatron Bridge config"),
    ({"c.yaml": "mixed_precision: bf17_mixed\n"}, [], "unknown mixed_precision recipe"),
    ({"c.yaml": "model:\n  pipeline_model_parallel_layout: [[embedding, encoder], [decoder, loss]]\n"}, [],
     "unknown layer names ['encoder']"),
    ({"c.yaml": "model:\n  pipeline_model_parallel_layout: [embedding, decoder]\n"}, [], "a list of stages"),
    ({"c.json": "{\"config\": {\"model.tensor_model_parallel_size\": 2,}}"}, [],
     "c.json: not valid JSON (line 1, column 51: Expecting property name"),
    ({"c.txt": "this is prose, not a config\n"}, [], "cannot tell the format"),
    ({}, ["--set", "model.tensor_model_parallel_size=2", "--set", "model.tensor_model_parallel_size=4"],
     "contradictory overrides"),
    ({}, ["--set", "cluster.gpu=gb200", "--gpu", "h100"], "contradictory overrides"),
    ({}, ["--set", "model.overlap_moe_expert_parallel_comm=true",
          "--set", "comm_overlap.overlap_moe_expert_parallel_comm=false"], "contradictory overrides"),
    ({}, ["--set", "model.tensor_model_parallel_size"], "not key=value"),
    ({}, ["--set", "model.num_moe_experts=8", "--gpu", "tpu9"], "unknown GPU"),
    ({}, ["--mlm-args", "--no-such-flag 3"], "unknown Megatron-LM argument"),
    ({}, ["missing.yaml"], "no such file"),
    # a built-in model's name where a config goes (`moetune emit qwen3-30b-a3b`) says what to pass instead
    ({}, ["qwen3-30b-a3b"], r"no such file; qwen3-30b-a3b is a built-in model, not a config: pass the run's config"),
    ({}, [], "nothing to read"),
    # a second fuzz round: YAML a loader takes but no config is, and inputs with no configuration in them
    ({"c.yaml": "? [a, b]\n: 1\n"}, [], "is a list, not a name"),
    ({"c.yaml": "logger:\n  wandb_project: &a [*a]\nmodel:\n  tensor_model_parallel_size: 2\n"}, [],
     "an alias that holds itself"),
    ({"c.yaml": "".join(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}" if i else "1"] * 9) + "]\n" for i in range(10))},
     [], "expands to over 200,000 values"),
    ({"c.yaml": "model: " + "[" * 3000 + "]" * 3000 + "\n"}, [], "nests its values too deeply"),
    ({"c.json": "{\"config\": " + "[" * 100000 + "]" * 100000 + "}"}, [], "nests its values too deeply"),
    ({"c.yaml": "model:\n  tensor_model_parallel_size: ${train.tp}\n"}, [], "resolves only ${oc.env:NAME}"),
    ({"c.yaml": "model:\n  tensor_model_parallel_size: ${oc.env:MOETUNE_UNSET_VAR}\n"}, [],
     "MOETUNE_UNSET_VAR is not set"),
    # a launch script's argument variable (Megatron-LM's examples: TRAINING_ARGS="--flags ...") is no dotted override
    ({"train.sh": "#!/bin/bash\nTRAINING_ARGS=\"--micro-batch-size 1\"\n"}, [],
     "reads as a launch script's shell variable: pass its Megatron-LM arguments with --mlm-args"),
    ({}, ["--mlm-args", "tp=2"], "no Megatron-LM --flags"),
    ({}, ["--mlm-args", "# --tensor-model-parallel-size 2"], "no Megatron-LM --flags"),
    ({}, ["--mlm-args", "--num-layers 48 --num-layers-per-virtual-pipeline-stage 0 --pipeline-model-parallel-size 2"],
     "must be at least 1"),
    # Megatron-LM asserts the other VPP flag beside uneven first/last stages (audit: the error had asked for an integer)
    ({}, ["--mlm-args", "--num-layers 61 --pipeline-model-parallel-size 8 --decoder-first-pipeline-num-layers 5 "
          "--num-layers-per-virtual-pipeline-stage 2"], "use --num-virtual-stages-per-pipeline-rank"),
])
@pytest.mark.parametrize("command", ["check", "emit"])
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, files, args, needle, command):
    paths = []
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        paths.append(str(tmp_path / name))
    code, out, err = run([command, *paths, *args], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err
    assert "Traceback" not in err and out == ""


def test_a_json_result_read_as_arguments_says_format_names_the_input(tmp_path):
    """`emit PLAN.json --format mlm` had read the plan as Megatron-LM arguments ("no Megatron-LM --flags, only
    '{ candidates_evaluated: ...'"): --format is the input's format, and emit writes every output format."""
    from moetune.configio.load import read_file
    from moetune.errors import MoetuneError
    saved = tmp_path / "p.json"
    saved.write_text('{"candidates_evaluated": 1, "results": []}')
    for fmt in ("mlm", "overrides"):
        with pytest.raises(MoetuneError, match=r"says how to read the input, and this one is JSON"):
            read_file(saved, fmt)


@pytest.mark.parametrize("command", ["check", "emit"])
def test_a_folder_given_as_the_config_says_it_is_one(tmp_path, capsys, command):
    """`check run/` (emit's --out folder) had said 'run: no such file' of a folder that is there: the line names a
    folder and the file to pass from it."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "overrides.txt").write_text("model.tensor_model_parallel_size=2\n")
    code, out, err = run([command, str(tmp_path / "run")], capsys)
    assert code == 2 and out == ""
    assert err.strip() == f"error: {tmp_path / 'run'}: is a directory; pass the config file inside it " \
                          f"(e.g. {tmp_path / 'run'}/overrides.txt)"
