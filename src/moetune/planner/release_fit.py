"""What a named release can run (plan --megatron-core X.Y / --megatron-bridge X.Y.Z): the knob sets whose fields it
has, so the pick is one `emit` for that release writes rather than refuses.

A field the release lacks is fine held at its default (the release runs that default: emit leaves it out,
cli/release_check.py for_release); set otherwise, the release cannot run it: HybridEP before Megatron-Core 0.16
(moe_flex_dispatcher_backend), fine-grained activation offloading before 0.16 (offload_modules), full-iteration
graphs' static expert shapes before 0.18 (moe_paged_stash, moe_expert_rank_capacity_factor); a CUDA graph before 0.15
runs by its implementation's legacy switch (external_cuda_graph for Transformer Engine's: configio/legacy.py);
megatron_releases.csv and bridge_releases.csv say which release has which field.
"""

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import SimpleNamespace

from moetune.configio.legacy import by_switch
from moetune.configio.releases import (
    alias_in,
    at_default,
    core_at_least,
    describe,
    family_of,
    has,
    has_it,
    newest_having,
    option,
    product,
    release_number,
    releases,
    values_lacking,
)
from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.config_map import to_config
from moetune.planner.knob_fields import knob_fields
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import ModelSpec
from moetune.walls.model_flops import bridge_release_convention


def lacking(fields: dict, release: str) -> list[str]:
    """The fields of FIELDS set off their default that RELEASE lacks, and has no alias of (emit writes that), nor its
    legacy switch (configio/legacy.py: cuda_graph_impl before core_v0.15.0); and 'FIELD=VALUE' for a value of a field
    it has that it refuses (configio/releases.py values_lacking)."""
    return [k for k, v in fields.items() if not has(release, k) and not at_default(k, v) and not alias_in(k, release)
            and not by_switch(fields, k, release)] + values_lacking(fields, release)


def runs(k: Knobs, release: str) -> bool:
    """Whether RELEASE has every field and value knob set K sets."""
    return not lacking(knob_fields(k), release)


def _spans(names, release: str, spell: Callable[[str], str] = str) -> str:
    return ", ".join(f"{spell(n)} ({has_it(n, release)})" for n in names)


def model_lacking(spec: ModelSpec, gpu: GpuSpec, release: str) -> None:
    """One line where the model itself needs a field the release lacks (DeepSeek Sparse Attention's before 0.19, a
    gated delta-net's), whatever the knobs: what to_config writes of it beside the knobs' own fields."""
    probe = to_config(SimpleNamespace(model=spec, gpu=gpu, layout=Layout(world_size=1), knobs=Knobs(),
                                      workload=Workload(seq_length=4096, micro_batch_size=1, global_batch_size=1)))
    knobs = knob_fields(Knobs())
    if missing := lacking({k: v for k, v in probe.items() if k not in knobs}, release):
        raise MoetuneError(f"{option(release)}: {spec.name} needs {_spans(missing, release)}, which "
                           f"{describe(release)} lacks: upgrade, or drop the option")


# What a knob set runs as where the release lacks a field or value it sets, keyed by field (called with the refused
# value, or '' for a lacking field): the MXFP8 recipe without the output projection in MXFP8 (fp8_output_proj: a
# TransformerConfig field from core_v0.18.0 on), CUDA graphs over the scopes the release captures (moe_router and
# moe_preprocess from 0.16; before it one scope, attn, full or full_iteration). A lacking field with none (HybridEP,
# offloading, full-iteration graphs' static experts) leaves the set out.
FALLBACKS = {
    "model.fp8_output_proj": lambda k, _: replace(k, fp8_output_proj=False),
    "model.cuda_graph_scope": lambda k, value: replace(k, cuda_graph_scope=tuple(
        s for s in k.cuda_graph_scope if s != value)),
}


def _fallback(k: Knobs, missing: list[str]) -> Knobs | None:
    """K as FALLBACKS runs it without each of MISSING ('FIELD' or 'FIELD=VALUE'), or None where one has none."""
    for name in missing:
        field, _, value = name.partition("=")
        if field not in FALLBACKS:
            return None
        k = FALLBACKS[field](k, value)
    return k


# Behaviour a release has beyond its fields, each a (first Megatron-Core release, why) the planner leaves out before it:
# - expert TP unlike attention TP at EP 1: the expert weights sit in the dense gradient buffer (tensor_parallel/
#   layers.py allreduce = not (is_expert and expert_parallel)), reduced over DP x CP not EDP and the gradient norm
#   undercounted, until cd4afffa64 (PR #5916); rules scale.ep1_etp_needs_mcore_019 / scale.ep1_etp_older_mcore
# - scoped CUDA graphs under EP overlap: the overlapped schedule calls each layer's attention directly
#   (models/gpt/fine_grained_callables.py core_v0.15.0:334), past MegatronModule.__call__ where a graph replays, so
#   they run eager, priced as captured; 1501c0f33a (PR #2184) replays them; rule ep_overlap.graphs_need_mcore_016
EP1_ETP_FIXED, GRAPHS_UNDER_EP_OVERLAP = "0.19", "0.16"


