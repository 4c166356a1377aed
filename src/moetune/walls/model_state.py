"""Model states on one rank: the weights (BF16, and TE's quantized copies of the GEMM weights under an FP8/FP4
recipe), the gradients and the optimizer state, and how they shard. Megatron DDP + distributed optimizer
(megatron/core/distributed/ and megatron/core/optimizer/distrib_optimizer.py): BF16 weights, a full-size gradient
buffer (FP32 by default), and Adam states (FP32 master copy + two moments) sharded over DP x CP for dense parameters
and over EDP for expert parameters: the ``6 + 12/DP`` bytes/param of Megatron-LM's theoretical_memory_usage.py, with
the expert shard of Bridge's theoretical_memory_utils.py. Under torch FSDP2 all of it shards over DP x CP
(fsdp2_sharded_items). memory.memory_wall adds them to each stage's activations and overheads; iteration.py prices
the optimizer step from the same bytes.
"""

from types import SimpleNamespace

import numpy as np

from moetune.layout.dp_sharding import gathered_elements, pending_grad_elements
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.walls.activations import whole
from moetune.walls.rank_params import StageParams, quantized_split

# TE keeps FP8 copies of GEMM weights: row-wise and column-wise (transposed) data, plus block scales. Blockwise
# weights take one FP32 scale per 128x128 block each way (TE recipe Float8BlockScaling w_block_scaling_dim=2, which
# Megatron-Core fp8_utils.get_fp8_recipe leaves at its default; float8_blockwise_tensor.py get_scale_shape), not per
# 1x128 as activations do.
FP8_CACHE_BYTES = {"fp8-blockwise": 2 + 2 * 4 / 128**2, "fp8-delayed": 2.0, "fp8-current": 2.0,
                   "mxfp8": 2 + 2 / 32, "nvfp4": 1 + 2 / 16}
# Without FP8 parameters a GEMM weight is BF16 (the DDP parameter buffer) and TE quantizes it on the step's first
# micro-batch into a workspace it keeps for the rest (module/base.py get_weight_workspace, cached while Megatron passes
# is_first_microbatch): both copies stay. With them (Knobs.fp8_params) the weight *is* the FP8 tensor, quantized at
# init under fp8_model_init with row- and column-wise usage (TE module/base.py reset_parameters), and no BF16 copy
# exists (Bridge docs/performance-guide.md: "FP8 parameters lower memory usage"): Megatron-Core's DDP puts a
# Float8Tensor's or Float8BlockwiseQTensor's row-wise bytes in a uint8 parameter buffer (distributed_data_parallel.py
# param_dtype = torch.uint8; TE tensor/utils.py replace_raw_data) and TE keeps the transpose or column-wise copy beside
# it (re-made after each gather: post_all_gather_processing), the same FP8_CACHE_BYTES; an MXFP8Tensor holds its own
# row- and column-wise data and Bridge's preset gathers it through the gradient buffer
# (reuse_grad_buf_for_mxfp8_param_ag: param_and_grad_buffer.py shared_buffer), so no parameter buffer is added. The
# distributed optimizer's FP32 master shard is taken from the BF16 init values TE keeps on the host and dropped
# (distrib_optimizer.py get_high_precision_init_val). Megatron-Core core_v0.16.0-core_v0.19.0, TE v2.12.
# Tensor-scaled FP8 (delayed and current scaling) keeps no transpose where the GPU runs FP8 GEMMs in any layout: TE's
# Float8Quantizer and Float8CurrentScalingQuantizer allocate `_transpose` only for column-wise usage while
# nvte_is_non_tn_fp8_gemm_supported() is false (pytorch/csrc/quantizer.cpp create_tensor, convert_and_update_tensor),
# and it is true from compute capability 10.0 up to 12.0 and from 13.0 (common/transformer_engine.cpp; pytorch/utils.py
# is_non_tn_fp8_gemm_supported), where the GEMMs read the row-wise `_data` both ways (Float8TensorStorage.update_usage
# drops a transpose there, post_all_gather_processing makes none): 1 byte a weight on the Blackwell parts moetune
# knows (B200, B300, GB200, GB300: sm100/sm103; a consumer sm120 part would keep the transpose), for FP8 parameters
# and for the workspace TE caches beside a BF16 weight alike (module/base.py _is_weight_workspace_valid). Blockwise,
# MXFP8 and NVFP4 keep both copies on every GPU (Float8BlockQuantizer, MXFP8Quantizer, NVFP4Quantizer create_tensor).
# Since TE v2.3.
TRANSPOSE_FREE_FP8 = {"fp8-delayed": 1.0, "fp8-current": 1.0}
NON_TN_FP8_ARCHS = ("blackwell",)


