"""diagnose --plan: predicted vs measured per wall on a real trace; the verdict names the worst wall."""

import json

import pytest

from moetune.cli.main import main
from moetune.planner.compare import WALLS, compare, measured_walls
from moetune.planner.from_json import estimate_from_json
from moetune.profile.diagnose import diagnose


def test_measured_walls_partition_the_step(shared_data):
    d = diagnose([shared_data / "traces" / "a100_16rank_sendrecv_rank0.json.gz"])
    walls = measured_walls(d)
    assert set(walls) == set(WALLS)
    assert sum(walls.values()) == __import__("pytest").approx(d.step_seconds, rel=1e-9)
    assert walls["communication"] == d.exposed_communication_seconds


def test_verdict_names_the_wall_with_the_largest_error(shared_data, capsys):
    assert main(["estimate", "qwen3-30b-a3b", "--gpu", "a100", "--gpus", "16", "--ep", "16", "--gbs", "256",
                 "--json"]) == 0
    predicted = estimate_from_json(json.loads(capsys.readouterr().out))
    d = diagnose([shared_data / "traces" / "a100_16rank_sendrecv_rank0.json.gz"])
    result = compare(predicted, d)
    errors = {w: abs(v["predicted"] - v["measured"]) for w, v in result["walls"].items()}
    assert result["worst_wall"] == max(errors, key=errors.get)
    assert result["worst_wall"] in result["verdict"]


