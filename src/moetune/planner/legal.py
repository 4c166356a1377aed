"""Knob sets the rule table rejects whatever the layout, so the planner never proposes what `moetune check` refuses.

These are the error rules of data/rules.yaml that read no layout, cluster or batch fact (EP overlap with 'moe'
recompute or with more than one MTP layer, 'moe' recompute around a moe_router CUDA graph, ...). Each knob set
is judged once, on a probe layout that passes every layout rule (expert parallelism over the fewest ranks); the
layout rules are enforced by the enumeration and `search._fits`.
"""

from dataclasses import replace
from functools import cache
from types import SimpleNamespace

from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.config_map import to_config
from moetune.rules import evaluate
from moetune.rules.table import Table, load_table
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import ModelSpec

# Facts that depend on the layout, the cluster size or the batch: rules reading any of them are not judged here.
LAYOUT_FACTS = frozenset({
    "derived.tp", "derived.cp", "derived.pp", "derived.ep", "derived.etp", "derived.data_parallel_size",
    "derived.nvlink_domain", "derived.hybridep_ranks_per_domain", "derived.fits", "cluster.num_gpus",
    "model.seq_length", "model.sequence_parallel", "model.virtual_pipeline_model_parallel_size",
    "model.expert_model_parallel_size",
})
LAYOUT_PREFIXES = ("train.", "env.")


@cache
def knob_rules() -> Table:
    """The error rules that read only the model, the platform and the knobs."""
    table = load_table()
    return replace(table, rules=tuple(
        r for r in table.rules if r.severity == "error" and not r.names & LAYOUT_FACTS
        and not any(n.startswith(LAYOUT_PREFIXES) for n in r.names)))


def _probe(spec: ModelSpec, gpu: GpuSpec, knobs: Knobs, seq: int) -> SimpleNamespace:
    experts = spec.num_moe_experts
    ep = min((d for d in range(2, experts + 1) if experts % d == 0), default=1) if experts > 1 else 1
    return SimpleNamespace(model=spec, gpu=gpu, layout=Layout(world_size=ep, ep=ep), knobs=knobs,
                           workload=Workload(seq_length=seq, micro_batch_size=1, global_batch_size=ep))


def knob_findings(spec: ModelSpec, gpu: GpuSpec, knobs: Knobs, seq: int) -> list:
    """The layout-independent error rules this knob set breaks on this model and platform (rule findings)."""
    config = to_config(_probe(spec, gpu, knobs, seq))
    return [f for f in evaluate(config, None, context="check", table=knob_rules()) if f.severity == "error"]


def knob_errors(spec: ModelSpec, gpu: GpuSpec, knobs: Knobs, seq: int) -> list[str]:
    return [f.rule for f in knob_findings(spec, gpu, knobs, seq)]


def legal_grid(spec: ModelSpec, gpu: GpuSpec, grid: list[Knobs], seq: int, *, optional_delay_wgrad: bool = True
               ) -> list[Knobs]:
    """`grid` without the knob sets the rule table rejects (judged once per rule-relevant combination: the
    optimizer knobs appear in none of these rules). A set refused only with its paired delay_wgrad_compute keeps
    EP overlap without it, unless delay_wgrad was pinned (`optional_delay_wgrad=False`). When every set breaks a
    rule (pinned --fix values), the first broken rule is the error."""
    verdict: dict[tuple, bool] = {}

    def legal(k: Knobs) -> bool:
        key = (k.precision, k.dispatcher, k.recompute, k.effective_modules, k.cuda_graph_scope, k.ep_overlap,
               k.delay_wgrad, k.routing, k.offload_modules)
        if key not in verdict:
            verdict[key] = not knob_errors(spec, gpu, k, seq)
        return verdict[key]

    out = []
    for k in grid:
        if not legal(k) and optional_delay_wgrad and k.delay_wgrad and legal(replace(k, delay_wgrad=False)):
            k = replace(k, delay_wgrad=False)
        if legal(k):
            out.append(k)
    if grid and not out:
        f = knob_findings(spec, gpu, grid[0], seq)[0]
        raise MoetuneError(f"no knob set passes the rule table ({f.rule}): {f.message} Change the --fix values.")
    return out
