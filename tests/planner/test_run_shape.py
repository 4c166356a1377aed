"""A Megatron-LM run's shape, as its argument dump says it, against a plan's (planner/run_shape.py)."""

import json
from pathlib import Path

import pytest

from moetune.cli.main import main
from moetune.configio.load import load_config
from moetune.planner.config_map import to_config
from moetune.planner.from_json import estimate_from_json
from moetune.planner.run_shape import config_run, dumped_run, run_differences
from moetune.profile.megatron_log import read_log


def _plan(tmp_path, capsys, *args) -> tuple:
    assert main(["plan", *args, "--top", "3", "--json"]) == 0
    path = tmp_path / "plan.json"
    path.write_text(capsys.readouterr().out)
    return path, json.loads(path.read_text())


@pytest.mark.parametrize("args", [("qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "256"),
                                  ("gpt-oss-120b", "--gpu", "b200", "--gpus", "64", "--gbs", "512")])
def test_an_emitted_megatron_lm_launch_reads_back_as_its_plan(args, tmp_path, capsys):
    """Each result's emitted Megatron-LM arguments, read back as check reads them, say the plan's run shape field for
    field (layout, batch, precision, dispatcher, overlaps, graphs): a log of that launch is the plan's job."""
    path, saved = _plan(tmp_path, capsys, *args)
    for rank in range(1, len(saved["results"]) + 1):
        out = tmp_path / f"r{rank}"
        assert main(["emit", str(path), "--rank", str(rank), "--out", str(out)]) == 0
        ran = config_run(load_config([str(out / "megatron_lm_args.txt")], gpu=args[2], gpus=int(args[4])))
        planned = config_run(to_config(estimate_from_json(saved, rank)))
        assert len(ran) >= 15 and run_differences(ran, planned) == []


def test_a_dumps_knobs_are_held_against_the_plans(tmp_path, capsys):
    """A BF16 alltoall run with every overlap off is not the FP8 DeepEP pick; print_args' Nones read as Megatron-LM's
    unset values, and the FP8 recipe of a BF16 run (argparse's default, printed) is no difference."""
    _, saved = _plan(tmp_path, capsys, "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "256",
                     "--fix", "precision=fp8-blockwise", "--fix", "dispatcher=deepep")
    pick = config_run(to_config(estimate_from_json(saved, 1)))
    dump = {"fp8": "None", "fp8_recipe": "delayed", "moe_token_dispatcher_type": "alltoall",
            "moe_flex_dispatcher_backend": "deepep", "overlap_grad_reduce": "False",
            "virtual_pipeline_model_parallel_size": "None", "world_size": "16"}
    apart = run_differences(dumped_run(dump), pick)
    assert {"mixed_precision.fp8", "model.moe_token_dispatcher_type"} <= set(apart)
    assert "mixed_precision.fp8_recipe" not in apart and "model.moe_flex_dispatcher_backend" not in apart
    assert ("ddp.overlap_grad_reduce" in apart) is pick["ddp.overlap_grad_reduce"]
    assert ("model.virtual_pipeline_model_parallel_size" in apart) is (
        pick.get("model.virtual_pipeline_model_parallel_size") not in (None, 1))
    assert "cluster.num_gpus" not in apart


def test_a_whole_megatron_lm_dump_reads_as_the_run_it_printed(capsys):
    """Megatron-LM 0.18's own dump prints VPP as validate_args derived it from the layout string (beside
    num_virtual_stages_per_pipeline_rank None, which had read as VPP 1), the FP8 format under dest fp8 (which had gone
    unread: every FP8 run priced as BF16), the graph scope as enum reprs and cp_comm_type as argparse's list (which had
    refused every --model prediction): read whole, it is its own plan's job, and --model needs nothing else."""
    log = Path(__file__).parents[1] / "profile" / "fixtures" / "megatron_lm_core018_dsv3_b200.log"
    ran = dumped_run(read_log(log).args)
    assert ran["model.virtual_pipeline_model_parallel_size"] == 2 and ran["model.pipeline_model_parallel_size"] == 16
    assert (ran["mixed_precision.fp8"], ran["mixed_precision.fp8_recipe"]) == ("e4m3", "mxfp8")
    assert ran["model.cuda_graph_scope"] == ["attn", "moe_router", "moe_preprocess"]
    assert ran["model.moe_flex_dispatcher_backend"] == "deepep" and ran["cluster.num_gpus"] == 256
    assert main(["diagnose", "--log", str(log), "--model", "deepseek-v3", "--gpu", "b200", "--json"]) == 0
    step = json.loads(capsys.readouterr().out)["comparison"]["step_seconds"]
    assert abs(step["predicted"] / step["measured"] - 1) < 0.15


def test_flags_left_at_their_defaults_do_not_contradict_the_dump(capsys):
    """--mlm-args "--bf16" beside a whole dump: the reader fills the flags left out at Megatron-LM's defaults (EP
    overlap off), which had contradicted the dump's EP overlap and refused the run."""
    log = Path(__file__).parents[1] / "profile" / "fixtures" / "megatron_lm_core018_dsv3_b200.log"
    assert main(["diagnose", "--log", str(log), "--model", "deepseek-v3", "--gpu", "b200", "--mlm-args", "--bf16"]) == 0


def test_a_local_full_iteration_graph_is_the_full_iteration_implementation():
    """Megatron-Core 0.18 turns the deprecated --cuda-graph-impl local --cuda-graph-modules full_iteration (what emit
    writes for older releases) into cuda_graph_impl full_iteration with no modules: the same run."""
    planned = config_run({"model.cuda_graph_impl": "local", "model.cuda_graph_scope": ["full_iteration"]})
    ran = dumped_run({"cuda_graph_impl": "full_iteration", "cuda_graph_modules": "[]"})
    assert run_differences(ran, planned) == []


def _cp_log(tmp_path, cp: int, exchange: str):
    """The Qwen3-30B-A3B fixture's log with a CP degree and an exchange in its dump, as Megatron-LM 0.18 prints them
    (print_args: argparse's --cp-comm-type list, e.g. ['a2a'])."""
    text = (Path(__file__).parents[1] / "profile" / "fixtures" / "megatron_lm_qwen3_30b_a3b.log").read_text()
    first = "  expert_model_parallel_size"
    assert text.count(first) == 1
    path = tmp_path / f"cp{cp}.log"
    path.write_text(text.replace(first, f"  context_parallel_size ........................... {cp}\n"
                                        f"  cp_comm_type .................................... {exchange}\n{first}"))
    return path


@pytest.mark.parametrize("cp", [2, 1])
def test_a_cp_exchange_apart_from_the_dump_is_said_at_cp_above_one(cp, tmp_path, capsys):
    """A CP 2 run that exchanged by a2a, given as p2p: the advice and a prediction had been tailored to p2p in silence.
    At CP 1 the exchange is no part of the run (Megatron-Core checks it only past CP 1), so no difference."""
    path = _cp_log(tmp_path, cp, "['a2a']")
    assert dumped_run(read_log(path).args)["model.cp_comm_type"] == "a2a"
    code = main(["diagnose", "--log", str(path), "--set", f"model.context_parallel_size={cp}",
                 "--set", "model.cp_comm_type=p2p"])
    err = capsys.readouterr().err
    assert (code != 0) is (cp > 1)
    assert ("model.cp_comm_type p2p (the log ran a2a)" in err) is (cp > 1)


def test_a_per_layer_cp_exchange_compares_layer_by_layer():
    """--cp-comm-type takes a type per layer (Megatron-LM arguments.py: '--cp-comm-type p2p p2p a2a a2a ...'): one
    type for every layer is that type, and layers swapped are another run (not a set, as module lists are)."""
    dump = {"context_parallel_size": "2", "cp_comm_type": "['a2a', 'a2a', 'p2p', 'p2p']"}
    ran = dumped_run(dump)
    swapped = {"model.context_parallel_size": 2, "model.cp_comm_type": ["p2p", "p2p", "a2a", "a2a"]}
    assert run_differences(ran, config_run(swapped)) == ["model.cp_comm_type"]
    assert run_differences(ran, config_run(swapped | {"model.cp_comm_type": ["a2a", "a2a", "p2p", "p2p"]})) == []
    alike = dumped_run({"context_parallel_size": "2", "cp_comm_type": "['a2a', 'a2a', 'a2a', 'a2a']"})
    assert run_differences(alike, config_run(swapped | {"model.cp_comm_type": "a2a"})) == []
    assert run_differences(alike, config_run(swapped | {"model.cp_comm_type": "p2p"})) == ["model.cp_comm_type"]
