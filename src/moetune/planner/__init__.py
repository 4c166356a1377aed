"""Planning: estimate one configuration, search all of them, explain, calibrate."""


def to_config(data: dict, where: str = "result", rank: int = 1) -> dict:
    """Normalized config (Bridge dotted names + cluster.* + env.*) of an `estimate --json` / `plan --json` result;
    `where` names it in errors, once (configio/readers.py ResultReader: the file's path)."""
    from moetune.errors import MoetuneError
    from moetune.planner.config_map import to_config as estimate_to_config
    from moetune.planner.from_json import estimate_from_json, pick_result

    try:  # picking the result is the one step whose errors do not open with `where`; estimate_from_json's others do
        pick_result(data, rank)
    except MoetuneError as err:
        raise MoetuneError(f"{where}: {err}") from None
    result = estimate_from_json(data, rank, where=where)
    # a Megatron-LM launch's saved result keeps its launcher (Estimate.launcher), which check and emit read as they
    # read the launch's own config; a Bridge one's config stays as it was
    return estimate_to_config(result) | (result.source_config or {})
