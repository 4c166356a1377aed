"""Memory-wall facts for the rule table (rules/derive.py EXTERNAL): does the config fit, and the seeds'
fit steps (smallest model parallelism that fits, selective recompute) evaluated by the estimator; with them the
4K-shard CP over the CPs the model runs at (rule_findings.cp_sizing_facts)."""

from dataclasses import replace

from moetune.configio.cluster import config_gpu
from moetune.configio.layout_map import layout_fields
from moetune.errors import MoetuneError
from moetune.planner.config_map import UNSET_EXPLICITLY
from moetune.planner.estimate import Estimate, estimate
from moetune.planner.fit_steps import smallest_fitting_layout
from moetune.planner.from_config import from_config, trained_model
from moetune.planner.ranking import SMALLEST_GAIN
from moetune.planner.rule_findings import (
    costly_facts,
    cp_sizing_facts,
    first_selective,
    fits_without_offload,
    host_facts,
    model_facts,
)
from moetune.specs.model import ModelSpec


def memory_facts(e: Estimate) -> dict:
    facts = {"fits": e.fits, "peak_bytes": e.peak_bytes, "capacity_bytes": e.gpu.capacity_bytes, **cp_sizing_facts(e)}
    selective = replace(e.knobs, recompute="selective", recompute_modules=first_selective(e))
    facts["fits_with_selective_recompute"] = e.variant(knobs=selective).fits
    if e.knobs.optimizer_offload_fraction > 0 or e.knobs.offload_modules:
        facts["fits_with_selective_without_offload"] = fits_without_offload(e)
    facts.update(host_facts(e))
    facts.update(model_facts(e))
    facts.update(costly_facts(e))
    try:
        smallest = smallest_fitting_layout(e)
    except MoetuneError:  # a probe of other layouts: a rule one of them breaks is not the config's
        smallest = None
    if smallest is not None:
        # the whole split: a None that the plan means (no VPP, no layout string) is written, so the fix replaces the
        # config's own VPP or layout string instead of leaving it beside a layout it no longer fits
        layout = {k: v for k, v in layout_fields(smallest.layout).items() if v is not None or k in UNSET_EXPLICITLY}
        model_parallel = lambda lay: lay.tp * lay.cp * lay.pp  # noqa: E731
        if not e.fits:
            facts["fitting_layout"] = layout
        elif model_parallel(smallest.layout) < model_parallel(e.layout):
            facts["fits_with_less_model_parallel"] = True
            facts["less_model_parallel_layout"] = layout
            change = smallest.time["tokens_per_s_per_gpu"] / e.time["tokens_per_s_per_gpu"] - 1
            facts["less_model_parallel_note"] = less_model_parallel_note(change)
        else:
            facts["fits_with_less_model_parallel"] = False
    return facts


def less_model_parallel_note(change: float) -> str:
    """What the step model predicts of the layout scale.maximize_dp offers, against the config's: a slowdown past the
    least gain moetune names says the two orders disagree."""
    slower = ", so the step time ranks this layout first (plan weighs both): measure before moving" \
        if change < -SMALLEST_GAIN else ""
    return f"; moetune predicts it at {100 * change:+.1f}% tokens/s/GPU against this one{slower}"


def config_memory_facts(model: ModelSpec, config: dict, overheads: dict | None = None) -> dict:
    """Facts for a user's normalized config (needs cluster.gpu and cluster.num_gpus), under the memory wall's
    overhead figures with the user's `overheads` on top."""
    layout, workload, knobs = from_config(config, model)
    return memory_facts(estimate(trained_model(model, config), config_gpu(config), layout, workload,
                                 knobs, overheads))
