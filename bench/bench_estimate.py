"""Time `estimate` for DeepSeek-V3 on 1,024 H100s (the issue's benchmark). Prints seconds per call."""

import time

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model


def main(repeats: int = 200) -> None:
    model, gpu = load_model("deepseek-v3"), load_gpu("h100")
    layout = Layout(world_size=1024, tp=2, pp=8, vpp=4, ep=64, pipeline_layout="Et*3|(tt|)*29m|L")
    workload = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=8192)
    knobs = Knobs(precision="fp8-blockwise", recompute="selective", recompute_modules=frozenset({"mla_up_proj", "mlp"}))
    estimate(model, gpu, layout, workload, knobs)  # warm caches (config parsing)
    start = time.perf_counter()
    for _ in range(repeats):
        result = estimate(model, gpu, layout, workload, knobs)
    per_call = (time.perf_counter() - start) / repeats
    print(f"estimate deepseek-v3 on 1024 x h100 ({layout.describe()}): {per_call * 1e3:.2f} ms per call "
          f"over {repeats} calls; peak {result.peak_bytes / 2**30:.2f} GiB, fits={result.fits}")


if __name__ == "__main__":
    main()
