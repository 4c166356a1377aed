"""bench/bench_diagnose.py runs end to end on a small trace, with and without ijson (it once named the parser through
profile/reader.py, which never held it, and failed before timing anything)."""

import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_diagnose.py"


def test_bench_diagnose_runs_on_a_small_trace():
    env = {**os.environ, "PYTHONPATH": str(BENCH.parents[1] / "src")}
    done = subprocess.run([sys.executable, str(BENCH), "--mb", "0.3", "--stdlib"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "diagnose (ijson" in done.stdout and "diagnose (json.load fallback)" in done.stdout
