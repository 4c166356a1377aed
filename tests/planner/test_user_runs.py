"""calibrate --runs: a user's measured runs refit the per-GPU multipliers on the shipped constants, and the file it
writes moves estimate's prediction exactly as the fit did."""

import csv
import json

import pytest

from moetune.cli.main import main
from moetune.planner.calibrate import A2A_KEYS, predict, with_params
from moetune.planner.estimate import estimate
from moetune.planner.runs import published_rows
from moetune.planner.user_runs import MIN_RUNS_FOR_A2A, by_gpu, fit_user_runs, sections, user_toml
from moetune.planner.user_runs_csv import load_user_runs
from moetune.walls.efficiency import efficiency

# Qwen3-235B-A22B on 256 H100 (three releases of one recipe) and DeepSeek-V3 on 1,024 H100: real configurations
IDS = ("R014", "R050", "R051", "R181")
COLUMNS = ("run_id", "model", "gpu", "num_gpus", "seq_length", "global_batch_size", "micro_batch_size", "tp", "cp",
           "pp", "vpp", "ep", "etp", "precision", "dispatcher", "recompute", "recompute_modules", "cuda_graph_scope",
           "ep_overlap", "delay_wgrad", "routing", "account_for_embedding", "account_for_loss", "pipeline_layout",
           "tokens_per_s_per_gpu")


def _write(path, rows, columns=COLUMNS):
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return str(path)


def _as_measured_on(ids, scales, tmp_path, rows=None):
    """The published configurations (or `rows`), each 'measured' at what moetune predicts under these multipliers: a
    cluster whose true constants the fit should find."""
    truth = with_params(efficiency("h100"), scales)
    rows = rows or [dict(published_rows()[i]) for i in ids]
    runs = load_user_runs(_write(tmp_path / "cfg.csv", rows))
    for row, run in zip(rows, runs, strict=True):
        row["tokens_per_s_per_gpu"] = f"{predict(run, truth).predicted:.3f}"
    return _write(tmp_path / "mine.csv", rows)


def test_the_refit_finds_a_clusters_multipliers(tmp_path):
    path = _as_measured_on(IDS, {"compute_scale": 1.3, "a2a_scale": 0.7}, tmp_path)
    runs = load_user_runs(path)
    fitted = fit_user_runs(runs)["h100"]
    assert fitted["runs"] == len(IDS) >= MIN_RUNS_FOR_A2A
    assert fitted["compute_scale"] == pytest.approx(1.3, rel=0.03)
    assert fitted["a2a_scale"] == pytest.approx(0.7, rel=0.06)
    for run in runs:
        assert predict(run, fitted["constants"]).predicted == pytest.approx(run.tokens_per_s_per_gpu, rel=0.01)


def test_few_runs_move_both_multipliers_as_one(tmp_path):
    """Two runs cannot pin two multipliers: one moves both, and a cluster evenly at 0.8 is found."""
    path = _as_measured_on(IDS[:2], {"compute_scale": 0.8, "a2a_scale": 0.8}, tmp_path)
    fitted = fit_user_runs(load_user_runs(path))["h100"]
    assert fitted["tied"] and fitted["a2a_scale"] == fitted["compute_scale"] == pytest.approx(0.8, rel=0.03)
    assert fitted["a2a_note"].startswith("2 run(s): two multipliers would fit them exactly")


def _one_configuration(run_id, batches):
    """One published configuration run at several global batches: the same mix of compute and all-to-all."""
    row = published_rows()[run_id]
    return [{**row, "run_id": f"{run_id}-{gbs}", "global_batch_size": str(gbs)} for gbs in batches]


