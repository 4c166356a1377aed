"""explain and plan show how moetune did on the published runs nearest to a configuration, misses included."""

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from moetune.cli.main import main
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.planner.repeats import measured_tokens
from moetune.planner.runs import ab_gaps, known_gaps, load_configured_runs, published_rows
from moetune.planner.track_record import estimate_record, published_ep, track_record, track_record_text
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.efficiency import efficiency


def _independent_error(run) -> float:
    e = estimate(run.model, run.gpu, run.layout, run.workload, run.knobs)
    return e.time["tokens_per_s_per_gpu"] / measured_tokens(run) - 1


def test_deepseek_v3_on_h100_names_its_three_runs_and_the_bf16_gap():
    t = track_record("deepseek-v3", "h100")
    runs = {r.run_id: r for r in load_configured_runs()}
    assert [r["run_id"] for r in t["same_model"]] == ["R051", "R052", "R092"]
    for r in t["same_model"]:
        assert r["error"] == pytest.approx(_independent_error(runs[r["run_id"]]), rel=1e-9)
    assert [r["listed_gap"] for r in t["same_model"]] == [False, False, True]
    assert "R092 -18% (bf16, hybridep, 1024 GPUs, a listed gap)" in track_record_text(t)


def test_gpu_summary_counts_every_published_run_on_it():
    t = track_record("glm-4.5", "gb200")
    on_gpu = [r for r in load_configured_runs() if r.gpu.key == "gb200" and measured_tokens(r)]
    assert t["same_model"] == [] and t["gpu_runs"] == len(on_gpu)
    assert t["gpu_within"] == sum(abs(_independent_error(r)) <= 0.15 for r in on_gpu)
    assert t["gpu_models"] == len({r.model.name for r in on_gpu})
    assert track_record_text(t).startswith("no published glm-4.5 run on gb200;")


def test_uses_the_constants_in_use():
    """A user's efficiency file moves the errors shown, as it moves the prediction they qualify."""
    slow = {**efficiency("h100"), "gemm_eff": efficiency("h100")["gemm_eff"] / 2}
    shipped, halved = track_record("gpt-oss-120b", "h100"), track_record("gpt-oss-120b", "h100", slow)
    assert all(b["error"] < a["error"] for a, b in zip(shipped["same_model"], halved["same_model"], strict=True))


def test_a_gpu_without_published_runs_says_so():
    """A100 runs on H100's fit (efficiency.toml); under a user's own constants it has no record to borrow."""
    mine = {**efficiency("a100"), "gemm_eff": 0.5}
    t = track_record("gpt-oss-120b", "a100", mine)
    assert t["gpu_runs"] == 0 and "h100" in t["model_published_on"]
    assert "no published run on this GPU" in track_record_text(t)
    assert track_record("gpt-oss-120b", "a100")["constants_of"] == "h100"


def test_a_gpu_on_another_s_constants_shows_that_gpu_s_record():
    """H200 has no published run and runs on H100's fit (efficiency.toml): its record is H100's, and says so; a
    user's own constants for it have no record to show."""
    t = track_record("deepseek-v3", "h200")
    assert t["constants_of"] == "h100" and t["gpu"] == "h200"
    assert t["same_model"] == track_record("deepseek-v3", "h100")["same_model"]
    assert "runs on h100's constants" in track_record_text(t) and "R092 -18%" in track_record_text(t)
    mine = {**efficiency("h200"), "gemm_eff": 0.5}
    assert track_record("deepseek-v3", "h200", mine)["gpu_runs"] == 0


def test_known_gaps_name_published_runs():
    rows = published_rows()
    gaps = known_gaps()
    assert set(gaps) == {"runs", "tflops_only", "ab"}
    for section in ("runs", "tflops_only"):
        assert set(gaps[section]) <= set(rows) and all(gaps[section].values())
    for a, b in (*ab_gaps("order"), *ab_gaps("ties")):
        assert a in rows and b in rows and a < b


def test_estimate_carries_it_and_its_json_still_reads_back(capsys, tmp_path):
    args = ["estimate", "qwen3-30b-a3b", "--gpu", "gb200", "--gpus", "8", "--ep", "8", "--mbs", "4", "--gbs", "512",
            "--precision", "mxfp8"]
    assert main(args) == 0
    assert "Track record" in capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    saved = tmp_path / "estimate.json"
    saved.write_text(capsys.readouterr().out)
    record = json.loads(saved.read_text())["track_record"]
    assert record["gpu_runs"] > 40 and "R102" in {r["run_id"] for r in record["same_model"]}
    assert main(["explain", "--plan", str(saved), "--json"]) == 0  # explain reads an estimate with the new key


