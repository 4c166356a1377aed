"""Published runs that measured one configuration more than once, and the ones whose measurements lie so far apart
that no prediction can be within a tolerance of all of them.

A prediction p is within t of a measurement m when |p / m - 1| <= t, so it meets every measurement of a
configuration only if max(m) x (1 - t) <= min(m) x (1 + t): measurements spread wider than (1 + t) / (1 - t) (1.35
at 15%) bound what any step-time model can reach, whatever its constants. moetune calibrate reports them beside its
own misses, so a reader can tell a miss the model could remove from one the data forces.
"""

from collections import defaultdict
from dataclasses import dataclass, replace

from moetune.planner.runs import TOLERANCE, Run, load_configured_runs, tokens_from_tflops


def configuration(run: Run) -> tuple:
    """What was run: an SM count left to the default and the same count written out are one configuration."""
    return run.model.name, run.gpu.key, run.layout, run.workload, replace(run.knobs,
                                                                          flex_num_sms=run.knobs.num_sms or None)


def reruns(runs: list[Run], of: list[Run]) -> list[Run]:
    """The runs of RUNS whose configuration is one of OF's: a later release or another measurement of it."""
    seen = {configuration(r) for r in of}
    return [r for r in runs if configuration(r) in seen]


def measured_tokens(run: Run) -> float | None:
    """Tokens/s/GPU as published, or converted from TFLOP/s where every FLOP convention agrees; else None."""
    return run.tokens_per_s_per_gpu or tokens_from_tflops(run)


@dataclass(kw_only=True, slots=True)
class Repeat:
    run_ids: tuple[str, ...]  # the runs of one configuration, fastest first
    measured: tuple[float, ...]  # tokens/s/GPU, in the same order

    @property
    def spread(self) -> float:
        """Fastest over slowest measurement."""
        return self.measured[0] / self.measured[-1]

    def meetable(self, tolerance: float) -> bool:
        """Whether one prediction can be within `tolerance` of every measurement."""
        return self.measured[0] * (1 - tolerance) <= self.measured[-1] * (1 + tolerance)

    def least_misses(self, tolerance: float) -> int:
        """Fewest runs of this configuration that any single prediction must miss by more than `tolerance`: all but
        the largest set of measurements one prediction can meet (a window of ratio (1 + t) / (1 - t))."""
        width = (1 + tolerance) / (1 - tolerance)
        kept = max(sum(low <= m <= low * width for m in self.measured) for low in self.measured)
        return len(self.measured) - kept


def repeats(runs: list[Run] | None = None) -> list[Repeat]:
    """Every configuration measured more than once (tokens/s/GPU known), widest spread first."""
    groups = defaultdict(list)
    for run in runs if runs is not None else load_configured_runs():
        if (tokens := measured_tokens(run)) is not None:
            groups[configuration(run)].append((tokens, run.run_id))
    found = [sorted(g, reverse=True) for g in groups.values() if len(g) > 1]
    return sorted((Repeat(run_ids=tuple(r for _, r in g), measured=tuple(m for m, _ in g)) for g in found),
                  key=lambda r: -r.spread)


def unmeetable(tolerance: float = TOLERANCE, runs: list[Run] | None = None) -> list[Repeat]:
    """The repeats no prediction can meet within `tolerance`."""
    return [r for r in repeats(runs) if not r.meetable(tolerance)]
