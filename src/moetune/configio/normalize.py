"""Turn raw assignments (from a Bridge YAML, dotted overrides, Megatron-LM arguments) into one config.

The normalized config is a flat dict keyed by Megatron Bridge dotted names, plus moetune's own
``cluster.*`` facts and ``env.*`` environment variables. Only names the inputs give are present (the
rules fall back to Megatron defaults themselves). Aliases are folded to one canonical name (see the
``canonical`` column of megatron_names.csv): Bridge applies ``comm_overlap.*`` and ``mixed_precision.*``
onto the model, so ``model.overlap_moe_expert_parallel_comm`` becomes ``comm_overlap.*`` and
``model.fp8`` becomes ``mixed_precision.fp8``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from moetune.configio.names import ENV_NAME, PASSTHROUGH, VALIDATED, names
from moetune.configio.types import coerce
from moetune.errors import MoetuneError
from moetune.layout.layout import split_stages
from moetune.words import closest

DELETE = object()  # a `~key` Hydra override
# The VPP Megatron-LM derives from --pipeline-model-parallel-layout (or a hybrid pattern's '|' stages): stages / PP,
# known only once every input is merged, since the PP may come from another one (a ModelZoo YAML's PP with the
# layout on the command line)
FROM_LAYOUT = object()
VPP = "model.virtual_pipeline_model_parallel_size"


@dataclass(kw_only=True, slots=True)
class Assignment:
    """One ``key = value`` from an input; ``soft`` ones (expanded recipes) may be refined later."""

    key: str
    value: Any
    origin: str
    soft: bool = False


def _mixed_precision_recipe(name: str, origin: str) -> list[Assignment]:
    from moetune.rules.table import load_table  # the recipe table lives with the rules data

    recipes = load_table().mixed_precision_recipes
    key = name.replace("-", "_")
    if key not in recipes:
        raise MoetuneError(f"{origin}: unknown mixed_precision recipe {name!r}; use one of {', '.join(recipes)}")
    return [Assignment(key=f"mixed_precision.{k}", value=v, origin=origin, soft=True)
            for k, v in recipes[key].items()]


def canonical_key(key: str, origin: str) -> str:
    """Validate a dotted name and return its canonical spelling (or raise naming the fix)."""
    if key.startswith("env_vars."):
        key = "env." + key[len("env_vars."):]
    section, _, field = key.partition(".")
    if not field:
        hint = ""
        if key.isupper():  # a launch script's NAME="--flags ..." (Megatron-LM's examples: TRAINING_ARGS)
            hint = ("; it reads as a launch script's shell variable: pass its Megatron-LM arguments with --mlm-args "
                    "\"...\" or a file of them")
        raise MoetuneError(f"{origin}: {key!r} is not a dotted config name (e.g. model.tensor_model_parallel_size)"
                           f"{hint}")
    if section == "env":
        if not ENV_NAME.match(field):
            raise MoetuneError(f"{origin}: {key!r} is not a valid environment variable name")
        return key
    if section in PASSTHROUGH:  # unchecked, but an alias the table lists still folds (dataset.sequence_length)
        return names().canonical(key)
    if section not in VALIDATED:
        allowed = ", ".join((*VALIDATED, "env", *PASSTHROUGH))
        raise MoetuneError(f"{origin}: unknown config section {section!r} in {key!r}; sections are {allowed}")
    table = names()
    if table.get(key) is None:
        close = closest(key, table.section_names(section))
        hint = f"; did you mean {close}?" if close else f"; see the {section}.* names in megatron_names.csv"
        raise MoetuneError(f"{origin}: unknown key {key!r}{hint}")
    return table.canonical(key)


# Sizes and counts Megatron divides by or loops over: 0 or less is no configuration (each its own one-line error)
AT_LEAST_ONE = frozenset({
    "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size", "model.context_parallel_size",
    "model.expert_model_parallel_size", "model.expert_tensor_parallel_size",
    "model.virtual_pipeline_model_parallel_size", "model.num_layers", "model.hidden_size",
    "model.num_attention_heads", "model.num_query_groups", "model.num_moe_experts", "model.moe_router_topk",
    "model.moe_ffn_hidden_size", "model.ffn_hidden_size", "model.seq_length", "train.micro_batch_size",
    "train.global_batch_size", "cluster.num_gpus"})


def _coerced(key: str, value: Any, origin: str) -> Any:
    if value is DELETE or value is FROM_LAYOUT:
        return value
    row = names().get(key)
    try:
        value = coerce(key, row.type if row else "any", value)
    except MoetuneError as err:
        raise MoetuneError(f"{origin}: {err}") from None
    if key in AT_LEAST_ONE and isinstance(value, int) and value < 1:
        raise MoetuneError(f"{origin}: {key} ({value}) must be at least 1")
    if key == "cluster.gpu":
        from moetune.specs.hardware import load_gpu

        try:
            load_gpu(str(value))
        except MoetuneError as err:
            where = origin if origin == "--gpu" else f"{origin}: cluster.gpu"  # the flag names the field itself
            raise MoetuneError(f"{where}: {err}") from None
    return value


def expand(a: Assignment) -> list[Assignment]:
    """A named mixed-precision recipe becomes its fields; everything else stays one assignment."""
    if a.key == "mixed_precision" and isinstance(a.value, str):
        return _mixed_precision_recipe(a.value, a.origin)
    if a.key == "mixed_precision" and a.value is None:
        return []
    return [a]


class Resolved(dict):
    """One source's config; ``soft``: its keys that hold a default the source implies (Megatron-LM's, for a flag it
    does not give), which an earlier source's explicit value keeps its place against (merge)."""

    soft: frozenset[str] = frozenset()

    def __init__(self) -> None:
        super().__init__()
        self.spelled: dict[str, str] = {}  # key -> the alias the source wrote it as (--megatron-core checks that)


