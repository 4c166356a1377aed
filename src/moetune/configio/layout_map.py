"""The one map between a normalized config's parallelism fields and moetune's Layout. The planner writes a layout
with it (planner/config_map.py), reads a user's back with it (planner/from_config.py), and the rules ask it how a
config splits its pipeline (rules/derive_layers.py vpp2_runs): one table, so a field Megatron renames or a split
flag it adds changes all three together."""

from typing import Any

from moetune.configio.finalize import expert_tensor_parallel_size, parallel_size, sequence_parallel
from moetune.layout.layout import Layout, hybrid_segments, write_pipeline_layout

# Layout attribute -> the Bridge field that sets it (data/megatron_names.csv), in the order a plan's config lists them
LAYOUT_FIELDS = {
    "tp": "model.tensor_model_parallel_size", "cp": "model.context_parallel_size",
    "pp": "model.pipeline_model_parallel_size", "vpp": "model.virtual_pipeline_model_parallel_size",
    "ep": "model.expert_model_parallel_size", "etp": "model.expert_tensor_parallel_size",
    "sequence_parallel": "model.sequence_parallel",
    "first_stage_layers": "model.num_layers_in_first_pipeline_stage",
    "last_stage_layers": "model.num_layers_in_last_pipeline_stage",
    "pipeline_layout": "model.pipeline_model_parallel_layout",
    "account_for_embedding": "model.account_for_embedding_in_pipeline_split",
    "account_for_loss": "model.account_for_loss_in_pipeline_split",
}
# The attributes that split layers unevenly over the stages PP x VPP makes, beside a layout string
UNEVEN_SPLIT = ("first_stage_layers", "last_stage_layers", "account_for_embedding", "account_for_loss")
HYBRID_SPLIT = "model.hybrid_layer_pattern"  # carries a hybrid's pipeline split, so it depends on the layout


def layout_fields(lay: Layout) -> dict[str, Any]:
    """The config fields of a layout. VPP 1 is written as None: with a layout string Megatron derives VPP from it
    and accepts only an equal explicit value (transformer_config.py: "virtual_pipeline_model_parallel_size conflicts
    with ..."); sequence parallelism as it runs (on with TP > 1 unless turned off)."""
    values = {attr: getattr(lay, attr) for attr in LAYOUT_FIELDS}
    values.update(vpp=lay.vpp if lay.vpp > 1 else None, sequence_parallel=lay.sp)
    return {LAYOUT_FIELDS[attr]: v for attr, v in values.items()}


def hybrid_split(config: dict[str, Any]) -> str | None:
    """The layout string equivalent to a hybrid_layer_pattern's '|' separators (layer counts per virtual stage;
    embedding first, loss last), or None without separators. MTP depths after '/' are not split."""
    pattern = config.get(HYBRID_SPLIT)
    if not pattern or "|" not in pattern:
        return None
    return write_pipeline_layout([len(seg) for seg in hybrid_segments(str(pattern))], 0)


def _vpp(config: dict[str, Any], hybrid: bool) -> int:
    """VPP as the config sets it, kept beside a layout string so that Layout refuses a value the string contradicts,
    as Megatron-Core asserts (transformer_config.py: "virtual_pipeline_model_parallel_size conflicts with
    pipeline_model_parallel_layout"); a hybrid pattern's '|' separators fix it alone."""
    return 1 if hybrid else config.get(LAYOUT_FIELDS["vpp"]) or 1


def layout_settings(config: dict[str, Any]) -> dict[str, Any]:
    """Layout's arguments but the world size, as the config runs them: Megatron's defaults where it is silent, ETP
    and sequence parallelism as the launcher fills them in (configio/finalize.py), and the layout string, or a
    hybrid pattern's '|' separators, fixing the virtual stages (Layout derives VPP from it)."""
    hybrid = hybrid_split(config)
    split = hybrid or config.get(LAYOUT_FIELDS["pipeline_layout"])
    return {
        **{attr: parallel_size(config, LAYOUT_FIELDS[attr], zero_is_one=False) for attr in ("tp", "cp", "pp", "ep")},
        "vpp": _vpp(config, hybrid=hybrid is not None),
        "etp": expert_tensor_parallel_size(config), "sequence_parallel": sequence_parallel(config),
        "pipeline_layout": split or None,
        **{attr: config.get(LAYOUT_FIELDS[attr]) for attr in ("first_stage_layers", "last_stage_layers")},
        **{attr: bool(config.get(LAYOUT_FIELDS[attr])) for attr in ("account_for_embedding", "account_for_loss")},
    }
