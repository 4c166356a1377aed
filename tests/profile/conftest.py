"""Fixtures for diagnose tests, and an independent oracle over raw trace JSON.

The oracle loads a trace with the standard ``json`` module (not our streaming reader) reading every
number as an exact Decimal, picks events by plain name tests (not kernel_classes.yaml) and measures
time with a sweep line of +1/-1 events (not the interval merging in moetune.profile.intervals), so
agreement means something. Timestamps become float microseconds from the first event only after the
exact subtraction: epoch timestamps (~1.7e15 us) read straight into a float keep only 0.25 us.
"""

import gzip
import json
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import pytest

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "traces"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


@lru_cache(maxsize=4)  # read-only use: each real trace is parsed once per session
def load(path: Path) -> dict:
    with gzip.open(path, "rt") if str(path).endswith(".gz") else open(path) as fh:
        doc = json.load(fh, parse_float=Decimal)
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    origin = min(Decimal(e["ts"]) for e in events if "ts" in e)
    for e in events:
        if "ts" in e:
            e["ts"] = float(Decimal(e["ts"]) - origin)
        if "dur" in e:
            e["dur"] = float(e["dur"])
    return doc


def gpu_events(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU_CATS]


def profiler_steps(doc: dict) -> list[tuple[str, float, float]]:
    steps = [(e["name"], e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"]
             if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#")]
    return sorted(steps, key=lambda s: s[1])


def launching_c10d_op(doc: dict) -> dict[int, str]:
    """correlation -> name of the innermost c10d:: CPU op around the launch call of each NCCL kernel
    that does not name its collective itself (brute force over all pairs; traces have few of each)."""
    evs = doc["traceEvents"]
    runtime = {e["args"]["correlation"]: e for e in evs if e.get("cat") == "cuda_runtime"}
    c10d = [e for e in evs if e.get("cat") == "cpu_op" and e["name"].startswith("c10d::")]
    out = {}
    for k in evs:
        launch = runtime.get(k.get("args", {}).get("correlation")) if k.get("cat") == "kernel" else None
        if launch is None or not k["name"].startswith("nccl") or "Collective name" in k["args"]:
            continue
        around = [o for o in c10d if o["tid"] == launch["tid"] and o["ts"] <= launch["ts"] <= o["ts"] + o["dur"]]
        if around:
            out[k["args"]["correlation"]] = max(around, key=lambda o: o["ts"])["name"]
    return out


def clipped_sum(events: list[dict], lo: float, hi: float) -> float:
    """Seconds of the events inside [lo, hi], summed (overlaps counted twice)."""
    return sum(max(0.0, min(e["ts"] + e["dur"], hi) - max(e["ts"], lo)) for e in events) * 1e-6


def _sweep(groups: list[list[dict]], lo: float, hi: float, want) -> float:
    """Seconds in [lo, hi] where want(counts) holds; counts[i] = events of group i running."""
    points = []
    for g, events in enumerate(groups):
        for e in events:
            s, t = max(e["ts"], lo), min(e["ts"] + e["dur"], hi)
            if t > s:
                points += [(s, 1, g), (t, -1, g)]
    points.sort()
    counts, total, prev = [0] * len(groups), 0.0, lo
    for x, delta, g in points:
        if want(counts):
            total += x - prev
        counts[g] += delta
        prev = x
    return total * 1e-6


def covered(events: list[dict], lo: float, hi: float) -> float:
    return _sweep([events], lo, hi, lambda c: c[0] > 0)


def exposed(comm: list[dict], compute: list[dict], lo: float, hi: float) -> float:
    return _sweep([comm, compute], lo, hi, lambda c: c[0] > 0 and c[1] == 0)


@pytest.fixture(scope="session")
def oracle():
    return SimpleNamespace(load=load, launching_c10d_op=launching_c10d_op, gpu_events=gpu_events, steps=profiler_steps,
                           clipped_sum=clipped_sum, covered=covered, exposed=exposed)


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    if not TRACES.exists():
        pytest.skip("../shared/data/traces is not beside the repository")
    return TRACES


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES
