"""Why the planner's pick beats a baseline (a published recipe or the user's config): the config changes in
Megatron Bridge names, and where the predicted time went, wall by wall."""

from moetune.planner.config_map import to_config
from moetune.planner.estimate import Estimate

# The model's architecture, the same in both (the MTP depth is not: a run may train with another, --mtp-layers)
IGNORED = ("cluster.", "model.num_", "model.hidden_size", "model.moe_ffn", "model.moe_router_topk",
           "model.moe_shared_expert_intermediate", "model.multi_latent_attention")


def config_changes(pick: Estimate, baseline: Estimate) -> dict[str, tuple]:
    """Dotted name -> (baseline value, pick value) for every setting that differs."""
    a, b = to_config(baseline), to_config(pick)
    keys = sorted((set(a) | set(b)) - {k for k in set(a) | set(b) if k.startswith(IGNORED)})
    return {k: (a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)}


def versus(pick: Estimate, baseline: Estimate) -> dict:
    tp, tb = pick.time, baseline.time
    walls = {w: {"baseline": tb["walls"][w], "pick": tp["walls"][w], "saved": tb["walls"][w] - tp["walls"][w]}
             for w in tb["walls"]}
    speedup = tp["tokens_per_s_per_gpu"] / tb["tokens_per_s_per_gpu"]
    # a faster pick: the wall that saved most; a slower one: the wall that lost most
    biggest = max(walls, key=lambda w: walls[w]["saved"] * (1 if speedup >= 1 else -1))
    why = (f"predicted {speedup:.2f}x the baseline's tokens/s/GPU; most of the {'gain' if speedup >= 1 else 'loss'} "
           f"in the {biggest} wall ({walls[biggest]['baseline']:.2f} s -> {walls[biggest]['pick']:.2f} s per step)")
    return {"speedup": speedup, "changes": {k: list(v) for k, v in config_changes(pick, baseline).items()},
            "walls": walls, "why": why, "baseline_fits": baseline.fits,
            "baseline_tokens_per_s_per_gpu": tb["tokens_per_s_per_gpu"],
            "pick_tokens_per_s_per_gpu": tp["tokens_per_s_per_gpu"]}