# Why a release does not train a layout as moetune sizes it, by the reason layout_refusal names: (the layouts, what the
# release does to them, the --fix that avoids it); the search's one line names each (layouts_refused)
LAYOUT_REFUSALS = {
    "ep1_etp": ("EP 1 with expert TP unlike TP", f"an undercounted gradient norm, fixed in Megatron-Core "
                f"{EP1_ETP_FIXED}", "fix etp to the TP, or ep above 1"),
}


def layout_refusal(spec: ModelSpec, lay: Layout, release: str | None) -> str | None:
    """Why RELEASE does not train LAY as moetune sizes it (a key of LAYOUT_REFUSALS), or None where it does."""
    if release is not None and spec.num_moe_layers and lay.ep == 1 and lay.etp != lay.tp \
            and not core_at_least(release, EP1_ETP_FIXED):
        return "ep1_etp"
    return None


def _layouts(n: int) -> str:
    return f"{n} layout{'s' * (n != 1)}"


def layouts_refused(reasons: list[str], release: str) -> str:
    """The search's one line where RELEASE refuses every layout the --fix values leave: each reason layout_refusal
    gave (REASONS, one a layout) with the layouts it refused, most first, and their fixes."""
    counts = Counter(reasons).most_common()
    said = "; ".join(f"{LAYOUT_REFUSALS[why][0]} in {_layouts(n)} ({LAYOUT_REFUSALS[why][1]})" for why, n in counts)
    fixes = "; or ".join(LAYOUT_REFUSALS[why][2] for why, _ in counts)
    return (f"{option(release)}: every layout the --fix values leave ({_layouts(len(reasons))}) is one "
            f"{describe(release)} does not train as moetune sizes it: {said}; {fixes}")


def _graphs_replay(k: Knobs, release: str) -> bool:
    """Whether RELEASE replays K's scoped CUDA graphs, as the step prices them (GRAPHS_UNDER_EP_OVERLAP)."""
    scoped = k.cuda_graph_scope and "full_iteration" not in k.cuda_graph_scope
    return not (k.ep_overlap and scoped) or core_at_least(release, GRAPHS_UNDER_EP_OVERLAP)


def _said(blocking: list[list[str]]) -> list[str]:
    """What the knob sets refused lack (BLOCKING, one list a set), as their one line names it: what every one of them
    lacks, the --fix pin the release refuses (Muon: each set's dispatcher and graphs lack more or less besides), else
    all of it."""
    every = list(dict.fromkeys(n for missing in blocking for n in missing))
    return [n for n in every if all(n in missing for missing in blocking)] or every


def release_grid(grid: list[Knobs], release: str) -> tuple[list[Knobs], tuple[str, ...]]:
    """(the knob sets of GRID whose fields RELEASE has, each with its FALLBACKS where those are all it lacks; the
    fields that kept the others out or changed them); one line where none is left (the --fix pins ask for what the
    release lacks)."""
    kept, left, blocking = {}, {}, []
    for k in grid:
        missing = lacking(knob_fields(k), release)
        left.update(dict.fromkeys(missing))
        if missing and (fallen := _fallback(k, missing)) is not None:
            k, missing = fallen, lacking(knob_fields(fallen), release)
        blocking.append(missing)
        if not missing and _graphs_replay(k, release):
            kept[k] = None  # in order, once: a fallback can meet a set the grid has already
    if grid and not kept:
        raise MoetuneError(f"{option(release)}: every knob set searched needs what {describe(release)} lacks: "
                           f"{_spans(_said(blocking), release)}; change the --fix values that ask for it, or upgrade")
    return list(kept), tuple(left)


def upgrade_for(change: dict, release: str) -> str | None:
    """Where CHANGE (config fields, a retune move's) needs what RELEASE lacks: the first release of its family that
    has it all, with the names ('Megatron-Core 0.16 (model.moe_flex_dispatcher_backend)'); None where RELEASE runs
    it. A name no release of the family has yet asks for Megatron-LM main's, or a newer Bridge."""
    missing = lacking(change, release)
    if not missing:
        return None
    family = family_of(release)
    order = releases(family).order
    firsts = [newest_having(n, family) for n in missing]
    first = order[max(order.index(f) for f in firsts)] if None not in firsts else None
    return f"{product(release)} {first or 'newer than ' + order[-1]} ({', '.join(missing)})"


