"""planner/layout_stamp.py: a stamped layout is the Layout its fields build (equal, same hash, same derived sizes)."""

from moetune.layout.layout import Layout
from moetune.planner.layout_stamp import stamp

_FIELDS = ("world_size", "tp", "cp", "pp", "vpp", "ep", "etp", "sequence_parallel", "first_stage_layers",
           "last_stage_layers", "pipeline_layout", "account_for_embedding", "account_for_loss", "dp", "edp", "sp")


def test_stamp_matches_layout():
    template = Layout(world_size=1024, pp=8, vpp=4, pipeline_layout=None, account_for_embedding=True,
                      account_for_loss=True)
    hash(template)  # Layout keeps its hash once worked out: a stamp must not carry the template's
    got = stamp(template, 2, 4, 16, 2)
    built = Layout(world_size=1024, tp=2, cp=4, pp=8, vpp=4, ep=16, etp=2, account_for_embedding=True,
                   account_for_loss=True)
    assert type(got) is Layout and got == built and hash(got) == hash(built) != hash(template)
    assert [getattr(got, f) for f in _FIELDS] == [getattr(built, f) for f in _FIELDS]
    # 1024 / (TP 2 x CP 4 x PP 8) = 16 attention DP; 1024 / (ETP 2 x EP 16 x PP 8) = 4 expert DP; SP on at TP 2
    assert (got.dp, got.edp, got.sp) == (16, 4, True)
