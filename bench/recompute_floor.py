"""How far a recompute set's step falls below its no-recompute twin's (planner/search_grid.py FLOOR_SLACK): for each
plan below, every recompute knob set and its twin (the same knobs, recompute none) are timed on the same candidates
(a sample of the plan's batch), and the largest ratio twin / recompute set is printed, of the step and of the re-split
bound the search ranks by. Above 1 the recompute set is faster than its twin there; the search's floor holds while
every ratio stays under 1 / (1 - FLOOR_SLACK).

    python bench/recompute_floor.py [MODEL GPU GPUS SEQ GBS]
"""

import sys

import numpy as np

import moetune.planner.search as search
from moetune.layout.validate import Workload
from moetune.planner.search_grid import FLOOR_SLACK, twins
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.batch import batch_step_seconds

PLANS = (  # model, GPU, GPUs, sequence, global batch: the bench's plan, long context, racks, hybrids, small models
    ("deepseek-v3", "h100", 1024, 4096, 8192), ("deepseek-v3", "h100", 256, 32768, 512),
    ("kimi-k2", "gb200", 256, 4096, 2048), ("qwen3-30b-a3b", "h100", 16, 4096, 256),
    ("qwen3-235b-a22b", "gb200", 128, 4096, 1024), ("gpt-oss-120b", "b200", 64, 4096, 512),
    ("llama4-scout", "b300", 40, 8192, 160), ("qwen3-next-80b-a3b", "h100", 128, 4096, 1024),
    ("glm-4.5", "b300", 96, 4096, 768), ("nemotron3-nano-30b-a3b", "b200", 64, 131072, 64),
    ("mixtral-8x22b", "h100", 128, 4096, 1024), ("dbrx", "h100", 64, 4096, 512),
    ("moonlight-16b-a3b", "h100", 32, 4096, 512), ("minimax-m2", "gb200", 144, 8192, 576),
    ("llama4-maverick", "h200", 256, 8192, 1024), ("deepseek-v2-lite", "a100", 16, 4096, 256),
    ("olmoe-1b-7b", "h100", 8, 4096, 256), ("ernie-4.5-300b-a47b", "h100", 96, 4096, 768),
)


def searched(model: str, gpu: str, gpus: int, seq: int, gbs: int) -> tuple:
    """The search state, batch and knob grid of that plan's first pass."""
    seen: dict = {}
    grid_of = search.search_grid

    def keep(s, batch, grid, bounded=True):
        seen.setdefault("pass", (s, batch, grid))
        grid_of(s, batch, grid, bounded)

    search.search_grid = keep
    try:
        search.plan(load_model(model), load_gpu(gpu), gpus, Workload(seq_length=seq, global_batch_size=gbs), top=5)
    finally:
        search.search_grid = grid_of
    return seen["pass"]


def largest_ratios(model: str, gpu: str, gpus: int, seq: int, gbs: int, sample: int = 3000) -> tuple[float, float]:
    """(step, re-split bound): the largest twin / recompute-set ratio over the knob sets and sampled candidates."""
    s, batch, grid = searched(model, gpu, gpus, seq, gbs)
    rows = np.sort(np.random.default_rng(0).choice(batch.size, min(batch.size, sample), replace=False))
    sub, step, reach = batch.subset(rows), 0.0, 0.0

    def walls(knobs) -> dict:
        w = batch_step_seconds(s.spec, sub, seq, gbs, knobs, s.gpu, s.eff)
        return {"step": w["step"], "reach": np.minimum(w["balanced"], w["step"])}

    for knobs, twin in twins(grid):
        rec, plain = walls(knobs), walls(twin)
        step = max(step, float(np.max(plain["step"] / rec["step"])))
        reach = max(reach, float(np.max(plain["reach"] / rec["reach"])))
    return step, reach


def main(plans) -> None:
    print(f"FLOOR_SLACK {FLOOR_SLACK}: the floor holds below a ratio of {1 / (1 - FLOOR_SLACK):.4f}")
    for plan in plans:
        step, reach = largest_ratios(*plan)
        print(f"{plan[0]} on {plan[2]} {plan[1]}, seq {plan[3]}, GBS {plan[4]}: largest twin/recompute ratio "
              f"step {step:.6f}, re-split bound {reach:.6f}")


if __name__ == "__main__":
    args = sys.argv[1:]
    main([(args[0], args[1], *map(int, args[2:5]))] if args else PLANS)