def test_explain_and_plan_print_it(capsys):
    assert main(["explain", "deepseek-v3", "--gpu", "h100", "--gpus", "1024", "--tp", "2", "--pp", "8", "--vpp", "4",
                 "--ep", "64", "--gbs", "8192", "--pipeline-layout", "Et|(tt|)*30mL", "--json"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)["track_record"]["same_model"]] == \
        ["R051", "R052", "R092"]
    assert main(["plan", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--gbs", "256", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "Track record" in out and "R029 +53%" in out


def test_a_published_run_that_cannot_be_predicted_is_still_named():
    """Qwen3-Next-80B-A3B has one published GB200 run, R063, whose source states no sequence length: it is not
    predicted, but the record names it rather than saying there is none."""
    t = track_record("qwen3-next-80b-a3b", "gb200")
    assert t["same_model"] == [] and "R063" in t["incomplete"]
    assert "R063" in track_record_text(t)


def test_a_cross_node_b300_run_is_also_priced_at_the_nic_speed_its_published_runs_read():
    """B300's two published cross-node runs read as if its NIC ran at 400 Gb/s, not the datasheet's 800 (known_gaps
    R243): the track record of a B300 run whose traffic crosses nodes carries its prediction at 400 beside the
    estimate's own, one inside a node none (nothing crosses the NIC), and a GPU without that reading none."""
    from moetune.planner.track_record import estimate_record

    runs = {r.run_id: r for r in load_configured_runs()}
    cross, inside = runs["R243"], runs["R244"]  # gpt-oss-120b EP64 over 8 nodes; Qwen3-30B-A3B on one node

    def record(run, gpu=None):
        return estimate_record(estimate(run.model, gpu or run.gpu, run.layout, run.workload, run.knobs))

    slow = record(cross)["observed_nic"]
    at_400 = estimate(cross.model, replace(cross.gpu, nic_gbps=400), cross.layout, cross.workload,
                      cross.knobs).time["tokens_per_s_per_gpu"]
    assert slow["nic_gbps"] == 400 and slow["tokens_per_s_per_gpu"] == pytest.approx(at_400)
    assert slow["tokens_per_s_per_gpu"] / measured_tokens(cross) - 1 == pytest.approx(-0.07, abs=0.02)  # R243 there
    assert "NIC ran at 400 Gb/s" in track_record_text(record(cross))
    assert "observed_nic" not in record(inside)
    assert "observed_nic" not in record(runs["R024"])  # B200's twin: its datasheet NIC is what it ran at


def test_a_model_with_no_published_run_is_told_what_an_unseen_model_met():
    """GLM-4.5-Air has no published run: its record quotes how the published models fared refitted without their own
    runs (data/unseen_models.toml), on the GPU asked about and in all; a published model's record does not."""
    t = track_record("glm-4.5-air", "gb200")
    text = track_record_text(t)
    assert t["unseen_model"]["gpu"]["runs"] > 0 and "refitted without its own runs" in text
    assert f"{t['unseen_model']['all']['within']} of {t['unseen_model']['all']['runs']} in all" in text
    assert "unseen_model" not in track_record("deepseek-v3", "gb200")


def test_the_unseen_model_figures_are_the_leave_one_model_out_fit():
    """data/unseen_models.toml is what `calibrate --leave-one-model-out` gives (about 45 s: every model refitted
    out); a change to the model or the runs that moves it fails here with the figures to write."""
    import collections
    import statistics

    from moetune.cli.calibrate_published import usable_runs
    from moetune.planner.calibrate import leave_one_model_out
    from moetune.planner.track_record import unseen_models

    errors = collections.defaultdict(list)
    for p in leave_one_model_out(usable_runs()):
        errors[p.run.gpu.key].append(abs(p.error))
        errors["all"].append(abs(p.error))
    found = {g: {"runs": len(e), "within": sum(x <= 0.15 for x in e),
                 "median_abs_error": round(statistics.median(e), 4)} for g, e in errors.items()}
    shipped = {g: unseen_models(g)["gpu"] for g in errors if g != "all"} | {"all": unseen_models("h100")["all"]}
    assert found == shipped


def test_an_ep1_run_is_told_no_published_run_has_ep1():
    """The new-user audit: EP 1 picks were predicted past every published run with no caveat. The shipped runs'
    `ep` column holds no 1 (src/moetune/data/published_runs.csv), so the track record of an EP 1 MoE configuration
    says so, on a GPU with runs and on one that runs on another's constants (A100: H100's); an EP 8 one (the runs'
    commonest EP) does not."""
    shipped = Path(__file__).parents[2] / "src" / "moetune" / "data" / "published_runs.csv"
    assert "1" not in {row["ep"] for row in csv.DictReader(shipped.open())}
    assert 1 not in published_ep() and {8, 64} <= set(published_ep())
    spec, wl = load_model("qwen3-30b-a3b"), Workload(seq_length=4096, micro_batch_size=1, global_batch_size=64)
    for gpu in ("gb200", "a100"):
        ep1 = estimate_record(estimate(spec, load_gpu(gpu), Layout(world_size=8, pp=2), wl))
        assert ep1["unpublished_ep"]["ep"] == 1
        assert track_record_text(ep1).endswith(
            "; no published run has EP 1 (they run EP 8 to 64): moetune's step model is unchecked there")
    ep8 = estimate_record(estimate(spec, load_gpu("gb200"), Layout(world_size=8, ep=8), wl))
    assert "unpublished_ep" not in ep8 and "EP 1" not in track_record_text(ep8)


def test_a_precision_with_one_run_gives_its_error_not_a_range():
    """Past four runs the line sums each precision up as a range; a precision with one run had read "1 bf16 at -14% to
    -14%" (qwen3-235b-a22b on gb200). The record is written here, so the figures are not the code's own."""
    def r(run_id, precision, error):
        return {"run_id": run_id, "precision": precision, "dispatcher": "deepep", "gpus": 64, "error": error,
                "listed_gap": False, "release": None}
    same = [r("A", "bf16", -0.14), *(r(f"B{i}", "mxfp8", e) for i, e in enumerate((-0.11, 0.02, 0.05, 0.12)))]
    t = {"model": "m", "gpu": "gb200", "same_model": same, "gpu_runs": 5, "gpu_models": 1, "gpu_within": 5,
         "gpu_median_abs_error": 0.05, "model_published_on": ["gb200"], "incomplete": []}
    assert track_record_text(t).startswith("5 published m run(s) on gb200: 1 bf16 at -14%; 4 mxfp8 at -11% to +12%;")
