"""A log that is one node's output followed by another's: rank 0's node's log, then the last node's (torchrun writes
each node's ranks apart, and docs/diagnose.md asks for them in that order). Rank 0 prints every launch's start-up lines
(log_runs.STARTUP) and the last rank every iteration line (Megatron-LM megatron/training @ core_v0.18.2: print_rank_0,
print_rank_last), so where the job was relaunched both launches' start-up lines come before any iteration line, and
the iteration lines after them are the two launches' together: each part is split into its own launches, and the
iteration lines are paired with rank 0's launches by what they carry. profile/megatron_log.py parse_log reads the
latest launch that logged iterations (as it reads a single relaunched log's last run), from this file's lines.

Pairing, by time where both parts carry it: rank 0 stamps each launch's start-up (training.py print_datetime and
Bridge's barrier_and_log, from Megatron-LM training/utils/log_utils.py: ``[after megatron is initialized] datetime:
2025-05-18 10:00:31``) and the last rank each iteration line (training.py:2627 training_log, Bridge
training/utils/train_utils.py:1173 @ v0.6.0: `` [2025-05-18 10:02:10.120311] iteration``): a line stamped before a
launch's first stamp was logged by an earlier launch. Without stamps, by the count: the iteration lines split where a
number goes back (a launch's count only rises: log_runs.Stray), and their runs pair with rank 0's launches from the
last."""

import re
from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime

from moetune.profile.log_runs import STARTUP, interval_strays, is_iteration, run_notes

_TIME = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})?)"
ITERATION_STAMP = re.compile(r"\[" + _TIME + r"\]\s*iteration\b")
LAUNCH_STAMP = re.compile(r"\] datetime: " + _TIME)


@dataclass(frozen=True, slots=True)
class Joined:
    """Where rank 0's part ends (``cut``, the other node's first iteration line), where each of its launches begins
    (``starts``), each iteration line's launch (``owners``: index in starts, -1 before the first), and how they were
    paired (``by_time``)."""
    cut: int
    starts: list[int]
    iterations: list[int]
    owners: list[int]
    by_time: bool
    runs: int  # runs of iteration lines the other node's part holds (by_time: launches that logged any)

    @property
    def latest(self) -> int:
        """The latest launch that logged iteration lines: the one whose figures are read."""
        return max(self.owners)

    def kept(self, count: int) -> list[bool]:
        """Which of the log's `count` lines are the latest launch's: its span of rank 0's part, and the other node's
        lines from the one after an earlier launch's last iteration line (as a log without start-up lines splits,
        log_runs.last_run) to the end or to the line before a later one's."""
        k = self.latest
        keep = [False] * count
        end = self.starts[k + 1] if k + 1 < len(self.starts) else self.cut
        keep[self.starts[k]:end] = [True] * (end - self.starts[k])
        first = max((i + 1 for i, o in zip(self.iterations, self.owners) if o < k), default=self.cut)
        keep[first:count] = [True] * (count - first)
        return keep

    def notes(self, path: str, lines: list[str], first: int | None) -> list[str]:
        """What the reading passed over, in notes (log_runs.run_notes' words where it is the same thing)."""
        k, runs = self.latest, len(set(self.owners))
        at = next(i for i, o in zip(self.iterations, self.owners) if o == k)
        how = "their time stamps" if self.by_time else "their count going back, from the last launch on" + (
            f" ({len(self.starts)} launches, {self.runs} runs of iteration lines: which launch logged which is not "
            "told)" * (self.runs != len(self.starts)))
        said = (f"--log {path} is rank 0's node's log (to line {self.cut}) followed by another node's (from line "
                f"{self.cut + 1}), whose iteration lines are paired with rank 0's launches by {how}")
        if runs > 1:
            said += (f", and holds {runs} runs (Megatron started again {runs - 1} time(s)): the figures are the last "
                     f"run's, its start-up from line {self.starts[k] + 1} and its iteration lines from line {at + 1}, "
                     f"iteration {first} on")
        else:
            said += f": the figures are the launch from line {self.starts[k] + 1}"
        failed = self.starts[k + 1] if k + 1 < len(self.starts) else None
        return [said] + run_notes(path, lines[:self.cut], 0, 1, failed, first)


def launch_starts(lines: list[str], end: int) -> list[int]:
    """Where each launch in lines[:end] (rank 0's part, no iteration line) begins: the first at 0, each next at a
    start-up line its launch had printed already (a launch prints each once: log_runs.last_run)."""
    starts, seen = [0], set()
    for i in range(end):
        if up := STARTUP.search(lines[i]):
            if up.group(0) in seen:
                starts.append(i)
                seen = set()
            seen.add(up.group(0))
    return starts


def _stamp(line: str, rx: re.Pattern) -> datetime | None:
    return datetime.fromisoformat(m.group(1)) if (m := rx.search(line)) else None


def _by_time(lines: list[str], starts: list[int], cut: int, iterations: list[int]) -> list[int] | None:
    """Each iteration line's launch by time: the last whose first stamp is not after the line's; None where a launch
    or an iteration line carries no stamp, or the lines' launches do not follow one another in order."""
    ends = [*starts[1:], cut]
    begun = [min((t for i in range(s, e) if (t := _stamp(lines[i], LAUNCH_STAMP))), default=None)
             for s, e in zip(starts, ends)]
    stamps = [_stamp(lines[i], ITERATION_STAMP) for i in iterations]
    if None in begun or None in stamps or begun != sorted(begun):
        return None
    owners = [bisect_right(begun, t) - 1 for t in stamps]
    return owners if owners == sorted(owners) else None  # one process's lines come in time order: else a stamp garbled


def _by_count(lines: list[str], launches: int, iterations: list[int]) -> tuple[list[int], int]:
    """Each iteration line's launch by its run (split where a number goes back, a stray line aside:
    log_runs.interval_strays), the runs paired with the launches from the last (-1 and below: before the first);
    and how many runs."""
    marks = [(i, int(is_iteration(lines[i]).group(1))) for i in iterations]
    passed, run, last, runs = interval_strays(marks), 0, None, []
    for i, number in marks:
        if i not in passed:
            run += last is not None and number < last
            last = number
        runs.append(run)
    return [launches - 1 - (run - r) for r in runs], run + 1


def joined_nodes(lines: list[str]) -> Joined | None:
    """The log as rank 0's node's log followed by another node's (module doc), where it is one: every start-up line
    before the first iteration line, and the iteration lines logged by more than the last launch (stamped before its
    start, or their count going back with two launches or more to pair them with); None for any other log, which
    log_runs reads as it is."""
    iterations = [i for i, line in enumerate(lines) if is_iteration(line)]
    if not iterations or any(STARTUP.search(line) for line in lines[iterations[0]:]):
        return None
    cut = iterations[0]
    starts = launch_starts(lines, cut)
    owners, runs = _by_time(lines, starts, cut, iterations), 0
    by_time = owners is not None
    if owners is None:
        owners, runs = _by_count(lines, len(starts), iterations)
        if runs < 2 or len(starts) < 2:
            return None
    if min(owners) == len(starts) - 1 or max(owners) < 0:  # all the last launch's (no join seen), or none rank 0's
        return None
    return Joined(cut=cut, starts=starts, iterations=iterations, owners=owners, by_time=by_time,
                  runs=runs or len(set(owners)))
