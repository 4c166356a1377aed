"""Knob sets the rule table rejects whatever the layout, so the planner never proposes what `moetune check` refuses.

These are the error rules of data/rules.yaml that read no layout, cluster or batch fact (EP overlap with 'moe'
recompute or with more than one MTP layer, 'moe' recompute around a moe_router CUDA graph, ...). Each knob set
is judged once, on a probe layout that passes every layout rule (expert parallelism over the fewest ranks); the
layout rules are enforced by the enumeration and `search_state._fits`.
"""

from dataclasses import replace
from functools import cache
from itertools import product
from types import SimpleNamespace
from typing import Callable

from moetune.configio.layout_map import HYBRID_SPLIT, layout_fields
from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.config_map import to_config
from moetune.planner.defaults import with_mamba
from moetune.rules import evaluate
from moetune.rules.derive import EXTERNAL, derive
from moetune.rules.table import Table, load_table
from moetune.rules.verdicts import Verdicts
from moetune.specs.hardware import GpuSpec, load_gpu
from moetune.specs.model import ModelSpec
from moetune.specs.registry import load_model

# Layouts with batches and cluster sizes that differ in every dimension, and knob sets that make the layout's
# dispatcher environment appear (HybridEP ranks per NVLink domain): facts that differ between them depend on the layout.
_LAYOUT_PROBES = (
    (Layout(world_size=8), Workload(seq_length=4096, micro_batch_size=1, global_batch_size=8)),
    (Layout(world_size=256, tp=2, cp=2, pp=4, vpp=2, ep=8, etp=2),
     Workload(seq_length=8192, micro_batch_size=2, global_batch_size=512)),
    (Layout(world_size=1024, tp=4, cp=4, pp=8, vpp=4, ep=64, account_for_embedding=True, account_for_loss=True),
     Workload(seq_length=16384, micro_batch_size=4, global_batch_size=4096)),
    # more expert ranks than the probe model has experts (the EP-first split then keeps expert TP)
    (Layout(world_size=512, ep=64, etp=8), Workload(seq_length=4096, micro_batch_size=1, global_batch_size=512)),
    # pipeline stages without interleaving (derived.pp_without_vpp: the probes above interleave every PP > 1)
    (Layout(world_size=64, pp=2, ep=8), Workload(seq_length=4096, micro_batch_size=1, global_batch_size=64)),
)
_PROBE_KNOBS = (Knobs(), Knobs(dispatcher="hybridep", ep_overlap=True, delay_wgrad=True))
# The probe model and platforms: an 8-GPU and a 72-GPU NVLink domain, so facts about leaving the domain appear.
# Which facts a layout moves does not depend on the architecture (tests/planner/test_legal.py: the same set from
# gated delta-net, Mamba and sliding-window models); DeepSeek-V3 is loaded anyway by most plans.
_PROBE_MODELS, _PROBE_GPUS = ("deepseek-v3",), ("h100", "gb200")


def _facts(spec: ModelSpec, gpu: GpuSpec, knobs: Knobs, lay: Layout, wl: Workload) -> dict:
    config = to_config(SimpleNamespace(model=spec, gpu=gpu, layout=lay, knobs=knobs, workload=wl))
    return {**config, **{f"derived.{k}": v for k, v in derive(config).items()}}


@cache
def layout_facts() -> frozenset[str]:
    """Facts that depend on the layout, the cluster size or the batch: every config name a layout sets
    (configio/layout_map.py layout_fields), the estimator's facts (derive.EXTERNAL: fits, peak memory, ...), and
    every config or derived fact that differs between the probe layouts. Rules reading any of them are not judged
    here."""
    # a hybrid's split and the stages it makes: the probe model has no Mamba layers for a layout to split
    hybrid = {HYBRID_SPLIT, "derived.hybrid_stages"}
    # the GEMM shapes an FP8/FP4 recipe refuses (tokens per rank, per-rank widths): the probes train in BF16, which
    # runs any shape, and their sequences are powers of two; the planner's candidates judge them (search_state._runs)
    shapes = {"derived.gemm_refusal", "derived.gemm_fix_seq", "derived.gemm_fix"}
    names = set(layout_fields(Layout(world_size=1))) | {f"derived.{k}" for k in EXTERNAL} | hybrid | shapes
    for model, gpu, knobs in product(_PROBE_MODELS, _PROBE_GPUS, _PROBE_KNOBS):
        spec, gpu_spec = load_model(model), load_gpu(gpu)
        first, *others = (_facts(spec, gpu_spec, knobs, lay, wl) for lay, wl in _LAYOUT_PROBES)
        # a fact two probes differ in differs from the first probe's in one of them (the config's numbers, strings and
        # lists compare transitively): four comparisons a probe set find what its ten pairs did
        for other in others:
            names |= {n for n in first.keys() | other.keys() if n not in names and first.get(n) != other.get(n)}
    return frozenset(names)


@cache
def knob_rules() -> Table:
    """The error rules that read only the model, the platform and the knobs."""
    table, layout = load_table(), layout_facts()
    # whether a rule fires is its condition's business: its message and fix may read layout facts (the sequence a
    # recompute fix weighs) without making the verdict depend on the layout
    return replace(table, rules=tuple(r for r in table.rules if r.severity == "error" and not r.when.names & layout))


