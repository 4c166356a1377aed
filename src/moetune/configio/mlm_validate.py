"""What Megatron-LM makes of a launch's parsed arguments before training (megatron/training/arguments.py
validate_args, its argparse defaults): sequence parallelism off at TP 1, query groups ignored without GQA, FP32 and an
undistributed optimizer where no flag asks otherwise, its defaults where they differ from Bridge's, and the VPP its
other flags imply. configio/mlm.py parses the flags; this turns them into the run Megatron-LM would make."""

from moetune.configio.gates import VALUE_DEFAULTS, gate_on
from moetune.configio.names import LAUNCHER, NO_DEFAULT, names
from moetune.configio.normalize import FROM_LAYOUT, Assignment
from moetune.configio.types import coerce
from moetune.errors import MoetuneError


def as_megatron_lm_runs(out: list[Assignment], origin: str, *, gqa: bool,
                        vpp_layers: tuple[list[str], str] | None) -> list[Assignment]:
    """The parsed assignments `out` (changed in place where validate_args changes them) with Megatron-LM's defaults,
    the launcher, and the VPP of --num-layers-per-virtual-pipeline-stage (`vpp_layers`: its values and origin) or of
    a layout string added."""
    _validate_args(out)
    _groups_ignored_without_gqa(out, gqa)
    out += _precision_default(out, origin) + _distributed_optimizer_default(out, origin) + _mlm_defaults(out, origin)
    out += _hybrid_from_pattern(out, origin)
    out.append(Assignment(key=LAUNCHER, value="megatron-lm", origin=origin, soft=True))
    if vpp_layers is not None:
        out.append(_vpp_from_layers(out, *vpp_layers))
    return out + _vpp_from_layout(out, origin)


def _vpp_from_layout(out: list[Assignment], origin: str) -> list[Assignment]:
    """--pipeline-model-parallel-layout, or --hybrid-layer-pattern with '|' separators, sets VPP = its stages / PP
    (normalize.merge works it out once every input is in: the PP may come from another), and no other VPP flag may
    be given beside it (arguments.py validate_args: "No more than one of the following arguments can be set at the
    same time"; "Virtual pipeline stages are derived from the number of | segments")."""
    given = {a.key: a for a in out}
    layout = given.get("model.pipeline_model_parallel_layout")
    pattern = given.get("model.hybrid_layer_pattern")
    split = layout if layout is not None and layout.value is not None else pattern
    if split is None or split.value is None:
        return []
    flag = "--pipeline-model-parallel-layout" if split is layout else "--hybrid-layer-pattern"
    if "model.virtual_pipeline_model_parallel_size" in given:
        raise MoetuneError(f"{origin}: {flag} sets the virtual pipeline size itself; drop "
                           "--num-virtual-stages-per-pipeline-rank / --num-layers-per-virtual-pipeline-stage "
                           "(Megatron-LM refuses both)")
    return [Assignment(key="model.virtual_pipeline_model_parallel_size", value=FROM_LAYOUT,
                       origin=f"{split.origin} (VPP from {flag}, as Megatron-LM derives it)")]


def _hybrid_from_pattern(out: list[Assignment], origin: str) -> list[Assignment]:
    """A layer pattern makes the model a hybrid whether or not --is-hybrid-model is given: Megatron-LM sets
    is_hybrid_model from it (training/argument_utils.py core_transformer_config_from_args; utils/common_utils.py
    is_hybrid_model: "hybrid_layer_pattern is not None"), and pretrain_hybrid.py / pretrain_mamba.py take it so."""
    given = {a.key: a.value for a in out}
    if given.get("model.hybrid_layer_pattern") is None or "model.is_hybrid_model" in given:
        return []
    return [Assignment(key="model.is_hybrid_model", value=True, soft=True,
                       origin=f"{origin} (a hybrid: Megatron-LM derives it from the layer pattern)")]


def _validate_args(out: list[Assignment]) -> None:
    """What Megatron-LM's validate_args changes before training (megatron/training/arguments.py)."""
    tp = next((a.value for a in out if a.key == "model.tensor_model_parallel_size"), 1)
    for a in out:
        if a.key == "model.sequence_parallel" and a.value and tp == 1:
            # "Disabling sequence parallelism because tensor model parallelism is disabled"
            a.value, a.origin = False, f"{a.origin} (off: Megatron-LM disables it at TP=1)"


def _groups_ignored_without_gqa(out: list[Assignment], gqa: bool) -> None:
    """Megatron-LM hands --num-query-groups to the model only under --group-query-attention, else one KV group per
    head (training/argument_utils.py core_transformer_config_from_args: num_query_groups None; its argparse default
    is 1): without the switch the value given, or a log's dumped 1, reads as the heads. This reads the launch; whether
    TP fits the groups is another job (rule shape.query_groups_vs_tp, layout/validate.py _tp_fits_query_groups)."""
    heads = next((a.value for a in out if a.key == "model.num_attention_heads"), None)
    for a in out if not gqa else ():
        if a.key == "model.num_query_groups" and a.value != heads:
            a.value, a.origin = heads, f"{a.origin} (ignored without --group-query-attention: a KV group per head)"


