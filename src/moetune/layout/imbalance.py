"""The dropless routing factor: how much more than the mean the busiest expert rank is charged, by EP size
(Knobs.imbalance_at reads it)."""

import math

import numpy as np

# Dropless routing leaves the busiest expert rank with more tokens than the mean, and every MoE layer waits for it
# (the EP all-to-all synchronises the ranks), so the routed experts' GEMMs and all-to-all take `imbalance` times their
# balanced time. Published A/B pairs measure the throughput of force-balanced routing over dropless: Qwen3-235B-A22B on
# 256 H100, BF16, EP8 (yanring/Megatron-MoE-ModelZoo @e8650517 best_practice/qwen3, R151-R158) 295/237, 335/277,
# 368/320 and 389/357 TFLOP/s at 16k-128k, a constant ~86 ms per micro-batch of 16k tokens a rank; the MCore release
# tracker 200/150 (Qwen3-30B-A3B) and 295/248 (DeepSeek-V3) (shared/data/megatron_flops_memory_notes.md item 1).
# Those are ratios of whole steps, not the busiest rank's load: only the experts and their all-to-all scale. 1.47
# is the factor under which moetune reproduces the four ModelZoo ratios (1.245, 1.209, 1.150, 1.090) within 1.3%
# (tests/planner/test_published_runs.py); the 1.2 it replaced read the step ratio as the load ratio and predicted
# 1.04-1.10.
# Overridable with --token-imbalance; it sizes the routed experts' activation memory too.
DROPLESS_IMBALANCE = 1.47
# The EP size of those pairs. The busiest of EP ranks exceeds the mean as the largest of EP draws does: by nothing at
# EP 1 and growing with EP, so below this size the default is scaled by the expected maximum of EP standard normals
# over that of 8 (EP2 1.19x, EP4 1.34x), where a flat factor made EP 1 with expert TP free against EP 2 at the full
# 1.47x. Above it the factor stays flat: the one dropless run at a larger EP (Qwen3-30B-A3B at EP16, R101) is predicted
# within 1% at 1.47x, so the data show no further growth.
DROPLESS_IMBALANCE_EP = 8


_GRID = np.linspace(-10.0, 10.0, 4001)
_CDF = 0.5 * (1.0 + np.vectorize(math.erf)(_GRID / math.sqrt(2.0)))


def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normals] (0 for n = 1): the integral of x against the maximum's distribution,
    Phi(x)^n, on a fine grid (1.0294 at n 4, 1.4236 at n 8; order statistics of the normal)."""
    return float((0.5 * (_GRID[1:] + _GRID[:-1]) * np.diff(_CDF ** n)).sum())


# expected_max_normal(EP) / expected_max_normal(DROPLESS_IMBALANCE_EP), EP 0..DROPLESS_IMBALANCE_EP (imbalance_at)
_EP_SHARE = np.array([0.0] + [expected_max_normal(n) / expected_max_normal(DROPLESS_IMBALANCE_EP)
                              for n in range(1, DROPLESS_IMBALANCE_EP + 1)])


def busiest_share(ep):
    """The share of the full default factor charged at this EP size (an array or a number; 1 from
    DROPLESS_IMBALANCE_EP): the busiest of EP ranks by table lookup, as a search asks it of every candidate."""
    if type(ep) is int:  # one layout's (estimate): a float, without np.clip's cost on a number
        return float(_EP_SHARE[max(1, min(ep, DROPLESS_IMBALANCE_EP))])
    return _EP_SHARE[np.clip(ep, 1, DROPLESS_IMBALANCE_EP)]
