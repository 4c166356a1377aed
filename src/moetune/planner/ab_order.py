"""The measured order within each A/B group of the published runs (published_runs.csv `ab_group`: one model, one
cluster, one source), against the predicted order.

A pair of different configurations counts only when its measured gap is larger than the group's own repeat noise
(the largest gap between two rows of the group that measured the same configuration twice), and at least
NOISE_FLOOR when the group has no repeat: a smaller gap says nothing about order. Such a pair is a tie, which a
prediction meets by predicting the two close (tied_pairs): a model that puts them far apart (FP8 against BF16 where
both measured the same) is wrong about the gap, whichever way it orders them.
"""

from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations

from moetune.planner.calibrate import predict
from moetune.planner.repeats import configuration
from moetune.planner.runs import Run, load_configured_runs, published_rows
from moetune.walls.efficiency import efficiency

# Gap below which a group with no repeated measurement says nothing about order. Our choice, between the repeat
# spreads the data shows (0.6% for the GB300 weak-scaling cards, 2.7%-7% for the Megatron-LM README re-measures).
NOISE_FLOOR = 0.02
# How far the predicted ratio of a tie (two configurations measured within their group's noise) may lie from the
# measured one: our choice, a gap at which a user would pick one over the other.
TIE_TOLERANCE = 0.10


@dataclass(kw_only=True, slots=True)
class OrderedPair:
    group: str
    faster: str  # run_id measured faster
    slower: str
    measured_gap: float  # faster / slower - 1, measured
    predicted_gap: float  # the same ratio, predicted (negative: predicted in the other order)

    @property
    def agrees(self) -> bool:
        return self.predicted_gap > 0


def _metric(rows: list[dict]) -> str | None:
    """The throughput column every row of a group publishes: tokens/s/GPU, else TFLOP/s/GPU (within one model and
    source either orders the same); None when the rows publish different ones."""
    for column in ("tokens_per_s_per_gpu", "tflops_per_gpu"):
        if all(r[column] for r in rows):
            return column
    return None


def group_pairs(ties: bool = False) -> list[tuple[str, Run, Run, float]]:
    """(group, faster run, slower run, measured gap) for every pair that counts; with `ties`, for every pair of
    different configurations measured within the group's noise instead."""
    rows, runs = published_rows(), {r.run_id: r for r in load_configured_runs()}
    groups = defaultdict(list)
    for rid, row in rows.items():
        if row["ab_group"] and rid in runs:
            groups[row["ab_group"]].append(rid)
    out = []
    for name, ids in sorted(groups.items()):
        column = _metric([rows[i] for i in ids])
        if column is None:
            continue
        value = {i: float(rows[i][column]) for i in ids}
        pairs = [tuple(sorted((a, b), key=lambda r: -value[r])) for a, b in combinations(sorted(ids), 2)]
        gap = {(a, b): value[a] / value[b] - 1 for a, b in pairs}
        repeats = [gap[p] for p in pairs if configuration(runs[p[0]]) == configuration(runs[p[1]])]
        noise = max(repeats, default=NOISE_FLOOR)
        out += [(name, runs[a], runs[b], gap[(a, b)]) for a, b in pairs
                if configuration(runs[a]) != configuration(runs[b]) and (gap[(a, b)] <= noise) == ties]
    return out


def ordered_pairs(effs: dict | None = None, ties: bool = False) -> list[OrderedPair]:
    """Every counted pair (with `ties`, every tie) with its measured and predicted gaps (`effs`: efficiency
    constants per GPU key; the shipped ones by default). Each run is predicted once, however many pairs it is in."""
    pairs, predicted = group_pairs(ties), {}
    for run in {r.run_id: r for _, fast, slow, _ in pairs for r in (fast, slow)}.values():
        predicted[run.run_id] = predict(run, (effs or {}).get(run.gpu.key) or efficiency(run.gpu.key)).predicted
    return [OrderedPair(group=group, faster=fast.run_id, slower=slow.run_id, measured_gap=gap,
                        predicted_gap=predicted[fast.run_id] / predicted[slow.run_id] - 1)
            for group, fast, slow, gap in pairs]


def tied_apart(ties: list[OrderedPair], tolerance: float = TIE_TOLERANCE) -> list[OrderedPair]:
    """The ties whose predicted ratio lies more than `tolerance` from the measured one, either way."""
    return [q for q in ties if abs((1 + q.predicted_gap) / (1 + q.measured_gap) - 1) > tolerance]
