"""Time a full `plan` of DeepSeek-V3 on 1,024 H100s at seq 4096, GBS 8192 (issue target: under 1 s).
Prints the search seconds and how many candidates were evaluated."""

import statistics
import time

from moetune.layout.validate import Workload
from moetune.planner.search import plan
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model


def main(repeats: int = 3) -> None:
    spec, gpu = load_model("deepseek-v3"), load_gpu("h100")
    wl = Workload(seq_length=4096, global_batch_size=8192)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = plan(spec, gpu, 1024, wl, top=5)
        times.append(time.perf_counter() - start)
    best = result.results[0]
    print(f"plan deepseek-v3 on 1024 x h100, seq 4096, GBS 8192: {result.candidates_evaluated:,} candidates "
          f"({result.layouts:,} layouts x micro-batch sizes x {result.knob_sets} knob sets), {result.feasible:,} fit; "
          f"{result.bounded_knob_sets} recompute knob sets weighed by their no-recompute twin's floor, the rest timed "
          "(planner/search_grid.py)")
    print(f"search_seconds: median {statistics.median(times):.3f} s, min {min(times):.3f} s over {repeats} runs; the "
          f"first, with this process's caches cold (as one `moetune plan` runs it), {times[0]:.3f} s")
    print(f"winner: {best.layout.describe()} mbs {best.workload.micro_batch_size} {best.knobs.precision} "
          f"{best.knobs.dispatcher} -> {best.time['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU")


if __name__ == "__main__":
    main()
