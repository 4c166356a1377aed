"""How a release spells a value of a field it lacks, by the boolean switch it had before the field came
(data/legacy_switches.csv): Transformer Engine's CUDA graphs are external_cuda_graph before cuda_graph_impl
(core_v0.15.0), and the flex dispatcher's DeepEP is moe_enable_deepep before moe_flex_dispatcher_backend
(core_v0.16.0). plan searches such a value for the release (planner/release_fit.py), emit writes its switch
(cli/release_check.py for_release) and check asks for the switch where the config leaves it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from moetune.configio.names import data_csv
from moetune.configio.releases import at_default, has


@dataclass(frozen=True, slots=True)
class LegacySwitch:
    field: str  # the field later releases take VALUE by
    value: str
    when: tuple[str, str] | None  # (another field, its value) the switch needs: the flex dispatcher for DeepEP
    switch: str  # the boolean field a release without FIELD takes VALUE by
    source: str  # the Megatron-LM lines it mirrors

    def holds(self, config: dict[str, Any]) -> bool:
        """Whether CONFIG gives FIELD=VALUE (leaving FIELD out gives its default) and WHEN."""
        given = config.get(self.field)
        value = given == self.value or (given is None and at_default(self.field, self.value))
        return value and (self.when is None or config.get(self.when[0]) == self.when[1])


@lru_cache(maxsize=1)
def legacy_switches() -> tuple[LegacySwitch, ...]:
    return tuple(LegacySwitch(field=r["field"], value=r["value"], switch=r["switch"], source=r["source"],
                              when=tuple(r["when"].split("=", 1)) if r["when"] else None)
                 for r in data_csv("legacy_switches.csv"))


def switches_in(config: dict[str, Any], release: str | None) -> list[LegacySwitch]:
    """The switches RELEASE takes CONFIG's values by: where it lacks the field and has the switch."""
    if release is None:
        return []
    return [s for s in legacy_switches() if s.holds(config) and not has(release, s.field) and has(release, s.switch)]


def by_switch(config: dict[str, Any], field: str, release: str) -> bool:
    """Whether RELEASE, lacking FIELD, runs CONFIG's value of it by a switch."""
    return any(s.field == field for s in switches_in(config, release))


def respelled(config: dict[str, Any], release: str | None) -> dict[str, Any]:
    """CONFIG as RELEASE spells it: each switch its values need set, their fields left out."""
    for s in switches_in(config, release):
        config = {k: v for k, v in config.items() if k != s.field} | {s.switch: True}
    return config
