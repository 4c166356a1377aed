"""The terms of an iteration outside the pipeline: the data-parallel gradient and parameter traffic, the optimizer
step on the GPU (Adam's memory-bound update; Muon's, plus its Newton-Schulz GEMMs) and the optimizer's CPU-offloaded
share. step.step_time and batch.batch_step_seconds take them for the largest stage."""

from moetune.layout.knobs import Knobs
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import ModelSpec
from moetune.walls.comms import ring_seconds
from moetune.walls.compute import gemm_rate
from moetune.walls.memory import MUON_BYTES
from moetune.walls.muon import ns_seconds


def iteration_terms(spec: ModelSpec, dense, expert, vocab, lay, knobs: Knobs, gpu: GpuSpec, eff: dict) -> tuple:
    """Per-iteration seconds outside the pipeline, for the largest stage's `dense` and `expert` parameters, `vocab` of
    them the embedding's and output layer's (scalars, or arrays with `lay` fields of the same shape):
    - raw DP traffic, (gradient reduce-scatter, BF16 parameter all-gather), over DP x CP (dense) and EDP (experts);
      without the distributed optimizer, (gradient all-reduce, nothing); under Muon's layer-wise distributed optimizer
      (dist_muon: DDP's own distributed optimizer off, so DDP all-reduces the gradients, and each rank then
      all-gathers the parameters the others stepped: Megatron-Core optimizer/layer_wise_optimizer.py), (gradient
      all-reduce, BF16 parameter all-gather), the gather never overlapped (Knobs.overlap_param_gather off);
    - the optimizer step, memory-bound over this rank's shard (master weights and moments read and written,
      grads and weights read; Muon keeps one momentum on the linear weights, the embedding and output layer stay on
      Adam), plus Muon's Newton-Schulz GEMMs (walls/muon.py);
    - optimizer CPU offload: the offloaded share through the host (HybridDeviceOptimizer; measured 1.9x-4.2x
      step time on Qwen3-30B-A3B, megatron_flops_memory_notes.md item 6)."""
    grad = 4 if knobs.main_grads_fp32 else 2
    muon = knobs.optimizer == "muon"
    def ring(nbytes):
        return (ring_seconds(dense * nbytes, lay.dp * lay.cp, lay.tp, gpu, eff)
                + ring_seconds(expert * nbytes, lay.edp, lay.etp * lay.ep, gpu, eff))

    if knobs.distributed_optimizer:  # reduce-scatter (all-reduce under Muon) and the BF16 parameter all-gather
        dp = (ring(grad) * (2 if muon else 1), ring(2))
    else:  # gradient all-reduce (a reduce-scatter and an all-gather of the grads); every rank steps all its weights
        dp = (2 * ring(grad), 0 * ring(2))  # (Megatron-Core distributed/param_and_grad_buffer.py: all_reduce)
    share = (lay.dp * lay.cp, lay.edp) if knobs.distributed_optimizer else (1, 1)
    shard, vocab_shard = dense / share[0] + expert / share[1], vocab / share[0]

    def state(moments):  # bytes a parameter's update moves
        return 2 * (4 + moments) + 4 + 2
    adam = state(2 * knobs.adam_moments_bytes)
    moved = (shard - vocab_shard) * state(MUON_BYTES - 4) + vocab_shard * adam if muon else shard * adam
    f = knobs.optimizer_offload_fraction
    optimizer = moved * (1 - f) / (gpu.hbm_tbps * 1e12 * eff["mem_eff"])
    if muon:
        optimizer = optimizer + ns_seconds(spec, dense, expert, vocab, lay, knobs.distributed_optimizer,
                                           gemm_rate(gpu, "bf16", eff))
    offload = moved * f / (eff["cpu_optimizer_gbps"] * 1e9)
    return dp, optimizer, offload
