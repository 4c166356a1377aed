"""Dispatcher twins: kept candidates that differ only in the flex dispatcher's backend (DeepEP or HybridEP) and whose
ranked steps are equal. plan lists the one its ranking puts first and names the other on it, so a twin does not take
a row of --top from the next distinct candidate.

When the step prices them alike is walls/comms.py dispatch_price's to say (the constants and figures are there, and
tests/walls/test_batch_keys.py holds it): the two backends differ in the step model only by their fitted a2a_eff and
HybridEP's SM-bound NVLink rate, which coincide on A100 and Hopper and part on NVLink5 and where a fit gives the two
different efficiencies. Their memory differs (memory_overheads.toml deepep_buffer_gib, hybridep_buffer_gib), so the
twin's peak is kept with the row.

Twins fold by their ranked steps being equal (SAME_STEP), not by an equal price (walls/batch_keys.py step_key): an
equal price gives an equal step, but the steps may also meet where the prices part (the NIC share outlasting both
backends' NVLink copies across nodes on B200, test_batch_keys.py), and the ranked step is each entry's own, after its
re-split (planner/resplit.py), which a key of the knobs does not see. Comparing the outcome folds exactly the rows
that would show the same prediction.
"""

from dataclasses import fields

from moetune.layout.knobs import TUNED_FLEX_SMS, Knobs

# Relative difference of two ranked steps read as the same prediction: the step model's floating-point rounding
# (twins are priced by the same formulas), far below any wall a knob moves (ranking.SMALLEST_GAIN is 0.1%)
SAME_STEP = 1e-9


# every knob but the dispatcher: what twins share
_BUT_DISPATCHER = tuple(f.name for f in fields(Knobs) if f.name != "dispatcher")


def _twins(a: tuple, b: tuple) -> bool:
    """Whether search entries (step, preference, layout, mbs, knobs, reach) A and B are twins: both flex backends,
    apart from that the same candidate, with the same step. The knobs are compared last, field by field (a replace
    would validate a new knob set each time, and a search holds hundreds of entries)."""
    ka, kb = a[4], b[4]
    return (ka.dispatcher != kb.dispatcher and ka.dispatcher in TUNED_FLEX_SMS and kb.dispatcher in TUNED_FLEX_SMS
            and a[2:4] == b[2:4] and _same(a[0], b[0])
            and all(getattr(ka, n) == getattr(kb, n) for n in _BUT_DISPATCHER))


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= SAME_STEP * max(a, b)


def fold_twins(best: list) -> tuple[list, dict]:
    """`best` (Search.best, ranked) without each entry that an entry ranked above it twins, and the twins' knobs by
    the entry kept: {(layout, mbs, knobs): [knobs, ...]}."""
    kept, twins, by_candidate = [], {}, {}
    for entry in best:
        shown = by_candidate.setdefault(entry[2:4], [])  # the kept entries of its layout and micro-batch
        first = next((k for k in shown if _twins(k, entry)), None)
        if first is not None:
            twins.setdefault(first[2:5], []).append(entry[4])
            continue
        shown.append(entry)
        kept.append(entry)
    return kept, twins


def entries_for(best: list, kept: list, rows: int) -> int:
    """How many entries of `best` it takes to show `rows` rows once twins fold (`kept`: fold_twins of it; all of them
    where it has fewer)."""
    return best.index(kept[rows - 1]) + 1 if len(kept) >= rows else len(best)
