"""Dispatcher twins: kept candidates that differ only in the flex dispatcher's backend (DeepEP or HybridEP) and whose
ranked steps are equal. plan lists the one its ranking puts first and names the other on it, so a twin does not take
a row of --top from the next distinct candidate.

Why the step prices them alike: both backends send a token once per destination rank and expand it on arrival
(walls/comms.py fused_copies), both carry the GPU's one fitted all-to-all efficiency where the fit gave them the same
(data/efficiency.toml [h100]: a2a_eff_deepep = a2a_eff_hybridep = 1.187), and HybridEP's SM bound at the tuned 32 SMs
(32 x a2a_gbps_per_sm 14.6 = 467 GB/s, comms.fused_nvlink_rate) lies above the NVLink rate both reach on H100
(450 GB/s x nvlink_eff 0.75 x 1.187 = 401 GB/s), inside a node or across nodes (the NIC share is the same formula for
both). Their memory differs (memory_overheads.toml deepep_buffer_gib 2, hybridep_buffer_gib 1), so the twin's peak is
kept with the row. Where HybridEP's SM bound sets the pace (B200 with EP inside a node: 467 GB/s against the 801 that
DeepEP reaches; across nodes the NIC share outlasts both and they tie again) or a fit gives the two backends different
efficiencies (GB200: 0.657 and 0.698), they predict apart and both stay rows.
"""

from dataclasses import replace

from moetune.layout.knobs import TUNED_FLEX_SMS

# Relative difference of two ranked steps read as the same prediction: the step model's floating-point rounding
# (twins are priced by the same formulas), far below any wall a knob moves (ranking.SMALLEST_GAIN is 0.1%)
SAME_STEP = 1e-9


def _twins(a: tuple, b: tuple) -> bool:
    """Whether search entries (step, preference, layout, mbs, knobs, reach) A and B are twins: both flex backends,
    apart from that the same candidate, with the same step. The knobs are compared last (a replace costs ~20 us, and
    a search holds hundreds of entries)."""
    ka, kb = a[4], b[4]
    return (ka.dispatcher != kb.dispatcher and ka.dispatcher in TUNED_FLEX_SMS and kb.dispatcher in TUNED_FLEX_SMS
            and a[2:4] == b[2:4] and _same(a[0], b[0]) and replace(kb, dispatcher=ka.dispatcher) == ka)


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


def entries_for(best: list, rows: int) -> int:
    """How many entries of `best` it takes to show `rows` rows once twins fold (all of them where it has fewer)."""
    kept = fold_twins(best)[0]
    return best.index(kept[rows - 1]) + 1 if len(kept) >= rows else len(best)
