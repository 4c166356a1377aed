"""Why the planner's pick beats a baseline (a published recipe or the user's config): the config changes in
Megatron Bridge names, what each group of them predicts applied alone and in turn, and where the predicted time
went, wall by wall."""

from moetune.errors import MoetuneError
from moetune.planner.config_map import to_config
from moetune.planner.estimate import Estimate
from moetune.planner.from_config import from_config
from moetune.planner.ranking import SMALLEST_GAIN
from moetune.planner.rule_findings import rule_errors
from moetune.planner.track_record import measured_twins

# The model's architecture, the same in both (the MTP depth is not: a run may train with another, --mtp-layers)
IGNORED = ("cluster.", "model.num_", "model.hidden_size", "model.moe_ffn", "model.moe_router_topk",
           "model.moe_shared_expert_intermediate", "model.multi_latent_attention")

# Settings that only work together, by a piece of their dotted name, in the order they are applied "in turn": the
# layout first (what the rest runs on), the overlaps after the graphs they may need (EP overlap hides nothing eager on
# Blackwell: efficiency.toml ep_overlap_hide_eager). A setting no group names is its own group.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("layout", ("parallel_size", "pipeline_model_parallel_layout", "layers_in_first", "layers_in_last",
                "account_for_", "sequence_parallel", "cp_comm_type", "hierarchical_context_parallel",
                "hybrid_layer_pattern", "NUM_OF_HYBRID_EP_RANKS", "pipeline_dtype")),
    ("micro-batch", ("micro_batch_size",)),
    ("gradient precision", ("grad_reduce_in_fp32", "main_grads")),
    ("LM head precision", ("fp8_output_proj",)),
    ("precision", ("mixed_precision.", "fp8", "fp4")),
    ("recompute", ("recompute",)),
    ("dispatcher", ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend", "num_sms", "moe_enable_deepep")),
    # with what graph capture needs: TE's RNG tracker, no NaN check's host sync (Bridge's full-iteration recipes)
    ("CUDA graphs", ("cuda_graph", "rank_capacity", "paged_stash", "op_fuser", "rng_tracker", "check_for_nan")),
    ("overlap", ("overlap", "delay_wgrad")),
    ("offload", ("offload",)),
)


def config_changes(pick: Estimate, baseline: Estimate) -> dict[str, tuple]:
    """Dotted name -> (baseline value, pick value) for every setting that differs."""
    a, b = to_config(baseline), to_config(pick)
    keys = sorted((set(a) | set(b)) - {k for k in set(a) | set(b) if k.startswith(IGNORED)})
    return {k: (a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)}


def group_of(key: str) -> str:
    return next((name for name, parts in GROUPS if any(p in key for p in parts)), key)


def _grouped(changes: dict[str, tuple]) -> dict[str, list[str]]:
    order = [name for name, _ in GROUPS]
    groups: dict[str, list[str]] = {}
    for key in changes:
        groups.setdefault(group_of(key), []).append(key)
    return dict(sorted(groups.items(), key=lambda g: order.index(g[0]) if g[0] in order else len(order)))


def _apply(config: dict, pick_config: dict, keys: list[str]) -> dict:
    """`config` with the pick's settings of `keys` as the pick's config has them: a None it writes stays (to_config
    keeps only the Nones a plan means, config_map.py UNSET_EXPLICITLY and a MoE model's BF16 router, where leaving
    the field out would run another value: from_config reads an absent moe_router_dtype as the model bridge's FP32),
    and a setting it leaves out is left out."""
    kept = {k: v for k, v in config.items() if k not in keys}
    return {**kept, **{k: pick_config[k] for k in keys if k in pick_config}}


def _tokens(baseline: Estimate, config: dict, known: set[str]) -> tuple[float | None, bool, str, set[str]]:
    """(tokens/s/GPU, fits, why not, rule errors) of the baseline's model and GPU under `config`; None where the
    config alone is not a configuration moetune can run (a setting that needs another group's); a configuration it
    prices but Megatron or the seeds refuse keeps its figure and names the rules it adds to `known` (the errors of
    the configuration it was changed from: EP overlap without VPP at PP > 1)."""
    try:
        layout, workload, knobs = from_config(config, baseline.model)
        e = baseline.variant(layout=layout, workload=workload, knobs=knobs)
    except MoetuneError as err:
        return None, False, str(err), known
    errors = set(rule_errors(e))
    refused = sorted(errors - known)
    return e.time["tokens_per_s_per_gpu"], e.fits, f"refused by rule {', '.join(refused)}" if refused else "", errors