# A field with two names (an alias the name table folds into its canonical one) is often written under both, the unused
# one None: Megatron-Core renamed cuda_graph_scope to cuda_graph_modules and keeps the old field as an alias that
# defaults to None, moving only a set one onto cuda_graph_modules (TransformerConfig __post_init__,
# transformer_config.py @ core_v0.18.2); Bridge's own helper writes the new field with the old one None beside it
# (utils/cuda_graph.py set_cuda_graph_modules @ 067f987), as the GPT-OSS 20B local-graph recipes do by hand
# (perf_recipes/gpt_oss/common.py _apply_gpt_oss_20b_local_graph_configs), and so does every YAML dump of a config
# Megatron-Core has normalized; Bridge's hybrid provider holds hybrid_override_pattern None beside
# hybrid_layer_pattern (models/hybrid/hybrid_provider.py:128 @ v0.6.0). Both names fold to one here, so a None under
# one name is dropped where the same source sets the other, instead of reading as a value that contradicts it.
def _unset_aliases_dropped(assignments: list[Assignment]) -> list[Assignment]:
    field = names().canonical
    given = {(field(a.key), a.key) for a in assignments if a.value is not None}
    return [a for a in assignments
            if not (a.value is None and any(f == field(a.key) and k != a.key for f, k in given))]


def resolve(assignments: Iterable[Assignment]) -> Resolved:
    """One source's assignments as a dict; the same key set twice to different values is an error."""
    out = Resolved()
    soft: set[str] = set()
    where: dict[str, str] = {}
    for raw in _unset_aliases_dropped(list(assignments)):
        for a in expand(raw):
            key = canonical_key(a.key, a.origin)
            value = _coerced(key, a.value, a.origin)
            if key in out and key not in soft and not a.soft and out[key] != value:
                raise MoetuneError(
                    f"contradictory overrides: {key} is set to {out[key]!r} ({where[key]}) and to {value!r} "
                    f"({a.origin}); keep one")
            if key in out and a.soft and key not in soft:
                continue  # an explicit value beats a recipe default from the same input
            out[key], where[key] = value, a.origin
            if a.key != key and names().get(a.key) is not None:  # an alias in the table (not env_vars. -> env.)
                out.spelled[key] = a.key
            (soft.add if a.soft else soft.discard)(key)
    out.soft = frozenset(soft)
    return out


def merge(sources: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Later sources override earlier ones (file, then --mlm-args, then --set), except with a default one implies
    (a Megatron-LM argument list's FP32 without --bf16) over a value an earlier one sets; `~key` deletes."""
    config: dict[str, Any] = {}
    explicit: set[str] = set()
    for source in sources:
        soft = getattr(source, "soft", frozenset())
        for key, value in source.items():
            if value is DELETE:
                config.pop(key, None)
                explicit.discard(key)
            elif key not in soft or key not in explicit:
                config[key] = value
                (explicit.discard if key in soft else explicit.add)(key)
    if config.get(VPP) is FROM_LAYOUT:
        config[VPP] = _layout_vpp(config)
    return dict(sorted(config.items()))


def _layout_vpp(config: dict[str, Any]) -> int | None:
    """Stages of the merged layout string (or hybrid pattern) over the merged PP, as arguments.py derives it; None
    where it is 1 or does not divide (the layout rules then say why)."""
    # only Megatron-LM arguments derive VPP from the layout (mlm_validate): a refusal names their flag
    stages = split_stages(config.get("model.pipeline_model_parallel_layout"), config.get("model.hybrid_layer_pattern"),
                          "--pipeline-model-parallel-layout")
    if stages is None:
        return None
    pp = int(config.get("model.pipeline_model_parallel_size") or 1)
    return stages // pp if stages % pp == 0 and stages // pp > 1 else None
