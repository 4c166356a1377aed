"""Layouts stamped from a checked one at other TP, CP, EP and ETP sizes: the planner's enumeration builds ~6k a plan,
and Layout's own construction (its frozen fields set one by one, then every check again) was a share of the plan.

A stamp fills the slots of a plain twin of Layout, then becomes a Layout (CPython allows assigning `__class__`
between classes of one slot layout): the result equals, hashes and reads like `Layout(...)` of the same fields
(tests/planner/test_layout_stamp.py).
"""

from dataclasses import fields

from moetune.layout.layout import Layout, derived_sizes


class _Stamp:
    __slots__ = Layout.__slots__

    def __init__(self, t: Layout, tp: int, cp: int, ep: int, etp: int) -> None:
        self.world_size, self.tp, self.cp, self.pp, self.vpp, self.ep, self.etp = t.world_size, tp, cp, t.pp, t.vpp, \
            ep, etp
        self.sequence_parallel, self.first_stage_layers, self.last_stage_layers = t.sequence_parallel, \
            t.first_stage_layers, t.last_stage_layers
        self.pipeline_layout, self.account_for_embedding, self.account_for_loss = t.pipeline_layout, \
            t.account_for_embedding, t.account_for_loss
        self.dp, self.edp, self.sp = derived_sizes(t.world_size, tp, cp, t.pp, ep, etp, t.sequence_parallel)
        self._hash = None  # worked out at the first lookup, as Layout's own
        self.__class__ = Layout  # type: ignore[assignment]


# every field of Layout gets its value above: a new one must be added there (its slot would be left unset)
assert Layout.__slots__ == tuple(f.name for f in fields(Layout)) == (
    "world_size", "tp", "cp", "pp", "vpp", "ep", "etp", "sequence_parallel", "first_stage_layers", "last_stage_layers",
    "pipeline_layout", "account_for_embedding", "account_for_loss", "dp", "edp", "sp", "_hash"), \
    "stamp Layout's new field"


def stamp(template: Layout, tp: int, cp: int, ep: int, etp: int) -> Layout:
    """`template` at these TP, CP, EP and ETP sizes, without running Layout's checks again:
    the caller has checked the template, that the two meshes divide the world at these sizes, and that each size is at
    least 1, which is all those checks read of them (layout/layout.py __post_init__)."""
    return _Stamp(template, tp, cp, ep, etp)  # type: ignore[return-value]
