"""calibrate --runs on runs evenly slower than published (planner/user_runs.py TIED): three GB200 Qwen3-30B-A3B runs
whose mix of compute and all-to-all the fit cannot tell apart. Holding the all-to-all as shipped had put the whole gap
on compute (x 0.697), and the plan for 72 GB200, which moves no token by all-to-all, then lost 22.5% where the runs
had lost 12%. One multiplier on both now moves the plan about as far as the runs."""

import csv

import pytest

from moetune.planner.calibrate import predict
from moetune.planner.runs import published_rows
from moetune.planner.user_runs import fit_user_runs
from moetune.planner.user_runs_csv import load_user_runs
from moetune.walls.efficiency import efficiency

# Qwen3-30B-A3B on 8 GB200, HybridEP at EP8, under NeMo 26.04, 26.04.01 and 26.06 (data/published_runs.csv, from
# Megatron-Bridge docs/performance-summary-archive.md @067f987)
IDS = ("R176", "R194", "R212")
SLOWER = 0.9  # each run measured 10% under its published tokens/s/GPU (or under the shipped prediction)
COLUMNS = ("run_id", "model", "gpu", "num_gpus", "seq_length", "global_batch_size", "micro_batch_size", "tp", "cp",
           "pp", "vpp", "ep", "etp", "precision", "dispatcher", "flex_num_sms", "recompute", "recompute_modules",
           "cuda_graph_scope", "ep_overlap", "delay_wgrad", "routing", "mtp", "fp8_output_proj", "pipeline_layout",
           "tokens_per_s_per_gpu")
# `plan qwen3-30b-a3b --gpu gb200 --gpus 72 --seq 4096 --gbs 576`'s pick (48,180 tokens/s/GPU shipped): EP1, so
# all its time is compute, host and bubble; a configuration none of the runs has
PICK = {"run_id": "pick", "model": "qwen3-30b-a3b", "gpu": "gb200", "num_gpus": "72", "seq_length": "4096",
        "global_batch_size": "576", "micro_batch_size": "4", "tp": "1", "cp": "1", "pp": "2", "vpp": "24", "ep": "1",
        "etp": "1", "precision": "mxfp8", "dispatcher": "alltoall", "flex_num_sms": "", "recompute": "none",
        "recompute_modules": "", "cuda_graph_scope": "attn moe_router moe_preprocess", "ep_overlap": "false",
        "delay_wgrad": "false", "routing": "dropless", "mtp": "0", "fp8_output_proj": "true",
        "pipeline_layout": "Ett|(t|)*46L", "tokens_per_s_per_gpu": "1"}


def _load(path, rows):
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return load_user_runs(str(path))


def _slower_runs(tmp_path, source):
    """The three runs measured SLOWER x their published figure, or x what the shipped constants predict for them (a
    cluster evenly 10% under moetune's model: the truth every configuration shares)."""
    rows = [dict(published_rows()[i]) for i in IDS]
    shipped = efficiency("gb200")
    for row, run in zip(rows, _load(tmp_path / "cfg.csv", rows), strict=True):
        base = run.tokens_per_s_per_gpu if source == "published" else predict(run, shipped).predicted
        row["tokens_per_s_per_gpu"] = f"{SLOWER * base:.3f}"
    return _load(tmp_path / "mine.csv", rows)


def _moved(run, fitted):
    """The refit's tokens/s/GPU for RUN over the shipped constants'."""
    return predict(run, fitted["constants"]).predicted / predict(run, efficiency("gb200")).predicted


def test_a_uniform_slowdown_is_recovered_on_the_runs_and_on_a_plan_they_do_not_hold(tmp_path):
    """Every configuration 0.9x the shipped prediction: the refit gives the runs 0.9x back, and the EP1 pick 0.9x too
    (it had got 0.82x: compute alone x 0.75, on runs 36-47% all-to-all). Within 3% on the pick: attention (13-19% of the
    runs, 21% of the pick) keeps its measured kernel rate under either multiplier."""
    runs = _slower_runs(tmp_path, "shipped")
    fitted = fit_user_runs(runs)["gb200"]
    assert fitted["tied"] and "too alike to tell the two apart" in fitted["a2a_note"]
    assert fitted["a2a_keys"] == ["a2a_eff_hybridep"] and fitted["a2a_scale"] == fitted["compute_scale"]
    for run in runs:
        assert _moved(run, fitted) == pytest.approx(SLOWER, rel=0.015)
    (pick,) = _load(tmp_path / "pick.csv", [PICK])
    assert _moved(pick, fitted) == pytest.approx(SLOWER, rel=0.03)


def test_runs_slower_than_published_move_a_plan_about_as_far_as_themselves(tmp_path):
    """The audit's case: R176, R194 and R212 each measured 10% under their published figure, which the shipped
    constants over-predict by 2-3%. The refit meets each within 3% (one factor cannot mend the model's own 2% spread
    between them), and the EP1 pick moves within 3 points of the runs' own move (it had moved 22.5% to their 12%)."""
    runs = _slower_runs(tmp_path, "published")
    fitted = fit_user_runs(runs)["gb200"]
    for run in runs:
        assert predict(run, fitted["constants"]).predicted == pytest.approx(run.tokens_per_s_per_gpu, rel=0.03)
    moved = [_moved(run, fitted) for run in runs]
    (pick,) = _load(tmp_path / "pick.csv", [PICK])
    assert _moved(pick, fitted) == pytest.approx(sum(moved) / len(moved), abs=0.03)
