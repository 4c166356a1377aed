"""Time `diagnose` on a large synthetic Kineto trace (issue: a 100 MB trace in under 30 s).

    PYTHONPATH=src python bench/bench_diagnose.py [--mb 100] [--gz] [--stdlib]

The trace is the DeepEP scenario of moetune.profile.synthetic repeated until the file reaches --mb
megabytes of JSON, with two cpu_op events and a flow event per GPU op so the event mix resembles a
real profile (most events are CPU-side and are skipped by the reader). --stdlib also times the
json.load fallback used when ijson is missing.
"""

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

from moetune.profile import diagnose, trace_json
from moetune.profile.synthetic import deepep_rank_wait, write_trace


def build(directory: Path, megabytes: float, gz: bool) -> tuple[Path, int]:
    probe = write_trace(deepep_rank_wait(steps=20, cpu_noise=2), directory / "probe.json")
    steps = max(3, int(20 * megabytes * 1e6 / probe.stat().st_size))
    probe.unlink()
    name = "rank0.json.gz" if gz else "rank0.json"
    return write_trace(deepep_rank_wait(steps=steps, cpu_noise=2), directory / name), steps


def timed(path: Path) -> tuple[float, object]:
    start = time.perf_counter()
    result = diagnose([path])
    return time.perf_counter() - start, result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=100.0, help="uncompressed JSON size to generate")
    ap.add_argument("--gz", action="store_true", help="write and read the trace gzip-compressed")
    ap.add_argument("--stdlib", action="store_true", help="also time the json.load fallback")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path, steps = build(Path(tmp), args.mb, args.gz)
        print(f"generated {path.name}: {path.stat().st_size / 1e6:.1f} MB on disk, {steps} steps "
              f"in {time.perf_counter() - t0:.1f} s")
        seconds, result = timed(path)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"diagnose (ijson {trace_json.ijson.backend if trace_json.ijson else 'missing'}): {seconds:.2f} s, "
              f"peak RSS {rss:.0f} MiB, wall={result.dominant_wall}, step={result.step_seconds * 1e3:.3f} ms")
        if args.stdlib:
            trace_json.ijson, saved = None, trace_json.ijson
            seconds_std, _ = timed(path)
            trace_json.ijson = saved
            print(f"diagnose (json.load fallback): {seconds_std:.2f} s")
    return 0 if seconds < 30 else 1


if __name__ == "__main__":
    sys.exit(main())
