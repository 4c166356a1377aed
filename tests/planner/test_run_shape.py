"""A Megatron-LM run's shape, as its argument dump says it, against a plan's (planner/run_shape.py)."""

import json

import pytest

from moetune.cli.main import main
from moetune.configio.load import load_config
from moetune.planner.config_map import to_config
from moetune.planner.from_json import estimate_from_json
from moetune.planner.run_shape import config_run, dumped_run, run_differences


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
