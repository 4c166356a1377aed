"""Where a Megatron training log's runs begin (profile/megatron_log.py reads the last one): Megatron's start-up lines
printed anew, or an iteration number going back; and iteration lines whose number its neighbours contradict (one line
garbled), which start nothing."""

import re
from collections import Counter
from dataclasses import dataclass

ITER = re.compile(r"\biteration\s+(\d{1,12})\s*/\s*(\d{1,12})\s*\|(.*)$")  # counts a log can hold
# Lines rank 0 prints once per launch, before training: a relaunch prints them again, whatever iteration it resumes
# at. Megatron-LM megatron/training/arguments.py @ core_v0.18.2 validate_args ("using world size: ") and _print_args
# (the arguments banner); initialize.py _initialize_distributed and training.py pretrain (also Megatron Bridge
# training/initialize.py and setup.py); Bridge training/train.py train ("Starting training loop at iteration").
# Not checkpoint lines: saves recur within a run, and a run may load a checkpoint more than once (RL reference weights).
STARTUP = re.compile(r"-{8,} arguments -{8,}|using world size: |> initializing torch distributed \.\.\.|"
                     r"time to initialize megatron \(seconds\)|Starting training loop at iteration")


@dataclass(frozen=True, slots=True)
class Stray:
    """An iteration line out of sequence: its number below the one logged before it or above the one after, where
    those two stand two log intervals apart (the log's usual step between lines, log_interval): one line's number
    garbled where one iteration in between was logged. A relaunch cannot look so. Megatron-LM logs the first iteration
    of each launch and then every log_interval-th (megatron/training/training.py training_log, `iteration %
    args.log_interval == 0 or is_first_iteration`, :2597 @ core_v0.18.2; Bridge every log_interval-th alone,
    training/utils/train_utils.py:1103 @ v0.6.0): resuming at checkpoint c below the last number L it logs c + 1, then
    the interval's multiples, so no line of it nor L lies between neighbours two intervals apart (a resume at c = 30
    after 30, 40 logs 31, 40: 40 between 30 and 31 is no stray, as it had been read, which mixed the two runs)."""
    line: int  # index in the log's lines
    before: int
    number: int
    after: int


def is_iteration(line: str) -> re.Match | None:
    return m if (m := ITER.search(line)) and "elapsed time per iteration" in line else None


def log_interval(numbers: list[int]) -> int | None:
    """The usual step between iteration numbers logged one after the other (log_interval): the most frequent rise, the
    smaller of two as frequent; None where none rises."""
    rises = Counter(b - a for a, b in zip(numbers, numbers[1:]) if b > a)
    return max(rises, key=lambda rise: (rises[rise], -rise)) if rises else None


def strays(lines: list[str]) -> dict[int, Stray]:
    """The log's out-of-sequence iteration lines by line index (Stray). Neighbours are looked for within a launch only
    (no start-up line between), and a stray is no neighbour: the number before is the last one in sequence."""
    marks: list[tuple[int, int] | None] = []  # iteration lines (index, number); None for a start-up line
    for i, line in enumerate(lines):
        if m := is_iteration(line):
            marks.append((i, int(m.group(1))))
        elif STARTUP.search(line):
            marks.append(None)
    out: dict[int, Stray] = {}
    before, step = None, log_interval([m[1] for m in marks if m is not None])
    for k, here in enumerate(marks):
        after = marks[k + 1] if k + 1 < len(marks) else None
        if here is None:
            before = None
        elif (before is not None and after is not None and step and after[1] - before == 2 * step
              and not before <= here[1] <= after[1]):
            out[here[0]] = Stray(line=here[0], before=before, number=here[1], after=after[1])
        else:
            before = here[1]
    return out


def last_run(lines: list[str], passed: dict[int, Stray]) -> tuple[int, int, int | None]:
    """(index of the line the log's last run starts at, how many runs it holds, index of a launch after the last
    iteration line that logged none: it stopped before training, None where there is none). A run starts again where,
    after an iteration line, Megatron's start-up lines (STARTUP) come before the next one (a job restarted from a
    checkpoint, at whatever iteration it resumes, or two runs appended to one file), or where an iteration number falls
    below the one logged before it (the lines in `passed`, strays, are not read). The new run starts at its launch's
    first start-up line, so what the previous run printed last (its OOM, its memory report) stays with it and the new
    run's argument dump is its own; with no start-up lines, on the line after the previous run's last iteration line.
    Of launches before an iteration line (the first one's included), the last counts (an earlier one that failed at
    start-up logged no iteration): a launch prints each start-up line once, so one printed again begins the next."""
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


def stray_note(path: str, passed: list[Stray]) -> str:
    s = passed[0]
    return (f"--log {path}: {len(passed)} iteration line(s) out of sequence passed over (first at line {s.line + 1}: "
            f"iteration {s.number} between {s.before} and {s.after}; the number garbled, another process's output "
            "written into the line?): no relaunch, the lines after it go on with the count")