def quantized_weight_bytes(precision: str, arch: str) -> float:
    """Bytes TE holds for one GEMM weight element under an FP8/FP4 recipe on a GPU of this architecture."""
    if arch in NON_TN_FP8_ARCHS and precision in TRANSPOSE_FREE_FP8:
        return TRANSPOSE_FREE_FP8[precision]
    return FP8_CACHE_BYTES[precision]


# Muon's state a parameter: the FP32 master copy and one FP32 momentum buffer (emerging_optimizers Muon keeps
# momentum_buffer alone, against Adam's exp_avg and exp_avg_sq). Megatron steps a parameter with Muon when it is 2-D
# and not tagged is_embedding_or_output_parameter, and with Adam otherwise (optimizer/muon.py:252-258 @core_v0.16.1,
# :296-302 @core_v0.17.0; emerging_optimizers.py:128-130 _is_nonlinear_or_embedding and layer_wise_optimizer.py:46-49
# @core_v0.18.0, the same at core_v0.19.0). On Adam, then: the embedding and output layer (vocab), and every tensor
# Megatron-Core builds other than 2-D (StageParams.nonmatrix and expert_nonmatrix: norms, linear and expert biases,
# attention sinks, conv1d weights, Mamba's and the gated delta-net's A_log, D, dt_bias). Routed-expert weights are
# 2-D however they are built (TEGroupedLinear's weight<i> and bias<i> per local expert, extensions/
# transformer_engine.py:1754 @core_v0.16.1; SequentialMLP's per-expert linears; the legacy GroupedMLP's one
# [hidden, local experts x ffn] weight1, moe/experts.py:144-150): Muon, their biases Adam. The router's weight and a
# shared expert's [1, hidden] gate (moe/shared_experts.py:57) are 2-D: Muon. The MTP stage's copy of
# the embedding is tagged from core_v0.18.0 (language_module.py:210; only the pre_process one before, so 0.16 and
# 0.17 step it with Muon): on Adam here. Megatron-LM after core_v0.19.0 also marks Mamba's in_proj use_muon=False
# (ssm/mamba_mixer.py), in no release moetune reads: Muon here. The layer-wise distributed optimizer (dist_muon) owns
# whole parameters per DP rank: sharded like the distributed optimizer here, even where layers do not split evenly.
MUON_MOMENT_BYTES = 4
MASTER_BYTES = 4  # the FP32 master copy of a BF16 parameter, under either optimizer
FP32_GRAD_BYTES = 4  # the FP32 main gradient the optimizer steps on
WEIGHT_BYTES = 2  # the BF16 model weight


def optimizer_state_bytes(knobs: Knobs) -> tuple[int, int]:
    """Bytes of optimizer state a parameter *holds*, (2-D weights, the rest): the FP32 master copy plus Adam's exp_avg
    and exp_avg_sq (FP32, or BF16 under --bf16-moments), or plus Muon's one momentum on the 2-D weights, the vocabulary
    and the non-2-D parameters staying on Adam. What an update reads and writes each step is derived from it
    (iteration.iteration_terms); the gradient and the BF16 weight are separate line items."""
    adam = MASTER_BYTES + 2 * knobs.adam_moments_bytes
    return (MASTER_BYTES + MUON_MOMENT_BYTES if knobs.optimizer == "muon" else adam), adam


def weight_items(p: StageParams, knobs: Knobs, arch: str) -> dict[str, int]:
    """The weights of a rank: BF16, plus under an FP8/FP4 recipe TE's cached quantized copies of the GEMM weights
    (StageParams.quantized: the weights of TE's Linear, LayerNormLinear and GroupedLinear modules; not the embedding,
    output layer, router, shared-expert gate, norms or biases: params.Tensor.quantized), or with FP8 or NVFP4
    parameters those weights in place of their BF16 ones, the rest staying BF16; `arch` is the GPU's
    (quantized_weight_bytes)."""
    params = p.dense + p.expert
    if not knobs.fp8:
        return {"weights": WEIGHT_BYTES * params}
    fp8 = whole(quantized_weight_bytes(knobs.precision, arch) * p.quantized)
    if knobs.quantized_params:
        return {"weights": WEIGHT_BYTES * (params - p.quantized), "fp8_weights": fp8}
    return {"weights": WEIGHT_BYTES * params, "fp8_weight_cache": fp8}


