"""Cross-check with Holistic Trace Analysis where it is installed (optional: pip install HolisticTraceAnalysis).

HTA's temporal breakdown (hta/analyzers/breakdown_analysis.py get_temporal_breakdown) measures GPU
idle time and the merged time of computation kernels from the first to the last kernel it keeps; it
keeps the GPU ops whose launch call precedes the last ProfilerStep (hta/common/trace.py
_filter_irrelevant_gpu_kernels). Applying the same selection to our reader's ops, our interval code
must give HTA's figures on the real traces.
"""

import shutil

import pytest

from moetune.profile import intervals as iv
from moetune.profile import read_trace
from moetune.profile.kernels import COMPUTE, class_kind

hta = pytest.importorskip("hta.trace_analysis")


@pytest.mark.parametrize("name", ["a100_2rank_allreduce.json.gz", "a100_16rank_sendrecv_rank0.json.gz",
                                  "v100_1rank_compute.json.gz"])
def test_idle_and_compute_time_match_hta(name, traces_dir, tmp_path, monkeypatch):
    # HTA otherwise rounds ns-resolution kernels inward to whole microseconds (ts up, end down),
    # which inflates idle time by up to 2 us per kernel (hta/common/trace_parser.py).
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    shutil.copy(traces_dir / name, tmp_path / name)
    row = hta.TraceAnalysis(trace_dir=str(tmp_path)).get_temporal_breakdown(visualize=False).iloc[0]
    trace = read_trace(traces_dir / name)
    last_step = trace.steps[-1].start
    kept = [op for op in trace.ops if trace.launches.get(op.correlation, last_step) < last_step]
    spans = [(op.start, op.end) for op in kept]
    busy = iv.union(spans)
    window = (min(s for s, _ in spans), max(e for _, e in spans))
    idle = (window[1] - window[0]) - iv.length(busy)
    compute = iv.length(iv.union((op.start, op.end) for op in kept if class_kind(op.cls) == COMPUTE))
    # HTA reads epoch microsecond timestamps into float64 (0.25 us steps); we keep them exact.
    assert idle == pytest.approx(row["idle_time(us)"], rel=1e-4)
    assert compute == pytest.approx(row["compute_time(us)"], rel=1e-4)
