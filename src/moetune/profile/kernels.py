"""Classify GPU activity into the classes of ``data/kernel_classes.yaml``.

The patterns live in the data file so that a reader can scan (and extend) them without reading
code; this module only compiles them and applies them in the documented order: collective name,
then Kineto category, then kernel name. Results are cached per (name, category, collective)
because a training trace repeats a few hundred distinct kernel names hundreds of thousands of times.
"""

import re
from dataclasses import dataclass
from functools import lru_cache

import yaml

from moetune.files import shipped_text

COMPUTE, COMMUNICATION, MEMORY = "compute", "communication", "memory"
_KINDS = (COMPUTE, COMMUNICATION, MEMORY)


@dataclass(kw_only=True, slots=True, frozen=True)
class KernelClass:
    id: str
    label: str
    kind: str
    collective: tuple[re.Pattern, ...]
    category: frozenset[str]
    name: tuple[re.Pattern, ...]


def _compile(patterns: list[str]) -> tuple[re.Pattern, ...]:
    return tuple(re.compile(p, re.IGNORECASE) for p in patterns or ())


@lru_cache(maxsize=1)
def kernel_classes() -> tuple[KernelClass, ...]:
    """The class table, in matching order; the last entry is the fallback."""
    text = shipped_text("kernel_classes.yaml")
    table = []
    for row in yaml.safe_load(text)["classes"]:
        if row["kind"] not in _KINDS:
            raise ValueError(f"kernel_classes.yaml: class {row['id']} has unknown kind {row['kind']}")
        table.append(
            KernelClass(
                id=row["id"],
                label=row.get("label", row["id"]),
                kind=row["kind"],
                collective=_compile(row.get("collective")),
                category=frozenset(row.get("category") or ()),
                name=_compile(row.get("name")),
            )
        )
    return tuple(table)


def class_ids() -> tuple[str, ...]:
    return tuple(c.id for c in kernel_classes())


def class_kind(class_id: str) -> str:
    return _kinds()[class_id]


@lru_cache(maxsize=1)
def _kinds() -> dict[str, str]:
    return {c.id: c.kind for c in kernel_classes()}


def ids_of_kind(kind: str) -> tuple[str, ...]:
    return tuple(c.id for c in kernel_classes() if c.kind == kind)


@lru_cache(maxsize=8192)
def classify(name: str, category: str = "kernel", collective: str | None = None) -> str:
    """Class id of one GPU event (see the order in kernel_classes.yaml)."""
    table = kernel_classes()
    if collective:
        for cls in table:
            if any(p.search(collective) for p in cls.collective):
                return cls.id
    for cls in table:
        if category in cls.category:
            return cls.id
    for cls in table:
        if any(p.search(name) for p in cls.name):
            return cls.id
    return table[-1].id