def model_state_bytes(p: StageParams, layout: Layout, knobs: Knobs, arch: str, *, largest_unit=None,
                      shard=None) -> dict[str, int]:
    """Weights, gradients and optimizer state of one rank of stage `p`. `largest_unit`: parameters on one rank of the
    stage's largest Megatron FSDP unit (rank_params.largest_fsdp_unit), read only under Megatron FSDP. `shard`:
    optimizer_shard, where the caller has it (the planner's batch keeps it across precisions)."""
    params = p.dense + p.expert
    items = {**weight_items(p, knobs, arch), "main_grads": grad_bytes(knobs) * params}
    if knobs.torch_fsdp2:
        items.update(fsdp2_sharded_items(items, params, layout, knobs))
    if knobs.fsdp_strategy:
        items.update(megatron_fsdp_items(p, layout, knobs, arch, largest_unit))
    linear, adam = optimizer_state_bytes(knobs)
    shard = optimizer_shard(p, layout, knobs) if shard is None else shard
    if knobs.optimizer == "muon":  # the embedding, output layer and non-2-D parameters stay on Adam
        scalar = muon_adam_shard(p, layout, knobs)
        items["optimizer_states"] = whole(linear * (shard - scalar) + adam * scalar)
    else:
        items["optimizer_states"] = whole(adam * shard * (1 - knobs.optimizer_offload_fraction))
    return items