def setting_effects(pick: Estimate, baseline: Estimate, changes: dict[str, tuple],
                    base_errors: set[str] | None = None) -> list[dict]:
    """Each group of changed settings applied to the baseline alone, and in turn on top of the groups before it (the
    last in-turn figure is the pick's), as predicted tokens/s/GPU over the step before; settings interact, so the
    alone figures need not add up. `base_errors`: the baseline's rule errors where the caller has them."""
    base_cfg, pick_cfg, base = to_config(baseline), to_config(pick), baseline.time["tokens_per_s_per_gpu"]
    out, cumulative, before = [], base_cfg, base
    base_errors = turn_errors = set(rule_errors(baseline)) if base_errors is None else base_errors
    for i, (name, keys) in enumerate(_grouped(changes).items()):
        alone, alone_fits, why, errors = _tokens(baseline, _apply(base_cfg, pick_cfg, keys), base_errors)
        cumulative = _apply(cumulative, pick_cfg, keys)
        # the first group in turn is the same config as alone; a later one is blamed only for the errors it adds
        turn, turn_fits, turn_why, turn_errors = (alone, alone_fits, why, errors) if i == 0 else \
            _tokens(baseline, cumulative, turn_errors)
        out.append({"group": name, "settings": keys,
                    "alone": None if alone is None else alone / base - 1, "alone_fits": alone_fits,
                    "alone_refused": why or None,
                    "in_turn": None if turn is None else turn / before - 1, "in_turn_fits": turn_fits,
                    "in_turn_refused": turn_why or None})
        before = turn if turn is not None else before
    return out


def versus(pick: Estimate, baseline: Estimate) -> dict:
    tp, tb = pick.time, baseline.time
    walls = {w: {"baseline": tb["walls"][w], "pick": tp["walls"][w], "saved": tb["walls"][w] - tp["walls"][w]}
             for w in tb["walls"]}
    speedup = tp["tokens_per_s_per_gpu"] / tb["tokens_per_s_per_gpu"]
    # a faster pick: the wall that saved most; a slower one: the wall that lost most
    biggest = max(walls, key=lambda w: walls[w]["saved"] * (1 if speedup >= 1 else -1))
    changes = config_changes(pick, baseline)
    refused = rule_errors(baseline)  # compared all the same: what it would cost if it ran (as estimate prints it)
    effects = setting_effects(pick, baseline, changes, set(refused))
    moved = sorted((e for e in effects if e["in_turn"] and abs(e["in_turn"]) >= SMALLEST_GAIN),
                   key=lambda e: -abs(e["in_turn"]))
    why = (f"predicted {speedup:.2f}x the baseline's tokens/s/GPU; most of the {'gain' if speedup >= 1 else 'loss'} "
           f"in the {biggest} wall ({walls[biggest]['baseline']:.2f} s -> {walls[biggest]['pick']:.2f} s per step)"
           + ("; in turn: " + ", ".join(f"{e['group']} {e['in_turn']:+.1%}" for e in moved[:4]) if moved else ""))
    if not changes:  # e.g. a plan's own pick given as its baseline: no gain to place in a wall
        why = f"the pick is the baseline's configuration, no setting changed: predicted {speedup:.2f}x its tokens/s/GPU"
    twins = measured_twins(baseline)
    note = measured_note(twins, tb["tokens_per_s_per_gpu"], tp["tokens_per_s_per_gpu"])
    return {"speedup": speedup, "changes": {k: list(v) for k, v in changes.items()}, "effects": effects,
            "baseline_measured": twins, "baseline_rule_errors": refused, "measured_note": note,
            "walls": walls, "why": why, "baseline_fits": baseline.fits,
            "baseline_tokens_per_s_per_gpu": tb["tokens_per_s_per_gpu"],
            "pick_tokens_per_s_per_gpu": tp["tokens_per_s_per_gpu"]}


def measured_note(twins: list[dict], predicted: float, pick: float) -> str | None:
    """The baseline's published measurements against its prediction and the pick's: a speedup over a prediction that
    misses the recipe's measurement (R097 -32%) is not a speedup over the recipe."""
    if not twins:
        return None
    lo, hi = min(t["measured"] for t in twins), max(t["measured"] for t in twins)
    ids = ", ".join(t["run_id"] for t in twins)
    measured = f"{hi:,.0f}" if lo == hi else f"{lo:,.0f}-{hi:,.0f}"
    off = ", ".join(sorted({f"{predicted / t['measured'] - 1:+.0%}" for t in twins}))
    gap = " (a listed gap: data/known_gaps.toml)" if any(t["listed_gap"] for t in twins) else ""
    return (f"the baseline is published {ids}, measured at {measured} tokens/s/GPU, which moetune predicts at "
            f"{predicted:,.0f} ({off}){gap}; the pick's predicted {pick:,.0f} is {pick / hi:.2f}x the fastest "
            "measurement" + (": below what the recipe measured, so keep the recipe until a measured run of the pick "
                             "says otherwise" if pick < hi else ""))
