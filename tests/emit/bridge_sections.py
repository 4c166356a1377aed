"""Stand-ins for the sections of a Megatron Bridge ConfigContainer: each holds every field megatron_names.csv lists
for its section, at None, as a dataclass instance holds each of its fields (bridge_overrides.py's `_assign` refuses
a planned field its section lacks, as Bridge's dotted overrides do)."""

from __future__ import annotations

import types

from moetune.configio.names import names


def fields_of(section: str) -> list[str]:
    """The fields megatron_names.csv lists for SECTION (model, ddp, comm_overlap, ...)."""
    return sorted(k.split(".", 1)[1] for k in names().by_bridge if k.split(".", 1)[0] == section)


def section(name: str, **values) -> types.SimpleNamespace:
    """A stand-in for section NAME: its every field at None, then VALUES."""
    return types.SimpleNamespace(**{**dict.fromkeys(fields_of(name)), **values})
