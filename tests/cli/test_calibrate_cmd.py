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