def _probe_layout(spec: ModelSpec, seq: int) -> tuple[Layout, Workload]:
    """The probe's layout and batch: expert parallelism over the fewest ranks that split the experts."""
    experts = spec.num_moe_experts
    ep = next((d for d in range(2, experts + 1) if experts % d == 0), 1) if experts > 1 else 1
    return Layout(world_size=ep, ep=ep), Workload(seq_length=seq, micro_batch_size=1, global_batch_size=ep)


def _probe(spec: ModelSpec, gpu: GpuSpec, knobs: Knobs, seq: int,
           frame: tuple[Layout, Workload] | None = None) -> SimpleNamespace:
    lay, wl = frame or _probe_layout(spec, seq)
    return SimpleNamespace(model=spec, gpu=gpu, layout=lay, knobs=knobs, workload=wl)


def knob_findings(spec: ModelSpec, gpu: GpuSpec, knobs: Knobs, seq: int) -> list:
    """The layout-independent error rules this knob set breaks on this model and platform (rule findings)."""
    config = to_config(_probe(spec, gpu, knobs, seq))
    return [f for f in evaluate(config, None, context="check", table=knob_rules()) if f.severity == "error"]


def knob_errors(spec: ModelSpec, gpu: GpuSpec, knobs: Knobs, seq: int) -> list[str]:
    return [f.rule for f in knob_findings(spec, gpu, knobs, seq)]


def legal_grid(spec: ModelSpec, gpu: GpuSpec, grid: list[Knobs], seq: int, *, optional_delay_wgrad: bool = True,
               optional_attn_graph: bool = True) -> list[Knobs]:
    """`grid` without the knob sets the rule table rejects (judged once per rule-relevant combination: the
    optimizer knobs appear in none of these rules). A set refused only with its paired delay_wgrad_compute keeps
    EP overlap without it, unless delay_wgrad was pinned (`optional_delay_wgrad=False`); one refused for a graph over
    the attention (DeepSeek Sparse Attention: cudagraph.dsa_attention) keeps the rest of its scope, unless the scope
    was pinned (`optional_attn_graph=False`). When every set breaks a rule (pinned --fix values), the first broken
    rule is the error."""
    verdict: dict[tuple, bool] = {}
    breaks = _knob_judge(spec, gpu, seq)

    def legal(k: Knobs) -> bool:
        key = (k.precision, k.dispatcher, k.recompute, k.effective_modules, k.cuda_graph_scope, k.ep_overlap,
               k.delay_wgrad, k.routing, k.offload_modules)
        if key not in verdict:
            verdict[key] = not breaks(k)
        return verdict[key]

    out = []
    for k in grid:
        if not legal(k) and optional_delay_wgrad and k.delay_wgrad and legal(replace(k, delay_wgrad=False)):
            k = replace(k, delay_wgrad=False)
        if not legal(k) and optional_attn_graph and "attn" in k.cuda_graph_scope:
            narrowed = _eager_attention(k)
            k = narrowed if narrowed.cuda_graph_scope and legal(narrowed) else k
        if legal(k):
            out.append(k)
    if grid and not out:
        f = knob_findings(spec, gpu, grid[0], seq)[0]
        raise MoetuneError(f"no knob set passes the rule table ({f.rule}): {f.message} Change the --fix values.")
    return out


def _knob_judge(spec: ModelSpec, gpu: GpuSpec, seq: int) -> Callable[[Knobs], bool]:
    """Whether a knob set breaks a rule of knob_rules, as `knob_errors(spec, gpu, knobs, seq)` being non-empty says,
    at a fraction of its cost: the probe's layout built once, only the facts a layout does not decide derived
    (rules/derive.py LAYOUT_STEPS: no knob rule reads the others), and each rule run once per distinct reading of
    its names (rules/verdicts.py). tests/planner/test_legal_grid.py holds it to knob_errors, set by set."""
    frame, verdicts = _probe_layout(spec, seq), Verdicts(knob_rules())

    def breaks(knobs: Knobs) -> bool:
        config = to_config(_probe(spec, gpu, knobs, seq, frame))
        return verdicts.breaks(config, derive(config, layout=False))
    return breaks


def _eager_attention(knobs: Knobs) -> Knobs:
    """`knobs` with the attention left out of its graph scope (the MoE router and preprocessing kept)."""
    return replace(knobs, cuda_graph_scope=tuple(x for x in knobs.cuda_graph_scope if x != "attn"))


def legal_default_scope(spec: ModelSpec, gpu: GpuSpec, knobs: Knobs, seq: int) -> Knobs:
    """`knobs` with a defaulted graph scope narrowed until no cudagraph rule refuses it beside the rest: the platform's
    TE-scoped graphs, then attention alone (a hybrid's Mamba mixers with it; a 'moe' recompute beside a router
    graph), then the scope without attention (DeepSeek Sparse Attention), then none (full recompute)."""
    for scope in (knobs.cuda_graph_scope, with_mamba(spec, ("attn",)), _eager_attention(knobs).cuda_graph_scope, ()):
        k = replace(knobs, cuda_graph_scope=scope)
        if not any(r.startswith("cudagraph.") for r in knob_errors(spec, gpu, k, seq)):
            return k
    return replace(knobs, cuda_graph_scope=())