def fsdp2_sharded_items(items: dict[str, int], params, layout, knobs: Knobs) -> dict[str, int]:
    """The BF16 weights and the gradients of a rank under torch FSDP2. Megatron-Core's TorchFullyShardedDataParallel
    calls fully_shard on every TransformerLayer, the embedding and the output layer over the DP x CP group
    (distributed/torch_fully_sharded_data_parallel.py: get_data_parallel_group(with_context_parallel=True), unchanged
    core_v0.16.0-core_v0.18.2), experts included (Megatron-LM refuses EP > 1 under it), so each rank keeps 1/(DP x CP)
    of each weight between uses. There is no DDP gradient buffer: the sharded BF16 .grad is copied to an FP32 .grad
    of the FP32 master shard at the step, each BF16 one freed as it is copied (optimizer/optimizer.py
    Float16OptimizerWithFloat16Params._copy_model_grads_to_main_grads), so the gradient line is the FP32 shard.
    TE's cached FP8 copies of the gathered weights are left whole. Without resharding after the forward
    (--torch-fsdp2-no-reshard-after-forward) every wrapped module keeps its gathered weights from its forward to its
    backward, so from the last layer's forward the rank holds all of them, whole, beside its shards
    (fsdp2_gathered_weights)."""
    shards = layout.dp * layout.cp
    out = {"weights": -(-items["weights"] // shards), "main_grads": FP32_GRAD_BYTES * -(-params // shards)}
    return out if knobs.fsdp2_reshard_after_forward else {**out, "fsdp2_gathered_weights": items["weights"]}


def grad_bytes(knobs: Knobs) -> int:
    """Bytes of a main gradient: FP32 (grad_reduce_in_fp32), else BF16."""
    return FP32_GRAD_BYTES if knobs.main_grads_fp32 else WEIGHT_BYTES


def megatron_fsdp_items(p: StageParams, layout, knobs: Knobs, arch: str, largest_unit) -> dict[str, int]:
    """The weights and gradients of a rank under Megatron FSDP (layout/dp_sharding.py), where its strategy shards
    them: over DP x CP for dense parameters and EDP for experts (one copy's share of them under its hybrid
    sharding, where the optimizer state may shard over all: optimizer_divisors), TE's cached FP8 copies of the
    gathered weights left whole. Sharded weights add those gathered at once (fsdp_gathered_weights): the decoder
    layers computing and prefetched (dp_sharding.gathered_elements), at the bytes a weight is stored in, and the
    embedding and output layer, which are no FSDP unit (mcore_fsdp_adapter.py: TransformerLayer alone), so nothing
    releases them after their gather (megatron_fsdp.py release_module_parameters runs on units); sharded gradients add
    the unsharded ones waiting for their reduce-scatter (fsdp_pending_grads: dp_sharding.pending_grad_elements).
    `p` and `largest_unit` (the stage's largest unit on one rank, which sizes those transients) may hold arrays (the
    planner's batches): the shares are namespaces of the fields weight_items reads."""
    if largest_unit is None:
        raise ValueError("Megatron FSDP's transients need the stage's largest unit (rank_params.largest_fsdp_unit)")
    strategy, out = knobs.fsdp_strategy, {}
    dense, expert = inner_divisors(layout, knobs)
    dense_quantized, expert_quantized = quantized_split(p)
    kept = SimpleNamespace(dense=-(-p.dense // dense), expert=-(-p.expert // expert), vocab=-(-p.vocab // dense),
                           quantized=-(-dense_quantized // dense) + -(-expert_quantized // expert))
    layers = p.dense + p.expert - p.vocab  # the FSDP units' elements (decoder and MTP layers)
    mean = layers / np.maximum(p.fsdp_units, 1) if strategy.weights else 0  # units exist under optim_grads_params
    pools = (knobs.suggested_communication_unit_size, knobs.fsdp_double_buffer and bool(strategy.weights))
    if strategy.weights:
        out.update(_stored_weights(kept, knobs, arch))
        gathered = gathered_elements(largest_unit, mean, layers, *pools)
        out["fsdp_gathered_weights"] = whole(WEIGHT_BYTES * p.vocab + _unit_bytes(p, layers, knobs, arch) * gathered)
    if strategy.grads:
        out["main_grads"] = grad_bytes(knobs) * (kept.dense + kept.expert)
        pending = pending_grad_elements(largest_unit, mean, layers, *pools)
        out["fsdp_pending_grads"] = whole(grad_bytes(knobs) * pending)
    return out


def _unit_bytes(p, layers, knobs: Knobs, arch: str):
    """Bytes an element of the stage's FSDP units is gathered in: BF16, or under quantized parameters the quantized
    bytes for the share of its elements TE quantizes (StageParams.quantized; the norms, biases and router stay BF16),
    the stage's share standing for the units'."""
    if not knobs.quantized_params:
        return WEIGHT_BYTES
    share = p.quantized / np.maximum(layers, 1)
    return quantized_weight_bytes(knobs.precision, arch) * share + WEIGHT_BYTES * (1 - share)


def _stored_weights(p, knobs: Knobs, arch: str) -> dict:
    """weight_items without TE's cached FP8 copy of a BF16 weight: the bytes the weights are stored and gathered in."""
    return {name: n for name, n in weight_items(p, knobs, arch).items() if name != "fp8_weight_cache"}


def muon_adam_shard(p: StageParams, layout: Layout, knobs: Knobs):
    """Parameters of this rank's optimizer shard that Muon leaves to Adam: the embedding and output layer and the
    non-2-D parameters (the comment above MUON_MOMENT_BYTES)."""
    dense, expert = optimizer_divisors(layout, knobs)
    return -(-(p.vocab + p.nonmatrix) // dense) + -(-p.expert_nonmatrix // expert)


def optimizer_shard(p: StageParams, layout: Layout, knobs: Knobs):
    """Parameters of this rank's optimizer shard (optimizer_divisors)."""
    dense, expert = optimizer_divisors(layout, knobs)
    return -(-p.dense // dense) + -(-p.expert // expert)


def optimizer_divisors(layout, knobs: Knobs) -> tuple:
    """(dense, expert) ranks the optimizer step and its state are shared over: the distributed optimizer (or Muon's
    layer-wise one) shards dense state over DP x CP and expert state over EDP; without it every rank holds all of it.
    `layout` may hold arrays (the planner's batches). Under torch FSDP2 the plain optimizer steps the FP32 master
    copies of the rank's DP x CP shards (fsdp2_sharded_items), experts' too: Megatron-LM refuses the distributed
    optimizer there (training/arguments.py:612-613 @core_v0.16.0)."""
    if knobs.torch_fsdp2:
        return layout.dp * layout.cp, layout.dp * layout.cp
    if not knobs.sharded_optimizer:
        return 1, 1
    if knobs.outer_dp_sharding_strategy == "optim":  # Megatron FSDP's copies shard it too (dp_sharding.py)
        return layout.dp * layout.cp, layout.edp
    return inner_divisors(layout, knobs)


def inner_divisors(layout, knobs: Knobs) -> tuple:
    """(dense, expert) ranks one copy of the distributed optimizer (num_distributed_optimizer_instances) spans: Megatron
    FSDP shards the weights and gradients over them, each copy holding its own (layout/dp_sharding.py)."""
    copies = knobs.num_distributed_optimizer_instances  # each copy shards over its share of the ranks
    return layout.dp * layout.cp // copies, layout.edp // copies


def offloaded_host_bytes(p: StageParams, layout: Layout, knobs: Knobs):
    """Host bytes of the optimizer's CPU offload: for each offloaded parameter of this rank's optimizer shard, its FP32
    copy, the Adam moments and an FP32 gradient copy (Megatron-Core optimizer/cpu_offloading/hybrid_optimizer.py
    keeps all three on the host, the gradient in cpu_copy_map_grad)."""
    # Adam's state (Knobs refuses Muon's offload) and the FP32 gradient copy
    per_param = optimizer_state_bytes(knobs)[1] + FP32_GRAD_BYTES
    return whole(per_param * optimizer_shard(p, layout, knobs) * knobs.optimizer_offload_fraction)
