"""One search pass's candidates: the (layout, micro-batch) pairs it evaluates in numpy batches (walls/batch.py,
walls/batch_bytes.py), less those over capacity under the grid's lightest knobs (memory_bound). Each knob set's rows
are then timed by planner/search_grid.py, which keeps the fitting ones in the running state of
planner/search_state.py.
"""

from dataclasses import replace

import numpy as np

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload, interleaves
from moetune.planner.enumerate import MBS_CHOICES
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import ModelSpec
from moetune.walls.batch_bytes import batch_host_bytes, batch_memory, batch_state_bytes
from moetune.walls.batch_layouts import build_batch


def candidate_pairs(layouts: list[Layout], wl: Workload, fixed: dict) -> list[tuple[Layout, int]]:
    """The (layout, micro-batch size) pairs a pass searches: DP x MBS divides the global batch, into a micro-batch
    count the layout's interleaved schedule runs (layout/validate.py interleaves)."""
    mbs_choices = [fixed["mbs"]] if "mbs" in fixed else list(MBS_CHOICES)
    gbs = wl.global_batch_size
    sizes: dict[tuple, list[int]] = {}  # (DP, PP, VPP), all the test reads -> its sizes: ~6k layouts, a few dozen keys
    out = []
    for lay in layouts:
        if (key := (lay.dp, lay.pp, lay.vpp)) not in sizes:
            dp, pp, vpp = key
            sizes[key] = [m for m in mbs_choices if gbs % (m * dp) == 0 and interleaves(pp, vpp, gbs // (m * dp))]
        out.extend((lay, m) for m in sizes[key])
    return out

def memory_bound(spec: ModelSpec, gpu: GpuSpec, batch, wl: Workload, grid: list[Knobs], overheads: dict):
    """Drop candidates that cannot fit under any knob set of the grid: memory is smallest with full
    recompute, the largest offload, no dispatcher buffers or graph pools, and either precision; a candidate
    over capacity even then is over it for every knob set (it still counts as evaluated)."""
    # under the grid's routing and dropless factor: a measured factor below the default sizes the routed activations
    # smaller, and the default's would drop candidates that fit under it
    lightest = [Knobs(precision=p, recompute="full", routing=grid[0].routing, token_imbalance=grid[0].token_imbalance,
                      optimizer_offload_fraction=max(k.optimizer_offload_fraction for k in grid),
                      main_grads_fp32=grid[0].main_grads_fp32 if grid else True,
                      megatron_fsdp=grid[0].megatron_fsdp if grid else None)  # one pass shares its strategy
                for p in sorted({k.precision for k in grid})] if grid else []
    if not lightest:
        return None, (None, "", None, None)
    peak = np.min([batch_memory(spec, batch, wl.seq_length, wl.global_batch_size, k, overheads, arch=gpu.arch)
                   for k in lightest], axis=0)
    rows = np.nonzero(peak <= gpu.capacity_bytes)[0]
    i = int(np.argmin(peak))
    # the host share the lightest knobs' optimizer offload needs (plan's "nothing fits" names it when it is the limit),
    # of the one candidate named: asked of the whole batch it cost a ceil-division over every stage of every candidate
    host = float(batch_host_bytes(batch.subset(np.array([i])), lightest[0])[0]) / 2**30
    offload = ", optimizer offload" if lightest[0].optimizer_offload_fraction > 0 else ""
    if lightest[0].megatron_fsdp:
        offload += f", Megatron FSDP {lightest[0].megatron_fsdp}"
    # where nothing fits: the least model state any candidate holds, which no shorter sequence lowers (why_none)
    state = None if len(rows) else float(min(batch_state_bytes(spec, batch, k, gpu.arch).min() for k in lightest))
    least = (float(peak[i]) / 2**30, f"{batch.layout(i).short()}, MBS {int(batch.mbs[i, 0])}, full recompute{offload}",
             host, None if state is None else state / 2**30)
    return (batch.subset(rows) if len(rows) else None), least


def fitting_dp(spec: ModelSpec, gpu: GpuSpec, layouts: list[Layout], wl: Workload, grid: list[Knobs],
                overheads: dict) -> list[int]:
    """The DP sizes of `layouts` (those the global batch ruled out) with one that would fit at MBS 1 under the grid's
    lightest knobs: a larger GBS that allows the others would not make them run."""
    if not layouts or not grid:
        return []
    # weighed at a batch that gives every pipeline its full depth of micro-batches in flight, as the larger GBS that
    # would allow them does (their own GBS may not even give each DP rank one micro-batch)
    deep = replace(wl, global_batch_size=max(lay.dp * lay.pp * lay.vpp for lay in layouts))
    batch, _ = memory_bound(spec, gpu, build_batch(spec, [(lay, 1) for lay in layouts]), deep, grid, overheads)
    return [] if batch is None else sorted({int(d) for d in batch.fields.dp[:, 0]})
