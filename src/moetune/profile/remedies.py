"""Turn the dominant wall into concrete Megatron Bridge overrides from data/diagnose_remedies.yaml.

``config`` is a flat dict of Megatron Bridge dotted names (``{"model.moe_token_dispatcher_type":
"alltoall", ...}``). It removes advice that is moot for that config: overrides it holds already (a rule whose
overrides all hold is dropped), or a rule a ``skip_if_config`` condition rules out (e.g. EP overlap with EP = 1).
Keys absent from the config never remove anything: the advice stays, untailored.
"""

from dataclasses import dataclass
from typing import Any

from moetune.layout.config_sizes import data_parallel_size
from moetune.profile.table import all_hold, holds, remedies_table


@dataclass(kw_only=True, slots=True)
class Recommendation:
    rule: str
    wall: str
    overrides: dict[str, Any]  # dotted name -> value; a str placeholder where config is needed
    why: str
    source: str
    action: str = ""  # what to do where no config field carries it (a launch step: bind each rank's CPUs)

    @property
    def change(self) -> list[str]:
        return [f"{k}={_fmt(v)}" for k, v in self.overrides.items()]

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "wall": self.wall, "change": self.change, "overrides": self.overrides,
                "why": self.why, "source": self.source, **({"action": self.action} if self.action else {})}


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(str, value)) + "]"
    return str(value)


def _resolve(key: str, value: Any, config: dict[str, Any]) -> Any:
    """A ``{times: k}`` value becomes k x the config's value, or a placeholder without one; a micro-batch, the least
    such multiple the global batch still splits into over DP (NO_VALUE: none does, and the advice goes)."""
    if not (isinstance(value, dict) and "times" in value):
        return value
    k = value["times"]
    if key not in config:
        return f"<{k}x current>"
    current = config[key]
    base = current if isinstance(current, (int, float)) and not isinstance(current, bool) else 1
    return _whole_batch(k * base, base, config) if key == MBS else k * base


MBS = "train.micro_batch_size"
NO_VALUE = object()  # _resolve's answer where no value of a multiplied setting runs on the config


def _whole_batch(mbs: int, step: int, config: dict[str, Any]) -> Any:
    """MBS, or the least larger one by STEP (the current micro-batch) that divides the global batch over DP, where the
    config gives both (Megatron asserts GBS % (MBS x DP) == 0: rule batch.gbs_divisible); NO_VALUE where none does."""
    gbs, dp = config.get("train.global_batch_size"), data_parallel_size(config)
    if not (isinstance(gbs, int) and dp):
        return mbs
    return next((m for m in range(mbs, gbs // dp + 1, int(step)) if gbs % (m * dp) == 0), NO_VALUE)


def _pick_change(rule: dict, facts: dict[str, Any]) -> dict[str, Any] | None:
    if "variants" not in rule:
        return rule["change"]
    for variant in rule["variants"]:
        if all_hold(variant.get("when"), facts):
            return variant["change"]
    return None


def _not_yet_set(overrides: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The overrides the config does not already hold: advice names what to change, not what is on."""
    return {k: v for k, v in overrides.items() if not (k in config and holds([k, "==", v], config))}


def recommend(wall: str, facts: dict[str, Any], config: dict[str, Any] | None = None) -> list[Recommendation]:
    """Rules of ``wall`` whose measurement gate holds, tailored to ``config`` where given."""
    config = config or {}
    out = []
    for rule in remedies_table()["remedies"]:
        if rule["wall"] != wall or not all_hold(rule.get("when"), facts):
            continue
        if any(holds(c, config) for c in rule.get("skip_if_config", ())):
            continue
        if "action" in rule:  # a launch step, no setting: said as words, whatever the config
            out.append(Recommendation(rule=rule["rule"], wall=wall, overrides={}, action=rule["action"],
                                      why=" ".join(rule["why"].split()), source=rule["source"]))
            continue
        change = _pick_change(rule, facts)
        if change is None:
            continue
        resolved = {k: _resolve(k, v, config) for k, v in change.items()}
        if any(v is NO_VALUE for v in resolved.values()):  # no value runs on this config (a micro-batch the batch
            continue                                         # cannot split into)
        overrides = _not_yet_set(resolved, config)
        if not overrides:
            continue
        out.append(Recommendation(rule=rule["rule"], wall=wall, overrides=overrides,
                                  why=" ".join(rule["why"].split()), source=rule["source"]))
    return out
