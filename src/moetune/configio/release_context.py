"""The release one command targets (``--megatron-core X.Y`` / ``--megatron-bridge X.Y.Z``) and the names its read
meets, for configio/releases.py's tables to judge.

They live in a context (``reading``) the command opens around its read and emit: the Megatron-LM reader
(configio/mlm.py) notes each flag a launch passes and takes a flag main no longer has where the release does; load.py
notes the names of every other input; emit spells a flag as the release does. Outside such a context, or with no
release named, nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from moetune.configio.releases import has, known_release


@dataclass(slots=True)
class Reading:
    """One command's read: the release it targets (None: none named) and the names its inputs use, in order."""

    release: str | None
    names: list[str] = field(default_factory=list)
    flags: int = 0  # Megatron-LM flags noted: load.py tells a launch (its flags are its names) from other inputs

    def note(self, names: Iterable[str], flags: bool = False) -> None:
        for n in names:
            self.flags += flags
            if n not in self.names:
                self.names.append(n)

    def lacking(self) -> list[str]:
        """The names read that the release lacks (none without a release)."""
        if self.release is None:
            return []
        return [n for n in self.names if not has(self.release, n)]


_CURRENT: ContextVar[Reading | None] = ContextVar("megatron_core_reading", default=None)


@contextmanager
def reading(release: str | None, family: str = "core") -> Iterator[Reading]:
    """The context a command reads (and emits) in; RELEASE: --megatron-core's (or FAMILY bridge: --megatron-bridge's)
    value, checked, or None."""
    token = _CURRENT.set(Reading(known_release(release, family) if release is not None else None))
    try:
        yield _CURRENT.get()
    finally:
        _CURRENT.reset(token)


def current() -> Reading | None:
    return _CURRENT.get()


def target() -> str | None:
    """The release the current command targets, or None."""
    now = _CURRENT.get()
    return now.release if now is not None else None


def note(names: Iterable[str], flags: bool = False) -> None:
    """Names an input uses (`flags`: a launch's Megatron-LM arguments), for the current command's check against its
    release (nothing outside a command)."""
    now = _CURRENT.get()
    if now is not None:
        now.note(names, flags)


def noted_source(read: Callable[[], dict]) -> dict:
    """READ()'s source (a Resolved: soft keys are defaults it implies), its names noted unless it was a Megatron-LM
    launch, whose flags the reader noted instead (its Bridge names are what they map to, and its defaults)."""
    now = _CURRENT.get()
    before = now.flags if now is not None else 0
    source = read()
    if now is not None and now.flags == before:
        soft, spelled = getattr(source, "soft", frozenset()), getattr(source, "spelled", {})
        now.note(spelled.get(k, k) for k in source if k not in soft)  # as written: an alias is a name too
    return source


def spelling(flags: tuple[str, ...]) -> str:
    """The first of a field's Megatron-LM spellings the target release has (emit writes it); the first without one."""
    release = target()
    if release is None or not flags:
        return flags[0] if flags else ""
    return next((f for f in flags if has(release, f)), flags[0])
