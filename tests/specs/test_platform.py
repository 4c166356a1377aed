"""The platform's policy (specs/platform.py): which flex backend runs an EP group."""

from moetune.specs.platform import spanning_backend


def test_spanning_backend_drops_hybridep_where_it_does_not_span_alone():
    """Where HybridEP does not span the EP group (past the job's domain on a rack: layout/ranks.py hybridep_spans)
    DeepEP runs where Bridge runs it (a B200 cluster file with a 72-GPU domain), else alltoall (None; Grace-Blackwell).
    Other backends stay wherever HybridEP would not span, and EP 1 or a platform without a flex default runs
    alltoall."""
    assert spanning_backend("hybridep", 128, hybridep_spans=False, deepep=False) is None
    assert spanning_backend("hybridep", 128, hybridep_spans=False, deepep=True) == "deepep"  # B200s on a rack
    assert spanning_backend("hybridep", 64, hybridep_spans=True, deepep=False) == "hybridep"
    assert spanning_backend("deepep", 128, hybridep_spans=False, deepep=True) == "deepep"
    assert spanning_backend("deepep", 1, hybridep_spans=True, deepep=True) is None  # EP 1: nothing to accelerate
    assert spanning_backend("hybridep", 1, hybridep_spans=True, deepep=True) is None
    assert spanning_backend(None, 128, hybridep_spans=True, deepep=True) is None
    assert spanning_backend("alltoall", 128, hybridep_spans=True, deepep=True) is None
