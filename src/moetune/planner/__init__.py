"""Planning: estimate one configuration, search all of them, explain, calibrate."""


def to_config(data: dict, rank: int = 1) -> dict:
    """Normalized config (Bridge dotted names + cluster.* + env.*) of an `estimate --json` / `plan --json` result."""
    from moetune.planner.config_map import to_config as estimate_to_config
    from moetune.planner.from_json import estimate_from_json

    return estimate_to_config(estimate_from_json(data, rank))
