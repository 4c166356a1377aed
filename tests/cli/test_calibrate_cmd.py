"""calibrate as a user reads it: the lines it prints about the runs it fits."""


def test_calibrate_names_a_host_misfit_in_whole_words():
    """The host half of calibrate's memory warning says both sizes in GiB (it had read "... a GPU of 240"), and the
    GPU's size takes "an" before 80 (it had read "on a 80.0 GiB h100")."""
    from moetune.cli.calibrate_cmd import _misfit_line
    gib = 2**30
    line = _misfit_line({"run_id": "R1", "peak_bytes": 90 * gib, "capacity_bytes": 80 * gib,
                         "host_peak_bytes": 300 * gib, "host_capacity_bytes": 240 * gib}, "h100")
    assert "a peak of 90.0 GiB on an 80.0 GiB h100" in line
    assert "300 GiB of host memory a GPU, past its 240 GiB share of the host" in line


def test_a_tied_refit_says_what_it_assumed_and_how_each_run_is_met(tmp_path, capsys):
    """Runs that cannot tell compute from all-to-all apart (R176, R194, R212 each measured 10% under their published
    figure): the report says one factor moved both and why, and how far the refit is off each run, the figures of the
    table's refit column; the written file says the same and carries HybridEP's moved efficiency."""
    import csv
    import re

    from tests.planner.test_user_runs_tied import COLUMNS, _slower_runs

    from moetune.cli.main import main
    _slower_runs(tmp_path, "published")
    path, out = tmp_path / "mine.csv", tmp_path / "eff.toml"
    assert [r["run_id"] for r in csv.DictReader(open(path))] == ["R176", "R194", "R212"]
    assert set(next(csv.reader(open(path)))) == set(COLUMNS)
    assert main(["calibrate", "--runs", str(path), "--write", str(out)]) == 0
    printed = capsys.readouterr().out
    text = " ".join(printed.split())
    assert re.search(r"gb200: 3 run\(s\): compute and all-to-all \(a2a_eff_hybridep\) x 0\.\d{3} together", text)
    assert ("assumed: your cluster evenly off the shipped constants (one factor for both), since your runs split "
            "their step between compute") in text and "too alike to tell the two apart" in text
    matched = dict(re.findall(r"(R\d{3}) ([+-]\d+\.\d)%", text.split("your runs now matched at ")[1]))
    table = {m[0]: m[1] for m in re.findall(r"│ (R\d{3}) │.*│ ([+-]\d+\.\d)% │\n", printed)}
    assert list(matched) == ["R176", "R194", "R212"] and matched == table
    assert all(abs(float(e)) < 3 for e in matched.values())
    written = out.read_text()
    assert "compute and all-to-all (a2a_eff_hybridep) x 0." in written and "a2a_eff_hybridep = " in written


def test_many_runs_are_met_within_a_range():
    """Past six runs the errors print as their range, not by name."""
    from moetune.cli.calibrate_cmd import MATCHED_BY_NAME, _matched
    rows = [{"run_id": f"r{i}", "gpu": "h100", "held_out": None, "measured": 100.0, "fitted": 100.0 + i}
            for i in range(MATCHED_BY_NAME + 1)]
    rows += [{"run_id": "other", "gpu": "b200", "held_out": None, "measured": 100.0, "fitted": 150.0},
             {"run_id": "odd", "gpu": "h100", "held_out": "3x off", "measured": 100.0, "fitted": None}]
    assert _matched(rows, "h100") == "matched within +0.0% to +6.0%"
    assert _matched(rows[:2], "h100") == "matched at r0 +0.0%, r1 +1.0%"
