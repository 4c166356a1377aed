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
from moetune.errors import MoetuneError


@dataclass(frozen=True, slots=True)
class LegacySwitch:
    field: str  # the field later releases take VALUE by
    value: str
    when: tuple[str, str] | None  # (another field, its value) the switch needs: the flex dispatcher for DeepEP
    switch: str  # the boolean field a release without FIELD takes VALUE by
    switch_value: bool  # what that switch is set to
    unset: bool  # whether a config leaving FIELD out (at VALUE, its default) takes the switch too
    source: str  # the Megatron-LM lines it mirrors

    def holds(self, config: dict[str, Any]) -> bool:
        """Whether CONFIG gives FIELD=VALUE (leaving FIELD out gives its default, where `unset`) and WHEN."""
        given = config.get(self.field)
        value = given == self.value or (given is None and self.unset and at_default(self.field, self.value))
        return value and (self.when is None or config.get(self.when[0]) == self.when[1])


@lru_cache(maxsize=1)
def legacy_switches() -> tuple[LegacySwitch, ...]:
    return tuple(LegacySwitch(field=r["field"], value=r["value"], switch=r["switch"], source=r["source"],
                              when=tuple(r["when"].split("=", 1)) if r["when"] else None,
                              switch_value=r["switch_value"] == "true", unset=r["unset"] == "yes")
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
    """CONFIG as RELEASE spells it: each switch its values need set, their fields left out, and the graph scope as
    the one string a release before list scopes takes (scalar_scope)."""
    found = switches_in(config, release)  # read off CONFIG as given: two switches may spell one value
    dropped = {s.field for s in found}
    config = {k: v for k, v in config.items() if k not in dropped} | {s.switch: s.switch_value for s in found}
    return scalar_scope(config, release)


# Before core_v0.16.0 cuda_graph_scope took one scope, a string (transformer_config.py @core_v0.15.0:
# `cuda_graph_scope: str = "full"`); 0.16 made it a list of CudaGraphScope and brought moe_router among its scopes
# (@core_v0.16.0), which megatron_releases.csv lists by release: the release has that value where it takes a list
SCOPE, LIST_SCOPES = "model.cuda_graph_scope", "model.cuda_graph_scope=moe_router"


def scalar_scope(config: dict[str, Any], release: str | None) -> dict[str, Any]:
    """CONFIG with a list of graph scopes as the one string RELEASE takes where it predates list scopes: one scope
    as itself, none left out (the switches say graphs are off; its default 'full' then does nothing)."""
    scopes = config.get(SCOPE)
    if release is None or has(release, LIST_SCOPES) or not isinstance(scopes, list | tuple):
        return config
    if len(scopes) > 1:
        raise MoetuneError(f"{SCOPE} {list(scopes)}: a release before Megatron-Core 0.16 takes one CUDA-graph scope "
                           "(attn or full); keep one, or upgrade")
    return {k: v for k, v in config.items() if k != SCOPE} | ({SCOPE: scopes[0]} if scopes else {})