# '|' stage separators in a hybrid's pattern came with --hybrid-layer-pattern (core_v0.17.0); the older
# --hybrid-override-pattern refuses any symbol but the layers' (mamba_hybrid_layer_allocation.py:82 @core_v0.16.0)
SPLIT_PATTERN_FLAG = "--hybrid-layer-pattern"


def splits_hybrids(release: str) -> bool:
    """Whether RELEASE takes a hybrid pattern split into pipeline stages ('|'), how moetune writes a hybrid's split
    (config_map.hybrid_fields)."""
    return has(release, SPLIT_PATTERN_FLAG)


def release_pins(spec: ModelSpec, release: str, fixed: dict | None = None) -> dict:
    """Layout pins a release needs of the model: a Mamba hybrid at PP 1 where it takes no split pattern
    (splits_hybrids). One line where FIXED (the user's --fix) pins otherwise."""
    pins = {"pp": 1} if spec.mamba and not splits_hybrids(release) else {}
    for key, value in pins.items():
        if key in (fixed or {}) and fixed[key] not in (value, [value]):
            raise MoetuneError(f"{option(release)}: --fix {key}={fixed[key]} splits {spec.name}'s hybrid pattern, "
                               f"which needs {SPLIT_PATTERN_FLAG} ({has_it(SPLIT_PATTERN_FLAG, release)}): "
                               f"fix {key}={value}, or upgrade")
    return pins


# The seeds' safe bring-up dispatcher: what a defaulted flex backend the release lacks falls back to (HybridEP, the
# GB200/GB300 default, before Megatron-Core 0.16)
SAFE_DISPATCHER = "alltoall"


@dataclass(frozen=True, slots=True)
class KnobSource:
    """What set an estimate's knobs, as release_knobs' refusal names it: estimate's flags (FLAGS), or a config's
    fields (or a Megatron-LM launch's arguments, SPELL giving each field's) in its inputs."""

    subject: str = "the knobs set"  # with its verb
    change: str = "the flags that set them"
    spell: Callable[[str], str] = str  # 'FIELD' or 'FIELD=VALUE' as the source writes it
    # the fields the config sets (None: flags): a field its knobs imply without the config writing it (a flex
    # dispatcher's SM count a launch leaves to its default) is not named where one it writes is
    holds: frozenset[str] | None = None

    def named(self, missing: list[str]) -> list[str]:
        return [m for m in missing if self.holds is None or m.partition("=")[0] in self.holds] or missing


FLAGS = KnobSource()


def release_knobs(k: Knobs, release: str, defaulted: list[str], source: KnobSource = FLAGS) -> Knobs:
    """K as RELEASE runs it, moving only what moetune defaulted (DEFAULTED, estimate's list, is updated): a flex
    dispatcher the release lacks falls back to SAFE_DISPATCHER, a graph scope to the scopes it captures (FALLBACKS).
    One line where what is left needs what the release lacks: a knob the user gave, by SOURCE's flags or fields."""
    if "dispatcher" in defaulted and not runs(Knobs(dispatcher=k.dispatcher), release):
        k = replace(k, dispatcher=SAFE_DISPATCHER, flex_num_sms=None)
        defaulted[:] = [d for d in defaulted if d != "flex_num_sms"]
    scopes = [m for m in lacking(knob_fields(k), release) if m.startswith("model.cuda_graph_scope=")]
    if "cuda_graph_scope" in defaulted and scopes:
        k = _fallback(k, scopes)
    if missing := lacking(knob_fields(k), release):
        named = _spans(source.named(missing), release, source.spell)
        raise MoetuneError(f"{option(release)}: {source.subject} what {describe(release)} lacks: {named}; change "
                           f"{source.change}, or upgrade")
    return k


def release_model(spec: ModelSpec, release: str | None) -> ModelSpec:
    """SPEC counted as RELEASE's log counts TFLOP/s/GPU: a Megatron Bridge release's own counter
    (model_flops.bridge_release_convention: v0.4.2 counts gpt-oss-120b's GLU 20% lower than main); a Megatron-LM
    launch keeps training.py's (from_config.trained_model), a Megatron-Core release alone says nothing of it."""
    if release is None or family_of(release) != "bridge" or spec.flops_convention == "megatron-lm":
        return spec
    return replace(spec, flops_convention=bridge_release_convention(release_number(release)))


def for_release(spec: ModelSpec, gpu: GpuSpec, knobs: Knobs, release: str, defaulted: list[str],
                source: KnobSource = FLAGS) -> tuple:
    """(knobs, spec) of an estimate for RELEASE: one line where the release cannot build the model (model_lacking, as
    plan and emit refuse it), the knobs as it runs them (release_knobs: SOURCE set them) and its TFLOP/s counter
    (release_model)."""
    model_lacking(spec, gpu, release)
    return release_knobs(knobs, release, defaulted, source), release_model(spec, release)