def test_cli_with_config_tailors_advice_and_compares(shared_data, tmp_path, capsys):
    main(["estimate", "qwen3-30b-a3b", "--gpu", "a100", "--gpus", "16", "--ep", "16", "--gbs", "256", "--json"])
    plan = tmp_path / "plan.json"
    plan.write_text(capsys.readouterr().out)
    trace = str(shared_data / "traces" / "a100_16rank_sendrecv_rank0.json.gz")
    assert main(["diagnose", trace, "--plan", str(plan), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["comparison"]["available"] and set(data["comparison"]["walls"]) == set(WALLS)
    # with the config saying overlap is already on (and shared-expert overlap off), that advice is dropped
    assert main(["diagnose", trace, "--set", "comm_overlap.overlap_moe_expert_parallel_comm=true",
                 "--set", "model.moe_shared_expert_overlap=false",
                 "--set", "model.expert_model_parallel_size=16", "--json"]) == 0
    tailored = json.loads(capsys.readouterr().out)
    assert "comm.ep_overlap" not in {r["rule"] for r in tailored["recommendations"]}


def _plan(capsys, tmp_path, gpu="a100", gpus="16"):
    main(["estimate", "qwen3-30b-a3b", "--gpu", gpu, "--gpus", gpus, "--ep", "16", "--gbs", "256", "--json"])
    plan = tmp_path / f"{gpu}-{gpus}.json"
    plan.write_text(capsys.readouterr().out)
    return plan


def test_a_prediction_of_another_cluster_is_refused(shared_data, tmp_path, capsys):
    """The trace is rank 0 of 16 A100s: a prediction for H100s, or for 32 GPUs, is another run."""
    trace = str(shared_data / "traces" / "a100_16rank_sendrecv_rank0.json.gz")
    for plan, needle in ((_plan(capsys, tmp_path, "h100"), "for h100 (hopper) but the traces ran on ampere"),
                         (_plan(capsys, tmp_path, gpus="32"), "for 32 GPUs but the traces record world size 16")):
        assert main(["diagnose", trace, "--plan", str(plan)]) == 2
        assert needle in capsys.readouterr().err


def test_ambiguous_or_damaged_predictions_are_one_line(shared_data, tmp_path, capsys):
    trace = str(shared_data / "traces" / "a100_16rank_sendrecv_rank0.json.gz")
    plan = _plan(capsys, tmp_path)
    cases = [(["--model", "qwen3-30b-a3b", "--gpu", "a100", "--gpus", "16"], "the run's layout and knobs: --config"),
             (["--model", "qwen3-30b-a3b", "--plan", str(plan)], "--plan and --model both name the prediction")]
    data = json.loads(plan.read_text())
    del data["knobs"]["precision"]
    (tmp_path / "cut.json").write_text(json.dumps(data))
    data = json.loads(plan.read_text())
    data["layout"]["tp"] = "two"
    (tmp_path / "typed.json").write_text(json.dumps(data))
    cases += [(["--plan", str(tmp_path / "cut.json")], "cut.json lacks 'precision'"),
              (["--plan", str(tmp_path / "typed.json")], "typed.json holds layout.tp 'two', not a whole number")]
    for args, needle in cases:
        assert main(["diagnose", trace, *args]) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1


def test_a_prediction_far_from_the_measurement_asks_whether_it_is_the_same_run(shared_data, capsys):
    """A 1,024-GPU-batch plan against a 16-rank trace: steps many times apart are two runs, not a model error."""
    assert main(["estimate", "qwen3-30b-a3b", "--gpu", "a100", "--gpus", "16", "--ep", "16", "--gbs", "4096",
                 "--json"]) == 0
    predicted = estimate_from_json(json.loads(capsys.readouterr().out))
    result = compare(predicted, diagnose([shared_data / "traces" / "a100_16rank_sendrecv_rank0.json.gz"]))
    assert result["verdict"].startswith("predicted and measured steps are")


def _gpt_oss_log(path, dump: bool):
    """A training log of gpt-oss-120b on 64 H100: a Megatron-LM one prints its arguments first, a Bridge one not."""
    head = ("------------------------ arguments ------------------------\n"
            "  seq_length ...................................... 4096\n"
            "  world_size ...................................... 64\n"
            "-------------------- end of arguments ---------------------\n") if dump else ""
    lines = [f" [2026-01-01 00:00:00] iteration {i:8d}/     100 | consumed samples: {512 * i} | elapsed time per "
             f"iteration (ms): 5000.0 | throughput per GPU (TFLOP/s/GPU): 150.0 | global batch size:   512 |"
             for i in range(1, 6)]
    path.write_text(head + "\n".join(lines) + "\n")
    return path


def test_a_log_alone_compares_the_step_and_tflops_as_its_launcher_counts_them(tmp_path, capsys):
    """Without traces there are no walls, but the iteration time and TFLOP/s still face the prediction; a Megatron-LM
    log (its argument dump) counts gpt-oss-120b's quick-GEGLU MLP as 2 GEMMs (training.py), Bridge's as 3."""
    import pytest

    from moetune.specs.registry import load_model
    from moetune.walls.model_flops import megatron_model_flops
    sets = ["model.expert_model_parallel_size=8", "model.expert_tensor_parallel_size=1",
            "model.tensor_model_parallel_size=2", "train.global_batch_size=512", "train.micro_batch_size=1",
            "model.seq_length=4096"]
    got = {}
    for dump in (True, False):
        log = _gpt_oss_log(tmp_path / f"log{dump}.txt", dump)
        args = ["diagnose", "--log", str(log), "--model", "gpt-oss-120b", "--gpu", "h100", "--gpus", "64", "--json"]
        assert main(args + [a for s in sets for a in ("--set", s)]) == 0
        got[dump] = json.loads(capsys.readouterr().out)["comparison"]
    mlm, bridge = got[True], got[False]
    assert mlm["available"] and mlm["step_seconds"]["measured"] == pytest.approx(5.0)
    assert (mlm["tflops_per_gpu"]["flops_convention"], bridge["tflops_per_gpu"]["flops_convention"]) == (
        "megatron-lm", "bridge")
    spec = load_model("gpt-oss-120b")
    ratio = (megatron_model_flops(spec, 4096, 512, tp=2, convention="bridge")
             / megatron_model_flops(spec, 4096, 512, tp=2, convention="megatron-lm"))
    assert bridge["tflops_per_gpu"]["predicted"] / mlm["tflops_per_gpu"]["predicted"] == pytest.approx(ratio)


def test_idle_waits_at_pp1_are_not_called_a_bubble(shared_data, capsys):
    """The 16-A100 trace idles 0.136 s a step on rank waits and untimed dependencies; against a PP 1 prediction that
    is not a pipeline bubble (there is none), and the row says what it holds."""
    assert main(["estimate", "qwen3-30b-a3b", "--gpu", "a100", "--gpus", "16", "--ep", "16", "--gbs", "256",
                 "--json"]) == 0
    predicted = estimate_from_json(json.loads(capsys.readouterr().out))
    assert predicted.layout.pp == 1
    result = compare(predicted, diagnose([shared_data / "traces" / "a100_16rank_sendrecv_rank0.json.gz"]))
    assert "PP 1 has no bubble" in result["walls"]["bubble"]["measured_is"]
    if result["worst_wall"] == "bubble":
        assert "no pipeline bubble" in result["verdict"]


def test_a_log_alone_far_from_the_prediction_asks_whether_it_is_the_same_run(tmp_path, capsys):
    """Log-only comparisons ask "same run?" past 3x as trace comparisons do."""
    log = tmp_path / "run.log"
    log.write_text("".join(f" iteration {10 * i:8d}/     100 | consumed samples: 640 | elapsed time per iteration "
                           f"(ms): 4000.0 | throughput per GPU (TFLOP/s/GPU): 134.0 | global batch size:   256 |\n"
                           for i in range(1, 9)))
    plan = _plan(capsys, tmp_path)
    assert main(["diagnose", "--log", str(log), "--plan", str(plan), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    predicted = data["comparison"]["step_seconds"]["predicted"]
    assert predicted / 4.0 > 3 and "beyond any error" in data["comparison"]["verdict"]
    # the log's GPU is the plan's: its memory and platform are read against an A100
    assert data["facts"]["gpu.arch"] == "ampere"


@pytest.mark.parametrize("change, needle", [({"gbs": 1024}, "global batch 1024 (planned 512)"),
                                            ({"seq": 8192}, "model.seq_length 4096 (the log ran 8192)")])
def test_a_log_of_another_job_is_refused(tmp_path, capsys, change, needle):
    """The log records the global batch it ran (every iteration line) and, in Megatron-LM's argument dump, the
    sequence length and TP: a prediction of another job is one line, where it had read a ratio (fuzz audit)."""
    head = ("------------------------ arguments ------------------------\n"
            f"  seq_length ...................................... {change.get('seq', 4096)}\n"
            "  world_size ...................................... 64\n"
            "-------------------- end of arguments ---------------------\n")
    log = tmp_path / "run.log"
    log.write_text(head + "".join(
        f" iteration {i:8d}/     100 | consumed samples: 0 | elapsed time per iteration (ms): 5000.0 | "
        f"global batch size: {change.get('gbs', 512):5d} |\n" for i in range(1, 6)))
    sets = ["model.expert_model_parallel_size=8", "model.tensor_model_parallel_size=2", "train.global_batch_size=512",
            "train.micro_batch_size=1", "model.seq_length=4096"]
    args = ["diagnose", "--log", str(log), "--model", "gpt-oss-120b", "--gpu", "h100", "--gpus", "64"]
    assert main(args + [a for s in sets for a in ("--set", s)]) == 2
    assert needle in capsys.readouterr().err


def test_a_log_in_batch_ramp_up_and_a_log_that_states_its_sequence_are_the_same_job(tmp_path, capsys):
    """A log whose batch grows (rampup_batch_size) records no one GBS to hold against the prediction, and a --model
    prediction takes the sequence length the log's argument dump states where --set does not say it."""
    head = ("------------------------ arguments ------------------------\n"
            "  seq_length ...................................... 8192\n"
            "  world_size ...................................... 64\n"
            "-------------------- end of arguments ---------------------\n")
    log = tmp_path / "run.log"
    log.write_text(head + "".join(
        f" iteration {i:8d}/     100 | consumed samples: 0 | elapsed time per iteration (ms): 5000.0 | "
        f"global batch size: {gbs:5d} |\n" for i, gbs in enumerate((128, 256, 384), 1)))
    sets = ["model.expert_model_parallel_size=8", "model.tensor_model_parallel_size=2", "train.global_batch_size=512",
            "train.micro_batch_size=1"]
    args = ["diagnose", "--log", str(log), "--model", "gpt-oss-120b", "--gpu", "h100", "--gpus", "64", "--json"]
    assert main(args + [a for s in sets for a in ("--set", s)]) == 0
    assert json.loads(capsys.readouterr().out)["comparison"]["available"]


def test_a_log_of_another_result_of_the_plan_names_its_rank(tmp_path, capsys):
    """A sweep candidate's log given with its plan: the pick (EP 16 at PP 1) is another layout than the log's
    PP 4 (VPP 8) x EP 4, which the plan's result 2 ran (DeepEP, HybridEP folded into it: planner/twins.py); --rank
    picks the result the run is (its prediction, not the pick's)."""
    assert main(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "256", "--top", "5",
                 "--json"]) == 0
    plan = tmp_path / "plan.json"
    plan.write_text(capsys.readouterr().out)
    dump = {"seq_length": 4096, "world_size": 16, "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 4,
            "virtual_pipeline_model_parallel_size": 8, "expert_model_parallel_size": 4, "micro_batch_size": 1}
    log = tmp_path / "run.log"
    log.write_text("------------------------ arguments ------------------------\n"
                   + "".join(f"  {k} {'.' * (48 - len(k))} {v}\n" for k, v in dump.items())
                   + "-------------------- end of arguments ---------------------\n"
                   + "".join(f" iteration {i:8d}/      20 | consumed samples: 0 | elapsed time per iteration (ms): "
                             f"5000.0 | global batch size:   256 |\n" for i in range(1, 9)))
    assert main(["diagnose", "--log", str(log), "--plan", str(plan)]) == 2
    err = capsys.readouterr().err
    assert "pipeline_model_parallel_size 4 (planned 1)" in err and "result 2: pass --rank 2" in err
    assert main(["diagnose", "--log", str(log), "--plan", str(plan), "--rank", "2", "--json"]) == 0
    rank2 = json.loads(plan.read_text())["results"][1]["time"]["step_seconds"]
    assert json.loads(capsys.readouterr().out)["comparison"]["step_seconds"]["predicted"] == pytest.approx(rank2)
    assert main(["diagnose", "--log", str(log), "--rank", "3"]) == 2  # --rank picks a result of --plan


def test_a_log_whose_work_a_step_is_not_the_predictions_is_named(tmp_path, capsys):
    """A Bridge log prints no arguments, so a plan of another model had compared with it in silence; its TFLOP/s x
    step is the work a GPU does a step, fixed by the model, batch and sequence: 3.5x off is another job, the same work
    at a slower step is the same job run slower."""
    plan = _plan(capsys, tmp_path)
    time = json.loads(plan.read_text())["time"]
    work = time["tflops_per_gpu"] * time["step_seconds"]
    verdicts = {}
    for factor in (1.0, 3.5):
        log = tmp_path / f"run{factor}.log"
        step = 2 * time["step_seconds"]  # measured twice as slow, in both
        log.write_text("".join(f" iteration {i:8d}/     100 | consumed samples: 0 | elapsed time per iteration (ms): "
                               f"{1000 * step:.1f} | throughput per GPU (TFLOP/s/GPU): {factor * work / step:.3f} | "
                               "global batch size:   256 |\n" for i in range(1, 9)))
        assert main(["diagnose", "--log", str(log), "--plan", str(plan), "--json"]) == 0
        verdicts[factor] = json.loads(capsys.readouterr().out)["comparison"]["verdict"]
    assert "another model" not in verdicts[1.0]
    assert verdicts[3.5].startswith("the log's work a GPU a step (TFLOP/s x step) is 3.50x the prediction's")


def test_a_gpu_that_contradicts_the_plan_names_the_flag_not_traces(tmp_path, capsys):
    """A log alone has no traces: where --gpu names another family than the --plan's, the error says --gpu did."""
    log = tmp_path / "run.log"
    log.write_text("".join(f" iteration {i:8d}/     100 | consumed samples: 0 | elapsed time per iteration (ms): "
                           "4000.0 | global batch size:   256 |\n" for i in range(1, 6)))
    plan = _plan(capsys, tmp_path)  # an A100 prediction
    assert main(["diagnose", "--log", str(log), "--plan", str(plan), "--gpu", "h100"]) == 2
    err = capsys.readouterr().err
    assert "but --gpu names hopper GPUs for the log" in err and "traces" not in err


def test_steps_far_apart_blame_no_wall(shared_data):
    """The shared 16-rank trace is a recommender model's step; a Qwen3-30B-A3B prediction on its 16 A100s is tens of
    times off. The verdict asks whether it is this run's prediction and judges no wall (it had gone on to say the model
    over-estimates compute by thousands of percent)."""
    from moetune.layout.knobs import Knobs
    from moetune.layout.layout import Layout
    from moetune.layout.validate import Workload
    from moetune.planner.estimate import estimate
    from moetune.specs.hardware import load_gpu
    from moetune.specs.registry import load_model
    predicted = estimate(load_model("qwen3-30b-a3b"), load_gpu("a100"), Layout(world_size=16, ep=16),
                         Workload(seq_length=4096, micro_batch_size=1, global_batch_size=256), Knobs())
    result = compare(predicted, diagnose([shared_data / "traces" / "a100_16rank_sendrecv_rank0.json.gz"]))
    assert "beyond any error" in result["verdict"] and "none is judged" in result["verdict"]
    assert "over-estimates" not in result["verdict"] and "under-estimates" not in result["verdict"]
