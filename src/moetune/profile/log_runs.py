"""Where a Megatron training log's runs begin (profile/megatron_log.py reads the last one): Megatron's start-up lines
printed anew, or (in a log without them) an iteration number going back; iteration lines out of their launch's rising
count (one line garbled: Stray), which start nothing; and iteration lines whose count does not read (miscount)."""

import re
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass

from moetune.profile.log_stops import oom_words

ITER = re.compile(r"\biteration\s+(\d{1,12})\s*/\s*(\d{1,12})\s*\|(.*)$")  # counts a log can hold
COUNT = re.compile(r"\biteration\s+([^|(]*?)\s*\|")  # an iteration line's count as written, read or not
# Lines rank 0 prints once per launch, before training: a relaunch prints them again, whatever iteration it resumes
# at. Megatron-LM megatron/training/arguments.py @ core_v0.18.2 validate_args ("using world size: ") and _print_args
# (the arguments banner); initialize.py _initialize_distributed and training.py pretrain (also Megatron Bridge
# training/initialize.py and setup.py); Bridge training/train.py train ("Starting training loop at iteration").
# Not checkpoint lines: saves recur within a run, and a run may load a checkpoint more than once (RL reference weights).
STARTUP = re.compile(r"-{8,} arguments -{8,}|using world size: |> initializing torch distributed \.\.\.|"
                     r"time to initialize megatron \(seconds\)|Starting training loop at iteration")


@dataclass(frozen=True, slots=True)
class Stray:
    """An iteration line out of sequence, passed over: its number garbled (a typo, another process's output written
    over its digits). Megatron-LM logs the first iteration of each launch and then every log_interval-th
    (megatron/training/training.py training_log, `iteration % args.log_interval == 0 or is_first_iteration`, :2597 @
    core_v0.18.2; Bridge every log_interval-th alone, training/utils/train_utils.py:1103 @ v0.6.0), its count rising by
    one a step (training.py:3401 `while iteration < args.train_iters`, :3585 `iteration += 1`): within one launch the
    numbers it logs only rise. Where the log holds Megatron's start-up lines (STARTUP, printed at every launch), the
    lines that break their launch's rise are the strays (launch_strays). Where it holds none (a log cut to its iteration
    lines), a number that goes back may be a relaunch, so a stray is only a number outside neighbours that stand two log
    intervals apart (one iteration in between was logged; interval_strays). `before`/`after`: the numbers kept either
    side of it in its launch, None at the launch's first or last line."""
    line: int  # index in the log's lines
    before: int | None
    number: int
    after: int | None


def is_iteration(line: str) -> re.Match | None:
    """An iteration line whose count reads: a number at most the total (Megatron logs 1 .. --train-iters: the loop at
    training.py:3401 @ core_v0.18.2, Bridge training/train.py:377 @ v0.6.0, formatted `iteration {:8d}/{:8d}` at
    training.py:2628, train_utils.py:1174)."""
    if "elapsed time per iteration" not in line or not (m := ITER.search(line)):
        return None
    return m if int(m.group(1)) <= int(m.group(2)) else None


def miscount(line: str) -> str | None:
    """An iteration line (only training_log prints 'elapsed time per iteration') whose count does not read (`5x`,
    `-5`, more digits than a count holds) or passes its total: the count as written; None for any other line."""
    if "elapsed time per iteration" not in line or is_iteration(line):
        return None
    return " ".join(m.group(1).split()) if (m := COUNT.search(line)) else "(none)"


def log_interval(numbers: list[int]) -> int | None:
    """The usual step between iteration numbers logged one after the other (log_interval): the most frequent rise, the
    smaller of two as frequent; None where none rises."""
    rises = Counter(b - a for a, b in zip(numbers, numbers[1:]) if b > a)
    return max(rises, key=lambda rise: (rises[rise], -rise)) if rises else None


def strays(lines: list[str]) -> dict[int, Stray]:
    """The log's out-of-sequence iteration lines by line index (Stray): by launch where the log holds start-up lines,
    by log interval where it holds none."""
    marks: list[tuple[int, int] | None] = []  # iteration lines (index, number); None for a start-up line
    for i, line in enumerate(lines):
        if m := is_iteration(line):
            marks.append((i, int(m.group(1))))
        elif STARTUP.search(line):
            marks.append(None)
    if None not in marks:
        return interval_strays(marks)
    launches: list[list[tuple[int, int]]] = [[]]
    for mark in marks:
        launches[-1].append(mark) if mark is not None else launches.append([])
    return {s.line: s for launch in launches for s in launch_strays(launch)}


def interval_strays(marks: list[tuple[int, int]]) -> dict[int, Stray]:
    """A log without start-up lines: a line whose number lies outside its neighbours', where those stand two log
    intervals apart; the number before is the last one in sequence. Resuming at checkpoint c below the last number L,
    Megatron-LM logs c + 1, then the interval's multiples, so no line of it nor L lies between neighbours two intervals
    apart (a resume at c = 30 after 30, 40 logs 31, 40: 40 between 30 and 31 is no stray, it starts a run)."""
    out: dict[int, Stray] = {}
    before, step = None, log_interval([m[1] for m in marks])
    for k, (i, number) in enumerate(marks):
        after = marks[k + 1][1] if k + 1 < len(marks) else None
        if (before is not None and after is not None and step and after - before == 2 * step
                and not before <= number <= after):
            out[i] = Stray(line=i, before=before, number=number, after=after)
        else:
            before = number
    return out


