"""Muon's Newton-Schulz step: the GPU work Megatron's emerging optimizer adds to each iteration, on top of the
memory-bound update Adam also pays (iteration.iteration_terms).

Muon orthogonalizes each linear weight's momentum with ``muon_num_ns_steps`` quintic Newton-Schulz iterations
(Megatron-Core optimizer/emerging_optimizers.py, newton_schulz_tp; optimizer_config.py muon_num_ns_steps = 5, as
Megatron Bridge's distributed_muon_with_cosine_annealing). One iteration on an ``a x b`` matrix (``a`` the smaller
side) is ``A = X Xᵀ`` (2a²b FLOPs), the polynomial's ``A @ A`` (2a³) and its product with ``X`` (2a²b). Which
matrices and how large:
- every linear weight of a layer (flops.gemm_shapes), routed experts one matrix each (TE GroupedLinear keeps a weight
  per expert), a gated fc1 whole; the fused QKV split into its q, k and v (muon_split_qkv, on by default); the
  router's too; the embedding, output layer and the parameters not built 2-D stay on Adam (muon_scalar_optimizer;
  walls/model_state.py);
- Bridge's Muon recipes orthogonalize each TP shard on its own (muon_tp_mode "blockwise", the default of
  recipes/utils/optimizer_utils.py distributed_muon_with_cosine_annealing; Megatron-Core's own is "duplicated"), so
  TP shrinks the matrix a rank works on;
- the layer-wise distributed optimizer (dist_muon) gives each data-parallel rank whole parameters to step, so the
  work splits over DP x CP (dense) and EDP (experts), as the optimizer state does (model_state.optimizer_shard).
Charged at the BF16 GEMM rate: the momentum is FP32, but muon_fp32_matmul_prec "medium" lets PyTorch run FP32
matmuls in bfloat16 (torch.set_float32_matmul_precision).
"""

from collections import Counter

import numpy as np

from moetune.specs.model import ModelSpec
from moetune.walls.flops import all_layers, gemm_shapes, qkv_gathered, tp_shard, tp_size

NS_STEPS = 5  # muon_num_ns_steps


def _ns_flops(rows, cols):
    """One quintic Newton-Schulz iteration on a rows x cols matrix (arrays broadcast)."""
    a, b = np.minimum(rows, cols), np.maximum(rows, cols)
    return 4 * a * a * b + 2 * a ** 3


BOTH = (False, True)  # the readings of the fused QKV a matrix is stepped in: split (False) and whole (True)


def _matrices(spec: ModelSpec, kind) -> dict[str, list[tuple[int, int, str, tuple[bool, ...]]]]:
    """A layer's Muon matrices by class, each with the readings of the fused QKV it counts in (whole_qkv): a GQA
    layer's QKV whole (True) or split into q, k and v (False, muon_split_qkv); every other matrix in both."""
    shapes = {cls: [(k, n, split, BOTH) for k, n, split in mats] for cls, mats in gemm_shapes(spec, kind).items()}
    if kind.mixer == "gqa":
        (h, qkv, split, _), out = shapes["attn_proj"]
        q, kv = spec.qkv_widths[0], spec.qkv_widths[1] // 2  # the fused output's q and each of k and v
        q_k_v = [(h, q, split, (False,)), (h, kv, split, (False,)), (h, kv, split, (False,))]
        shapes["attn_proj"] = [(h, qkv, split, (True,)), *q_k_v, out]
    if kind.mlp == "moe":
        shapes["router"] = [(spec.hidden_size, spec.num_moe_experts, "-", BOTH)]
    return shapes


def _per_param(spec: ModelSpec, tp, etp) -> dict[bool, tuple]:
    """Per reading of the QKV (whole_qkv: False, True), (dense, expert) Newton-Schulz FLOPs per parameter, from one
    pass over the model's matrices; each reading sums its own matrices in the model's order."""
    keys = [(whole, expert) for whole in BOTH for expert in BOTH]
    flops, numel = dict.fromkeys(keys, 0.0), dict.fromkeys(keys, 0.0)
    for kind, count in Counter(all_layers(spec)).items():  # each distinct layer kind once, times its layers
        for cls, shapes in _matrices(spec, kind).items():
            expert = cls == "routed_experts"
            for k, n, split, readings in shapes:
                rows, cols = tp_shard(k, n, split, tp_size(cls, tp, etp))
                work, size = count * _ns_flops(rows, cols), count * rows * cols
                for whole in readings:
                    flops[whole, expert] = flops[whole, expert] + work
                    numel[whole, expert] = numel[whole, expert] + size
    return {whole: tuple(NS_STEPS * flops[whole, e] / numel[whole, e] if np.any(numel[whole, e]) else 0.0 * tp
                         for e in BOTH) for whole in BOTH}


def ns_flops_per_param(spec: ModelSpec, tp, etp) -> tuple:
    """(dense, expert) Newton-Schulz FLOPs per parameter a rank steps, over all its iterations, averaged over the
    model's layers (a stage's mix of layer kinds is the model's, near enough); `tp`, `etp` may be arrays. Past the KV
    groups a rank's QKV shard holds less than one group, which Megatron-Core's split skips (optimizer/__init__.py: the
    shard's rows are no multiple of a group's q, k, v): the shard is one matrix there."""
    per = _per_param(spec, tp, etp)
    past = qkv_gathered(spec, tp)
    if not np.any(past):
        return per[False]
    return tuple(np.where(past, w, s) for w, s in zip(per[True], per[False]))


def ns_seconds(spec: ModelSpec, linear, experts, tp, etp, gemm_rate: float):
    """Seconds of Newton-Schulz work on one rank a step: the dense linear weights and routed-expert weights it steps
    (its optimizer shard, the vocabulary and non-2-D parameters on Adam left out: iteration.iteration_terms)."""
    per_dense, per_expert = ns_flops_per_param(spec, tp, etp)
    return (per_dense * linear + per_expert * experts) / gemm_rate