def test_runs_that_hide_the_all_to_all_move_it_with_compute(tmp_path, capsys):
    """Qwen3-30B-A3B on 16 H100 with HybridEP under EP overlap (R103) hides its all-to-all: three batch sizes of it,
    measured on a cluster at compute 0.8 and all-to-all 0.5, cannot tell the two apart. Fitted apart they came out
    at 1.55 and 0.25 with every run within 0.2%; now one multiplier moves both, compute's (the all-to-all stays
    hidden), and the report says why. Only HybridEP's efficiency moves: the runs use no other dispatcher."""
    rows = _one_configuration("R103", (512, 1024, 2048))
    path = _as_measured_on((), {"compute_scale": 0.8, "a2a_scale": 0.5}, tmp_path, rows)
    fitted = fit_user_runs(load_user_runs(path))["h100"]
    assert fitted["tied"] and fitted["a2a_keys"] == ["a2a_eff_hybridep"]
    assert fitted["a2a_note"].startswith("your runs expose too little all-to-all to fit it: at most 0.")
    assert fitted["a2a_scale"] == fitted["compute_scale"] == pytest.approx(0.8, rel=0.05)
    shipped = efficiency("h100")
    for key in A2A_KEYS:
        moved = fitted["compute_scale"] if key == "a2a_eff_hybridep" else 1.0
        assert fitted["constants"][key] == pytest.approx(moved * shipped[key])
    out = tmp_path / "eff.toml"
    assert main(["calibrate", "--runs", path, "--write", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "compute and all-to-all (a2a_eff_hybridep) x 0." in printed and "together" in printed
    assert "since your runs expose too little all-to-all" in printed
    assert "a2a_eff_hybridep" in out.read_text() and "a2a_eff_deepep" not in out.read_text()


def test_runs_with_one_mix_of_compute_and_all_to_all_move_both_as_one(tmp_path):
    """Qwen3-235B-A22B across 32 nodes with NCCL alltoall (R014) spends over half its step in all-to-all, but three
    batch sizes of it scale compute and all-to-all together: no pair of multipliers is pinned, and one that moves both
    meets all three (the mix they share)."""
    rows = _one_configuration("R014", (4096, 8192, 16384))
    path = _as_measured_on((), {"compute_scale": 1.3, "a2a_scale": 0.7}, tmp_path, rows)
    runs = load_user_runs(path)
    fitted = fit_user_runs(runs)["h100"]
    assert fitted["tied"] and fitted["a2a_scale"] == fitted["compute_scale"]
    assert "too alike to tell the two apart" in fitted["a2a_note"]
    for run in runs:
        assert predict(run, fitted["constants"]).predicted == pytest.approx(run.tokens_per_s_per_gpu, rel=0.01)


def test_only_the_dispatchers_the_runs_use_are_refitted(tmp_path):
    """The recovery runs use NCCL alltoall and DeepEP: HybridEP's efficiency stays as shipped, in the fit and in the
    written file."""
    path = _as_measured_on(IDS, {"compute_scale": 1.3, "a2a_scale": 0.7}, tmp_path)
    fitted = fit_user_runs(load_user_runs(path))["h100"]
    assert fitted["a2a_keys"] == ["a2a_eff_alltoall", "a2a_eff_deepep"] and fitted["a2a_note"] is None
    shipped = efficiency("h100")
    assert fitted["constants"]["a2a_eff_hybridep"] == shipped["a2a_eff_hybridep"]
    assert fitted["constants"]["a2a_eff_alltoall"] == pytest.approx(0.7 * shipped["a2a_eff_alltoall"], rel=0.06)
    runs = load_user_runs(path)
    text = user_toml(fit_user_runs(runs), sections(by_gpu(runs)))
    assert "a2a_eff_alltoall" in text and "a2a_eff_hybridep" not in text


def test_the_written_file_moves_estimate_as_the_fit_did(tmp_path, capsys):
    path = _as_measured_on(IDS, {"compute_scale": 1.2, "a2a_scale": 1.0}, tmp_path)
    out = tmp_path / "eff.toml"
    assert main(["calibrate", "--runs", path, "--write", str(out), "--json"]) == 0
    report = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    row = published_rows()["R051"]
    args = ["estimate", "deepseek-v3", "--gpu", "h100", "--gpus", "1024", "--tp", "2", "--pp", "8", "--vpp", "4",
            "--ep", "64", "--seq", "4096", "--gbs", row["global_batch_size"], "--precision", "fp8-current",
            "--dispatcher", "deepep", "--ep-overlap", "--delay-wgrad", "--cuda-graph-scope", "none",
            "--recompute", "selective", "--recompute-modules", "mla_up_proj,mlp", "--routing", "force-balance",
            "--pipeline-layout", row["pipeline_layout"], "--bf16-grads", "--json"]
    assert main([*args, "--efficiency", str(out)]) == 0
    refit = json.loads(capsys.readouterr().out)["time"]["tokens_per_s_per_gpu"]
    assert main(args) == 0
    shipped = json.loads(capsys.readouterr().out)["time"]["tokens_per_s_per_gpu"]
    assert refit == pytest.approx(report["R051"]["fitted"], rel=1e-3)
    assert shipped == pytest.approx(report["R051"]["shipped"], rel=1e-3) and refit > shipped


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda rows, cols: (rows, (*cols, "tp_size")), "unknown column(s) tp_size"),
    # the raw shared table is named published_runs.csv too: the error says which file's columns, and lists them
    (lambda rows, cols: (rows, (*cols, "hardware")), "those of moetune's own runs table, moetune/data/published_runs."
     "csv (required: model, gpu, num_gpus"),
    (lambda rows, cols: (rows, tuple(c for c in cols if c != "ep")), "missing column(s) ep"),
    (lambda rows, cols: ([{**rows[0], "precision": ""}], cols), "line 2: empty precision; fill in what the run used:"),
    # published rows leave vpp empty as 'not stated'; a user's copy of one had been told 'empty vpp' and nothing more
    (lambda rows, cols: ([{**rows[0], "vpp": "", "ep_overlap": ""}], cols),
     "line 2: empty vpp, ep_overlap; fill in what the run used (vpp = 1 where the run does not interleave; "
     "ep_overlap = false where the run does not overlap the all-to-all)"),
    (lambda rows, cols: ([{**rows[0], "model": "no-such-model"}], cols), "line 2: unknown model"),
    (lambda rows, cols: ([{**rows[0], "ep": "7"}], cols), "line 2:"),
    (lambda rows, cols: (rows, tuple(c for c in cols if c not in ("account_for_embedding", "account_for_loss"))),
     "line 2: num_layers (94) must be divisible"),
    (lambda rows, cols: ([{**rows[0], "tokens_per_s_per_gpu": "fast"}], cols),
     "line 2: tokens_per_s_per_gpu = 'fast': expected a number"),
    (lambda rows, cols: ([{**rows[0], "tokens_per_s_per_gpu": "0"}], cols), "line 2: tokens_per_s_per_gpu = '0'"),
    (lambda rows, cols: ([{**rows[0], "tokens_per_s_per_gpu": "-100"}], cols), "expected a positive number"),
    (lambda rows, cols: ([{**rows[0], "tp": "two"}], cols), "line 2: tp = 'two': expected a whole number"),
    (lambda rows, cols: ([{**rows[0], "ep": "16.5"}], cols), "line 2: ep = '16.5': expected a whole number"),
    (lambda rows, cols: ([{**rows[0], "ep_overlap": "maybe"}], cols), "ep_overlap = 'maybe': expected true, false"),
    (lambda rows, cols: ([{**rows[0], "routing": "random"}], cols), "routing = 'random': expected dropless or"),
    (lambda rows, cols: ([rows[0], rows[0]], cols), "run_id R014 appears more than once"),
    # EP overlap on EP 1 (and EP 32's tokens on one rank): Megatron-Core refuses it, so it was never measured
    (lambda rows, cols: ([{**rows[0], "ep": "1", "tp": "1", "pp": "8", "ep_overlap": "true"}], cols),
     "Megatron refuses this configuration (ep_overlap.needs_ep"),
    (lambda rows, cols: ([], cols), "no rows"),
    (lambda rows, cols: ([{**rows[0], "tp": "\u00b2"}], cols), "line 2: tp = '\u00b2': expected a whole number"),
    (lambda rows, cols: ([{**published_rows()["R017"], "mtp": "1"}], (*cols, "mtp")),
     "mtp = 1: nemotron3-nano-30b-a3b is a hybrid Mamba stack"),
    (lambda rows, cols: ([{**published_rows()["R051"], "vpp": "1"}], cols), "vpp = 1 contradicts pipeline_layout"),
    (lambda rows, cols: ([{**rows[0], "first_stage_layers": "99", "account_for_embedding": "",
                           "account_for_loss": ""}], (*cols, "first_stage_layers")), "line 2:"),
])
def test_a_bad_file_is_one_line(edit, needle, tmp_path, capsys):
    rows, cols = edit([dict(published_rows()["R014"])], COLUMNS)
    path = _write(tmp_path / "bad.csv", rows, cols)
    assert main(["calibrate", "--runs", path]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert main(["calibrate", "--runs", str(tmp_path / "none.csv")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_fit_that_cannot_meet_the_runs_says_so(tmp_path, capsys):
    """A run measured 2.9x faster than predicted asks H100's GEMMs past 0.95 of their peak: the constants cap there,
    and the report says the refit does not meet it instead of printing the multiplier as if it did; a million times
    faster, the fit caps the same."""
    row = dict(published_rows()["R014"])
    run = load_user_runs(_write(tmp_path / "cfg.csv", [row]))[0]
    rows = [{**row, "tokens_per_s_per_gpu": f"{2.9 * predict(run, efficiency('h100')).predicted:.1f}"}]
    assert main(["calibrate", "--runs", _write(tmp_path / "fast.csv", rows)]) == 0
    out = capsys.readouterr().out
    assert "limit:" in out and "capped: gemm_eff" in out
    absurd = _write(tmp_path / "absurd.csv", [{**row, "tokens_per_s_per_gpu": "1e9"}])
    fitted = fit_user_runs(load_user_runs(absurd))["h100"]
    assert fitted["constants"]["gemm_eff"] == 0.95 and fitted["limits"]


@pytest.mark.parametrize(("figure", "needle"), [
    (lambda run, t: t["tflops_per_gpu"], "TFLOP/s/GPU in the tokens column?"),
    (lambda run, t: t["tokens_per_s_per_gpu"] * run.layout.world_size, "the whole cluster's tokens/s?"),
    (lambda run, t: t["tokens_per_s_per_gpu"] / 3.5, "check its units, GPU count and configuration"),
])
def test_a_run_no_model_error_explains_is_held_out_and_named(figure, needle, tmp_path, capsys):
    """Four runs of a cluster at compute 0.8, and a fifth whose figure is 3x or more off what moetune predicts (further
    than any published run it predicts): it had pulled the refit off all five; now the fit is the four's, and the
    fifth is named with the unit slip its figure resembles. With --write the file is the four's fit."""
    from moetune.walls.step import step_time
    good = _as_measured_on(IDS, {"compute_scale": 0.8, "a2a_scale": 1.0}, tmp_path)
    rows = list(csv.DictReader(open(good)))
    odd = {**rows[0], "run_id": "odd"}
    run = load_user_runs(_write(tmp_path / "one.csv", [odd]))[0]
    predicted = step_time(run.model, run.layout, run.workload, run.knobs, run.gpu, efficiency("h100"))
    odd["tokens_per_s_per_gpu"] = f"{figure(run, predicted):.3f}"
    path = _write(tmp_path / "all.csv", rows + [odd])
    assert main(["calibrate", "--runs", path, "--json", "--write", str(tmp_path / "f.toml")]) == 0
    out = json.loads(capsys.readouterr().out)
    held = {r["run_id"]: r["held_out"] for r in out["runs"] if r["held_out"]}
    assert list(held) == ["odd"] and needle in held["odd"]
    assert out["fitted"]["h100"]["runs"] == len(IDS)
    assert out["fitted"]["h100"]["compute_scale"] == pytest.approx(0.8, rel=0.03)


def test_a_row_longer_than_the_header_is_refused_not_cut(tmp_path, capsys):
    """14,890 written with a thousands comma is two cells: the measurement would have read 14."""
    path = tmp_path / "ragged.csv"
    _write(path, [dict(published_rows()["R014"])])
    text = path.read_text().rstrip("\n")
    path.write_text(text + ",890\n")
    assert main(["calibrate", "--runs", str(path)]) == 2
    assert "1 more cell(s) than the header ('890')" in capsys.readouterr().err


def test_a_byte_order_mark_is_not_part_of_the_first_column(tmp_path):
    path = tmp_path / "bom.csv"
    _write(path, [dict(published_rows()["R014"])])
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert [r.run_id for r in load_user_runs(str(path))] == ["R014"]


def test_uneven_stage_columns_are_read(tmp_path):
    """first/last_stage_layers change the prediction as the same flags change estimate's."""
    row = {**published_rows()["R007"]}
    even = load_user_runs(_write(tmp_path / "even.csv", [row], (*COLUMNS, "first_stage_layers", "last_stage_layers")))
    row.update(first_stage_layers="3", last_stage_layers="3")
    uneven = load_user_runs(_write(tmp_path / "odd.csv", [row], (*COLUMNS, "first_stage_layers", "last_stage_layers")))
    assert even[0].layout.first_stage_layers is None and uneven[0].layout.first_stage_layers == 3
    shipped = efficiency("h100")
    assert predict(uneven[0], shipped).predicted != pytest.approx(predict(even[0], shipped).predicted, rel=0.01)


H800 = """[gpu]
name = "H800 SXM5"
arch = "hopper"
bf16_tflops = 989.4
fp8_tflops = 1978.9
fp4_tflops = 0
memory_gib = 78
hbm_tbps = 3.35
nvlink_gbps = 200
nvlink_domain = 8
gpus_per_node = 8
nic_gbps = 400
host_link_gbps = 64
gemm_tile = 128
tdp_w = 700
"""
# A GPU of each kind a runs CSV may name: catalog H100, H100 with another NIC (cluster file), another Hopper GPU and
# an AMD one ([gpu] tables); the last runs on the default priors, under the file's name
GPU_FILES = {"nic200.toml": 'gpu = "h100"\nnic_gbps = 200\n', "h800.toml": H800,
             "mi300x.toml": H800.replace('"H800 SXM5"', '"MI300X"').replace('"hopper"', '"cdna3"')}
# R103's model and layout on NCCL alltoall, eagerly: a configuration every one of them runs
EAGER = {"dispatcher": "alltoall", "flex_num_sms": "", "ep_overlap": "false", "cuda_graph_scope": ""}
EAGER_ARGS = ["qwen3-30b-a3b", "--gpus", "16", "--ep", "16", "--seq", "4096", "--gbs", "1024", "--mbs", "1",
              "--precision", "bf16", "--dispatcher", "alltoall", "--recompute", "none", "--cuda-graph-scope", "none",
              "--routing", "force-balance", "--mtp-layers", "0", "--bf16-grads"]


def _gpu(tmp_path, name):
    if name not in GPU_FILES:
        return name
    path = tmp_path / name
    path.write_text(GPU_FILES[name])
    return str(path)


def test_each_gpu_file_is_fitted_on_its_own_and_labelled_by_its_name(tmp_path, capsys):
    """Catalog H100, an H100 with a 200 Gb/s NIC and an H800 were shown as h100, fitted together and written to one
    [h100] section. Each is now its own GPU, named as given; one file cannot hold them, so --write refuses. One run
    each moves compute and all-to-all as one: each cluster here is evenly off the shipped constants."""
    scale = {"h100": 0.8, "nic200.toml": 1.1, "h800.toml": 0.6}
    rows = []
    for name, compute in scale.items():
        row = {**published_rows()["R103"], **EAGER, "run_id": name, "gpu": _gpu(tmp_path, name)}
        run = load_user_runs(_write(tmp_path / "one.csv", [row]))[0]
        truth = with_params(efficiency(run.gpu.key), {"compute_scale": compute, "a2a_scale": compute})
        rows.append({**row, "tokens_per_s_per_gpu": f"{predict(run, truth).predicted:.3f}"})
    path = _write(tmp_path / "mine.csv", rows)
    fitted = fit_user_runs(load_user_runs(path))
    assert sorted(fitted) == sorted(scale)
    for name, compute in scale.items():
        assert fitted[name]["runs"] == 1 and fitted[name]["compute_scale"] == pytest.approx(compute, rel=0.02)
        assert fitted[name]["tied"] and fitted[name]["a2a_scale"] == fitted[name]["compute_scale"]
    assert [fitted[n]["catalog_unchanged"] for n in ("h100", "nic200.toml", "h800.toml")] == [True, False, False]
    assert main(["calibrate", "--runs", path, "--json"]) == 0
    assert {r["run_id"]: r["gpu"] for r in json.loads(capsys.readouterr().out)["runs"]} == {n: n for n in scale}
    assert main(["calibrate", "--runs", path]) == 0
    assert "to keep them, put each GPU file's runs in a CSV of its own" in capsys.readouterr().out
    assert main(["calibrate", "--runs", path, "--write", str(tmp_path / "eff.toml")]) == 2
    err = capsys.readouterr().err
    assert "--write: your runs are on 3 GPUs" in err and "h800.toml" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "eff.toml").exists()


@pytest.mark.parametrize("name", ["h100", *GPU_FILES])
def test_the_written_file_is_read_back_for_the_same_gpu(name, tmp_path, capsys):
    """Whatever the GPU, --efficiency takes calibrate's file with the same --gpu, and the estimate moves as the fit
    did: a catalog GPU's section, otherwise the constants at the top level (an AMD table's section had been named
    after the file, [mi300x], which --efficiency refused)."""
    gpu = _gpu(tmp_path, name)
    row = {**published_rows()["R103"], **EAGER, "gpu": gpu}
    run = load_user_runs(_write(tmp_path / "one.csv", [row]))[0]
    truth = with_params(efficiency(run.gpu.key), {"compute_scale": 0.7})
    row["tokens_per_s_per_gpu"] = f"{predict(run, truth).predicted:.3f}"
    out = tmp_path / "eff.toml"
    assert main(["calibrate", "--runs", _write(tmp_path / "mine.csv", [row]), "--write", str(out), "--json"]) == 0
    (report,) = json.loads(capsys.readouterr().out)["runs"]
    assert (f"[{name}]" in out.read_text()) == (name == "h100")
    assert main(["estimate", *EAGER_ARGS, "--gpu", gpu, "--efficiency", str(out), "--json"]) == 0
    tokens = json.loads(capsys.readouterr().out)["time"]["tokens_per_s_per_gpu"]
    assert tokens == pytest.approx(report["fitted"], rel=1e-3)
    assert report["fitted"] == pytest.approx(report["measured"], rel=0.01)


def test_a_relative_gpu_file_is_read_from_the_csvs_folder(tmp_path, monkeypatch):
    """A CSV and its GPU files travel together: ../gpus/h800.toml is found from wherever calibrate runs."""
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "h800.toml").write_text(H800)
    (tmp_path / "runs").mkdir()
    path = _write(tmp_path / "runs" / "mine.csv", [{**published_rows()["R103"], **EAGER, "gpu": "../gpus/h800.toml"}])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    (run,) = load_user_runs(path)
    assert run.gpu.name == "H800 SXM5" and run.gpu.nvlink_gbps == 200
    assert list(fit_user_runs([run])) == ["h800.toml"]


def test_an_unknown_gpu_name_is_quoted_as_written(tmp_path, capsys):
    """A bare name that is no catalog GPU and no file beside the CSV had been joined to the CSV's folder, so the
    error named a path ('/tmp/.../h101') the user never typed."""
    path = _write(tmp_path / "mine.csv", [{**published_rows()["R103"], **EAGER, "gpu": "h101"}])
    assert main(["calibrate", "--runs", path]) == 2
    err = capsys.readouterr().err
    assert "line 2: unknown GPU 'h101': use one of a100, h100" in err and str(tmp_path / "h101") not in err


def test_a_directory_is_named_as_one(tmp_path, capsys):
    assert main(["calibrate", "--runs", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"--runs {tmp_path}: is a directory; pass the CSV file of your runs" in err


@pytest.mark.parametrize(("edit", "needle"), [
    ({"ep": "24"}, "covers every rank; change ep/etp/pp"),
    ({"tp": "3", "num_gpus": "48"}, "choose a tp that divides it"),
])
def test_a_layout_error_names_the_csv_columns_not_estimates_flags(edit, needle, tmp_path, capsys):
    path = _write(tmp_path / "bad.csv", [{**published_rows()["R103"], **edit}],
                  (*COLUMNS, "flex_num_sms", "mtp"))
    assert main(["calibrate", "--runs", path]) == 2
    err = capsys.readouterr().err
    assert needle in err and "--ep" not in err and "--tp" not in err


def test_a_capped_all_to_all_says_what_it_got_in_effect(tmp_path, capsys):
    """The cluster audit: a fit that raises the all-to-all where a dispatcher's efficiency is at the link cap reported
    the nominal multiplier alone. H100's DeepEP is shipped at the cap (0.95 of a link), so x1.26 moves it by x1.00, and
    NCCL alltoall's 0.99 reaches the cap at x1.20."""
    path = _as_measured_on(IDS, {"compute_scale": 1.0, "a2a_scale": 1.4}, tmp_path)
    assert main(["calibrate", "--runs", path]) == 0
    out = " ".join(capsys.readouterr().out.split())
    fitted = fit_user_runs(load_user_runs(path))["h100"]
    assert fitted["a2a_scale"] > 1.2 and "a2a_eff_deepep" in fitted["a2a_keys"]
    assert (f"all-to-all x {fitted['a2a_scale']:.3f} (a2a_eff_alltoall, a2a_eff_deepep) limit: capped: "
            "a2a_eff_alltoall (x1.20 in effect), a2a_eff_deepep (x1.00 in effect): your runs ask for more") in out
    assert out.count("in effect") == 2  # each capped efficiency named once (it had been twice: in effect, then limit)


def test_the_shipped_fit_names_the_dispatchers_held_at_the_cap(capsys):
    assert main(["calibrate", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for gpu, held in data["a2a_capped"].items():
        scale = data["fitted"][gpu]["a2a_scale"]
        assert all(v < scale for v in held.values())
        shipped = efficiency(gpu, priors_only=True)
        assert set(held) == {k.removeprefix("a2a_eff_") for k in A2A_KEYS
                             if shipped[k] * scale * shipped["nvlink_eff"] > 0.95 + 1e-9}


def test_a_run_predicted_not_to_fit_is_fitted_and_named(tmp_path, capsys):
    """A run that ran fitted: DBRX at EP8 on 8 H100 with full recompute, which moetune predicts far past 80 GB, is
    still fitted (its time calibrates) but named once, with its peak and the capacity, beside R014 that fits."""
    big = {**published_rows()["R014"], **EAGER, "run_id": "dbrx-ep8", "model": "dbrx", "num_gpus": "8",
           "global_batch_size": "64", "tp": "1", "pp": "1", "vpp": "1", "ep": "8", "precision": "bf16",
           "recompute": "full", "recompute_modules": "", "delay_wgrad": "false", "pipeline_layout": "",
           "tokens_per_s_per_gpu": "2000"}
    path = _write(tmp_path / "mine.csv", [dict(published_rows()["R014"]), big])
    over = {}
    for r in load_user_runs(path):
        e = estimate(r.model, r.gpu, r.layout, r.workload, r.knobs, with_time=False)
        if not e.fits:
            over[r.run_id] = (e.peak_bytes, e.gpu.capacity_bytes)
    assert list(over) == ["dbrx-ep8"] and over["dbrx-ep8"][0] > 2 * over["dbrx-ep8"][1]
    assert main(["calibrate", "--runs", path, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in data["runs"]] == ["R014", "dbrx-ep8"]  # kept in the fit
    assert [(w["run_id"], w["peak_bytes"], w["capacity_bytes"]) for w in data["memory_warnings"]] == \
        [("dbrx-ep8", *over["dbrx-ep8"])]
    assert main(["calibrate", "--runs", path]) == 0
    warned = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    peak, cap = (b / 2**30 for b in over["dbrx-ep8"])
    assert len(warned) == 1 and "run dbrx-ep8" in warned[0] and f"{peak:.1f} GiB" in warned[0], warned
    assert f"{cap:.1f} GiB h100" in warned[0] and "memory estimate or the row's layout is off" in warned[0]


def test_a_gpu_files_fit_is_kept_to_its_architecture(tmp_path, capsys):
    """Constants fitted on an H800 file sit at the top level of the written file, which applied them to any --gpu:
    GB200 had run on Hopper's fitted GEMM and all-to-all rates. The file now records the runs' architecture, and
    another architecture's GPU refuses it in one line; a Hopper GPU takes it."""
    row = {**published_rows()["R103"], **EAGER, "run_id": "h800", "gpu": _gpu(tmp_path, "h800.toml")}
    run = load_user_runs(_write(tmp_path / "one.csv", [row]))[0]
    row["tokens_per_s_per_gpu"] = f"{0.9 * predict(run, efficiency(run.gpu.key)).predicted:.3f}"
    written = tmp_path / "eff.toml"
    assert main(["calibrate", "--runs", _write(tmp_path / "mine.csv", [row]), "--write", str(written)]) == 0
    capsys.readouterr()
    assert 'fitted_arch = "hopper"' in written.read_text()
    args = ["estimate", "qwen3-30b-a3b", "--gpus", "16", "--ep", "16", "--efficiency", str(written)]
    assert main([*args, "--gpu", "gb200"]) == 2
    assert "was fitted on hopper runs" in capsys.readouterr().err
    assert main([*args, "--gpu", str(tmp_path / "h800.toml")]) == 0


def test_a_runs_step_time_is_its_measurement_where_tokens_are_left_out(tmp_path, capsys):
    """step_time_s, the figure Megatron's log prints, gives tokens/s/GPU (global batch x sequence / step / GPUs) where
    the row leaves tokens out; beside tokens it must agree with them within 10%, and each must be a number. A row
    pasted twice without run_ids is one run, not two."""
    row = {**published_rows()["R014"], "run_id": ""}
    gbs, seq, gpus = int(row["global_batch_size"]), int(row["seq_length"]), int(row["num_gpus"])
    columns = (*COLUMNS, "step_time_s")
    run = load_user_runs(_write(tmp_path / "s.csv", [{**row, "tokens_per_s_per_gpu": "", "step_time_s": "12.5"}],
                                columns))[0]
    assert run.tokens_per_s_per_gpu == pytest.approx(gbs * seq / 12.5 / gpus, rel=1e-5)
    for cells, needle in (({"step_time_s": "abc"}, "step_time_s = 'abc': expected a number"),
                          ({"tokens_per_s_per_gpu": f"{2 * gbs * seq / 12.5 / gpus:.1f}", "step_time_s": "12.5"},
                           "step_time_s = 12.5 implies")):
        path = _write(tmp_path / "bad.csv", [{**row, **cells}], columns)
        assert main(["calibrate", "--runs", path]) == 2 and needle in capsys.readouterr().err
    twice = _write(tmp_path / "twice.csv", [row, row])
    assert main(["calibrate", "--runs", twice]) == 2
    assert "line 2 and line 3 are the same run" in capsys.readouterr().err