def launch_strays(launch: list[tuple[int, int]]) -> list[Stray]:
    """One launch's iteration lines (index, number) that its longest rise leaves out (longest_rise); a number logged
    twice in a row (two ranks' output in one file, which parse_log counts once) stands or falls as one."""
    groups: list[tuple[int, list[int]]] = []  # (number, the indices logging it in a row)
    for i, number in launch:
        groups[-1][1].append(i) if groups and groups[-1][0] == number else groups.append((number, [i]))
    kept = longest_rise([number for number, _ in groups])
    out, before = [], None
    for k, (number, where) in enumerate(groups):
        if kept[k]:
            before = number
            continue
        after = next((groups[j][0] for j in range(k + 1, len(groups)) if kept[j]), None)
        out += [Stray(line=i, before=before, number=number, after=after) for i in where]
    return out


def longest_rise(numbers: list[int]) -> list[bool]:
    """Which of `numbers` make up their longest strictly rising subsequence: of several as long, the one on the
    earliest positions (a garbled line is taken to be the later of two that contradict each other). O(n log n):
    ahead[k], the longest rise starting at k, by patience sorting from the end; then the earliest k that can go on."""
    ahead, tails = [0] * len(numbers), []  # tails[j]: the largest first number of a rise j + 1 long seen so far
    for k in reversed(range(len(numbers))):
        j = bisect_left(tails, -numbers[k])
        tails[j:j + 1] = [-numbers[k]]
        ahead[k] = j + 1
    kept, need, last = [False] * len(numbers), max(ahead, default=0), None
    for k, number in enumerate(numbers):
        if need and ahead[k] == need and (last is None or number > last):
            kept[k], need, last = True, need - 1, number
    return kept


def last_run(lines: list[str], passed: dict[int, Stray]) -> tuple[int, int, int | None]:
    """(index of the line the log's last run starts at, how many runs it holds, index of a launch after the last
    iteration line that logged none: it stopped before training, None where there is none). A run starts again where,
    after an iteration line, Megatron's start-up lines (STARTUP) come before the next one (a job restarted from a
    checkpoint, at whatever iteration it resumes, or two runs appended to one file), or where an iteration number falls
    below the one logged before it (the lines in `passed`, strays, are not read: in a log with start-up lines they are
    every number that goes back within a launch, so there only the start-up lines split). The new run starts at its
    launch's first start-up line, so what the previous run printed last (its OOM, its memory report) stays with it and
    the new run's argument dump is its own; with no start-up lines, on the line after the previous run's last
    iteration line. Of launches before an iteration line (the first one's included), the last counts (an earlier one
    that failed at start-up logged no iteration): a launch prints each start-up line once, so one printed again begins
    the next."""
    start, runs, last, at = 0, 1, None, 0
    launch, seen = None, set()  # first line of a launch since the last iteration line (or a relaunch before the first)
    for i, line in enumerate(lines):
        if i in passed:
            continue
        if m := is_iteration(line):
            if launch is not None or (last is not None and int(m.group(1)) < last):
                start, runs = at + 1 if launch is None else launch, runs + (last is not None)
            last, at, launch, seen = int(m.group(1)), i, None, set()
        elif up := STARTUP.search(line):
            if up.group(0) in seen or (launch is None and last is not None):
                launch, seen = i, set()
            seen.add(up.group(0))
    return start, runs, launch if last is not None else None


def run_notes(path: str, lines: list[str], start: int, runs: int, failed: int | None, first: int | None) -> list[str]:
    """What last_run (start, runs, failed) passed over, in notes; `first`, the figures' run's first iteration."""
    notes = []
    if runs > 1:
        notes.append(f"--log {path} holds {runs} runs (Megatron started again {runs - 1} time(s): its start-up lines "
                     "printed anew, or iteration numbers going back): the figures are the last run's, from line "
                     f"{start + 1}, iteration {first} on")
    elif start:  # launches before the first iteration line that failed at start-up: their OOM is not the run's
        notes.append(f"--log {path}: the launch(es) before line {start + 1} logged no iteration"
                     f"{oom_words(lines[:start])}: the figures are the launch from line {start + 1}")
    if failed is not None:  # its OOM is its own, not the figures' run's
        notes.append(f"--log {path}: the last launch, from line {failed + 1}, logged no iteration"
                     f"{oom_words(lines[failed:])}: the figures are the run before it")
    return notes


def stray_note(path: str, passed: list[Stray]) -> str:
    s = passed[0]
    where = f"between {s.before} and {s.after}" if s.before is not None and s.after is not None else \
        f"after {s.before}, its launch's last" if s.after is None else f"before {s.after}, its launch's first"
    goes_on = "the lines after it go on with the count" if s.after is not None else "the lines before it hold the count"
    return (f"--log {path}: {len(passed)} iteration line(s) out of sequence passed over (first at line {s.line + 1}: "
            f"iteration {s.number} {where}; the number garbled, another process's output written into the line?): "
            f"no relaunch, {goes_on}")


def miscount_note(path: str, passed: list[tuple[int, str]], alone: bool = False) -> str:
    """passed: (line number, the count as written) of iteration lines whose count does not read (miscount); `alone`:
    the run logs no other, so this is an error line."""
    n, count = passed[0]
    what = f"none of its {len(passed)} iteration line(s) has a count that reads" if alone else \
        f"{len(passed)} iteration line(s) whose count does not read passed over"
    return (f"--log {path}: {what} (first at line {n}: 'iteration {count}', where Megatron writes a number from 1 up "
            "to the run's total, --train-iters; the line garbled, another process's output written into it?)" +
            "; pass the log as Megatron wrote it" * alone)
