"""How far a re-split beats the bound the search ranks candidates by (planner/resplit.py REACH_SLACK): every
candidate a plan's knob sets keep is re-split (no reach cut-off, no cap on the layouts), and the smallest ratio of
the re-split's step to the candidate's re-split bound is printed. Below 1 the re-split beat its bound; the search
keeps a candidate in reach while that stays above 1 / (1 + REACH_SLACK).

    python bench/resplit_bound.py [MODEL GPU GPUS SEQ GBS [ROUTING]]
"""

import sys

import moetune.planner.resplit as resplit
import moetune.planner.search as search
from moetune.layout.validate import Workload
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model

PLANS = (  # model, GPU, GPUs, sequence, global batch, routing: EP-overlap picks on racks and 8-GPU nodes, hybrids
    ("qwen3-next-80b-a3b", "h100", 128, 4096, 1024, "force-balance"), ("llama4-scout", "b300", 40, 8192, 160),
    ("glm-4.5", "b300", 96, 4096, 768), ("deepseek-v3", "h100", 1024, 4096, 8192),
    ("kimi-k2", "gb200", 256, 4096, 2048), ("qwen3-235b-a22b", "gb200", 128, 4096, 1024),
    ("gpt-oss-120b", "b200", 64, 4096, 512), ("minimax-m2", "gb200", 144, 8192, 576),
    ("ernie-4.5-300b-a47b", "h100", 96, 4096, 768), ("kimi-k2", "gb200", 1024, 131072, 512),
    ("glm-4.5", "gb200", 136, 4096, 1088),
)


def smallest_ratio(model: str, gpu: str, gpus: int, seq: int, gbs: int, routing: str = "dropless") -> tuple:
    """(the smallest re-split step / re-split bound over every kept candidate, that candidate's layout)."""
    ratios: list = []
    entry, slack, limit = resplit._resplit_entry, resplit.REACH_SLACK, resplit.RESPLIT_LIMIT

    def weighed(s, i, found, overrides):
        bound, lay = s.best[i][5], s.best[i][2]
        step = entry(s, i, found, overrides)
        ratios.append((step / bound, lay.describe()))
        return step

    resplit._resplit_entry, resplit.REACH_SLACK, resplit.RESPLIT_LIMIT = weighed, 1.0, 10**6
    try:
        search.plan(load_model(model), load_gpu(gpu), gpus, Workload(seq_length=seq, global_batch_size=gbs), top=5,
                    routing=routing)
    finally:
        resplit._resplit_entry, resplit.REACH_SLACK, resplit.RESPLIT_LIMIT = entry, slack, limit
    return min(ratios, default=(1.0, None))


def main(plans) -> None:
    print(f"REACH_SLACK {resplit.REACH_SLACK}: a candidate stays in reach above a ratio of "
          f"{1 / (1 + resplit.REACH_SLACK):.4f}")
    for plan in plans:
        ratio, layout = smallest_ratio(*plan)
        print(f"{plan[0]} on {plan[2]} {plan[1]}, seq {plan[3]}, GBS {plan[4]}: smallest re-split / bound "
              f"{ratio:.4f} ({layout})")


if __name__ == "__main__":
    args = sys.argv[1:]
    main([(args[0], args[1], *map(int, args[2:5]), *args[5:6])] if args else PLANS)