def _distributed_optimizer_default(out: list[Assignment], origin: str) -> list[Assignment]:
    """Megatron-LM without --use-distributed-optimizer keeps every optimizer state on every DP rank (its default is
    off, Bridge's recipes turn it on): say so, so the memory wall counts it."""
    if any(a.key in ("ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer") for a in out):
        return []
    return [Assignment(key=k, value=False, origin=f"{origin} (no --use-distributed-optimizer)", soft=True)
            for k in ("ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer")]


def _precision_default(out: list[Assignment], origin: str) -> list[Assignment]:
    """Megatron-LM without --bf16/--fp16 trains in FP32: say so explicitly so precision rules can decide."""
    given = {a.key for a in out}
    if "mixed_precision.bf16" in given or "mixed_precision.fp16" in given:
        return []
    return [Assignment(key="mixed_precision.bf16", value=False, origin=f"{origin} (no --bf16)", soft=True),
            Assignment(key="mixed_precision.fp16", value=False, origin=f"{origin} (no --fp16)", soft=True)]


def _mlm_defaults(out: list[Assignment], origin: str) -> list[Assignment]:
    """For the knobs moetune reads (role "used"), write Megatron-LM's default down where it differs from
    Megatron Bridge's: e.g. Megatron-LM fuses gradient accumulation unless --no-gradient-accumulation-fusion,
    defaults --fp8-recipe to delayed and --optimizer-offload-fraction to 1.0; a VALUE_DEFAULTS flag's default is
    written wherever its gate is on (configio/gates.py), even where Bridge's is the same. The normalized config then
    describes the run Megatron-LM would make, not Bridge's defaults.
    """
    given = {a.key: a.value for a in out}  # a key given twice to two values is refused (normalize.resolve)
    filled = []
    for row in names().by_bridge.values():
        if row.bridge_name in given or row.role != "used" or row.mlm_default in (NO_DEFAULT, None):
            continue
        switch = row.mlm_action in ("store_true", "store_false", "bool_optional")
        gated = row.bridge_name in VALUE_DEFAULTS
        if not switch and not (gated and gate_on(given, row.bridge_name)):
            continue
        value = coerce(row.bridge_name, row.type, row.mlm_default)
        if value != row.default or gated:
            filled.append(Assignment(key=row.bridge_name, value=value, origin=f"{origin} (Megatron-LM default)",
                                     soft=True))
    return filled


def _vpp_from_layers(out: list[Assignment], values: list[str], origin: str) -> Assignment:
    """--num-layers-per-virtual-pipeline-stage L  ->  VPP = layers / (PP * L), the embedding and the loss counting
    as a layer each under --account-for-embedding/loss-in-pipeline-split (arguments.py validate_args)."""
    given = {a.key: a.value for a in out}
    layers, pp = given.get("model.num_layers"), given.get("model.pipeline_model_parallel_size", 1)
    if any(given.get(f"model.num_layers_in_{end}_pipeline_stage") is not None for end in ("first", "last")):
        # validate_args: "please use --num-virtual-stages-per-pipeline-rank to specify virtual pipeline parallel
        # degree when enable uneven pipeline parallelism" (arguments.py:529-531 @core_v0.16.0)
        raise MoetuneError(f"{origin} with uneven first/last stages (--decoder-first/last-pipeline-num-layers): "
                           "Megatron-LM asserts the other VPP flag there; use --num-virtual-stages-per-pipeline-rank")
    if len(values) != 1 or not values[0].isdigit() or not layers:
        raise MoetuneError(f"{origin}: needs one integer and --num-layers; "
                           "or use --num-virtual-stages-per-pipeline-rank")
    layers += bool(given.get("model.account_for_embedding_in_pipeline_split")) + bool(
        given.get("model.account_for_loss_in_pipeline_split"))
    per_stage = int(values[0])
    if per_stage < 1 or not isinstance(pp, int) or pp < 1:
        raise MoetuneError(f"{origin}: layers per virtual stage ({per_stage}) and --pipeline-model-parallel-size "
                           f"({pp}) must be at least 1")
    if layers % (pp * per_stage):
        raise MoetuneError(f"{origin}: {layers} layers (with the embedding/loss the split accounts for) are not "
                           f"divisible by PP {pp} x {per_stage}")
    return Assignment(key="model.virtual_pipeline_model_parallel_size", value=layers // (pp * per_stage), origin=origin)
