"""Interval arithmetic on GPU timelines: unions, intersections, gaps (all in microseconds).

Kernels on different streams overlap in time, so "busy" is the length of the union of their
intervals, and "exposed communication" is the part of the communication union that no compute
interval covers. Inputs are (start, end) pairs; outputs of ``union`` are sorted and disjoint.
"""

from collections.abc import Iterable

Interval = tuple[float, float]


def clip(intervals: Iterable[Interval], lo: float, hi: float) -> list[Interval]:
    """Parts of the intervals inside [lo, hi]."""
    out = []
    for s, e in intervals:
        s, e = max(s, lo), min(e, hi)
        if e > s:
            out.append((s, e))
    return out


def union(intervals: Iterable[Interval]) -> list[Interval]:
    merged: list[list[float]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def length(disjoint: Iterable[Interval]) -> float:
    return sum(e - s for s, e in disjoint)


def intersection_length(a: list[Interval], b: list[Interval]) -> float:
    """Overlap of two sorted disjoint interval lists (two-pointer sweep)."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            total += e - s
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def gaps(disjoint: list[Interval], lo: float, hi: float) -> list[Interval]:
    """The parts of [lo, hi] that no interval covers."""
    out, cursor = [], lo
    for s, e in disjoint:
        if s > cursor:
            out.append((cursor, min(s, hi)))
        cursor = max(cursor, e)
        if cursor >= hi:
            break
    if cursor < hi:
        out.append((cursor, hi))
    return [(s, e) for s, e in out if e > s]
