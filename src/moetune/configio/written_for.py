"""What `emit` writes for, in words: the release a command names (--megatron-bridge / --megatron-core), or with none
the newest names moetune has, those of Megatron Bridge and Megatron-LM main at the commits megatron_names.csv was read
from, which are newer than the last releases its tables cover. A launch on an older release needs that release's
names (Bridge 0.5.0 has dataset.seq_length only as a property, bridge_releases.csv), so the files and the console say
which they are, and how to name another."""

from __future__ import annotations

import re
from functools import lru_cache

from moetune.configio.releases import describe, option, releases
from moetune.files import shipped_text

# megatron_names.csv's header names the commits its names were read at: "verified_in: Megatron-Bridge@067f987df03b,
# Megatron-LM@d98e8a64ddf3"
_SOURCE = re.compile(r"(Megatron-Bridge|Megatron-LM)@([0-9a-f]{7,40})")


@lru_cache(maxsize=1)
def name_sources() -> dict[str, str]:
    """{"Megatron-Bridge": commit, "Megatron-LM": commit} of megatron_names.csv's header comment."""
    head = [line for line in shipped_text("megatron_names.csv").splitlines() if line.startswith("#")]
    return dict(_SOURCE.findall("\n".join(head)))


def written_for(release: str | None) -> str:
    """RELEASE in words with the option that names it, or, with none named, the newest names and what they are newer
    than."""
    if release is not None:
        return f"{describe(release)} ({option(release)})"
    src, core = name_sources(), [r for r in releases("core").order if r != "main"]
    return (f"Megatron Bridge and Megatron-LM main (names as of Megatron-Bridge @{src['Megatron-Bridge']} and "
            f"Megatron-LM @{src['Megatron-LM']}, newer than Megatron Bridge {releases('bridge').order[-1]} and "
            f"Megatron-Core {core[-1]})")


def other_releases() -> str:
    """How to write for another release: each option with the releases it takes."""
    bridge, core = releases("bridge").order, releases("core").order
    return (f"--megatron-bridge X.Y.Z ({bridge[0]} to {bridge[-1]}) for a Megatron Bridge launch, --megatron-core X.Y "
            f"({core[0]} to {core[-1]}) for a Megatron-LM one")
