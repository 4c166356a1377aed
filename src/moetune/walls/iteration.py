"""The terms of an iteration outside the pipeline: the data-parallel gradient and parameter traffic, the optimizer
step on the GPU (Adam's memory-bound update; Muon's, plus its Newton-Schulz GEMMs) and the optimizer's CPU-offloaded
share. step.step_time and batch.batch_step_seconds take them for the largest stage."""

from typing import NamedTuple

from moetune.layout.dp_sharding import outer_gather_passes
from moetune.layout.knobs import Knobs
from moetune.specs.hardware import GpuSpec
from moetune.specs.model import ModelSpec
from moetune.walls.comms import ring_seconds
from moetune.walls.compute import gemm_rate
from moetune.walls.model_state import (
    FP32_GRAD_BYTES,
    MASTER_BYTES,
    WEIGHT_BYTES,
    grad_bytes,
    optimizer_divisors,
    optimizer_state_bytes,
)
from moetune.walls.muon import ns_seconds
from moetune.walls.rank_params import quantized_split


class DpTraffic(NamedTuple):
    """A step's data-parallel collectives, seconds (iteration_terms): `rs` and `ag` as the knobs run them (once a
    step, or every micro-batch under an FSDP that shards them: dp_raw_seconds), and what Megatron FSDP runs once a
    step beside its per-micro-batch ones: `step_rs` in the last micro-batch's backward, `step_ag` in the first one's
    forward (overlap.dp_exposed_seconds)."""
    rs: object
    ag: object
    step_rs: object = 0.0
    step_ag: object = 0.0


class ParamBytes(NamedTuple):
    """Bytes a GEMM weight element TE quantizes moves under a recipe's quantized parameters (gathered_weight_bytes,
    step_weight_bytes)."""
    gather: float  # in the distributed optimizer's parameter all-gather
    write: float  # written by the optimizer step into its shard, in place of the BF16 copy of the FP32 master
    fresh_amax: bool  # the step's cast reads the FP32 master shard once more for a fresh amax


# What the step writes (Megatron-Core distrib_optimizer.py _copy_main_params_to_model_params): the FP8 row-wise bytes
# (fp8_utils.py quantize_param_shard -> TE tensor/utils.py cast_master_weights_to_fp8; the transpose or column-wise
# copy is made after the gather), packed E2M1 (quantize_nvfp4_param_shard), and for MXFP8 a BF16 copy staged in the
# gradient buffer that TE quantizes after the gather (reuse_grad_buf_for_mxfp8_param_ag: optimizer.py
# step_with_ready_grads -> _copy_main_params_to_param_buffer). A fresh amax, all-reduced over the DP group (TE
# tensor/utils.py: compute_amax in _cast_master_weights_to_fp8_current_scaling, fp8_block_scaling_compute_partial_amax
# in _cast_master_weights_to_fp8_blockwise_scaling, nvfp4_multi_tensor_compute_partial_amax in
# _cast_master_weights_to_nvfp4_2d); delayed scaling casts with the scale its amax history holds. NVFP4 gathers its
# packed E2M1 data plus the tile amax all-reduce (2 x 4 bytes a 16x16 tile).
# Only the weights TE quantizes take these bytes (rank_params.StageParams.quantized: params.Tensor.quantized); the
# router, a shared expert's gate, norms, biases, the embedding and output layer stay BF16 parameters, and Megatron-Core
# moves them at 2 bytes: DDP keys its buffers by storage dtype, uint8 only for a TE FP8/NVFP4 tensor
# (param_and_grad_buffer.py:857-858 group_params_for_buffers @core_v0.18.2), and all-gathers each buffer's own data
# (:466-482 start_param_sync); the step quantizes the FP8 ones alone (distrib_optimizer.py:2569-2617
# _get_fp8_params_and_shard_fp32_from_fp8 keeps is_float8tensor params, :2752 quantize_param_shard) and copies the
# FP32 master into every other one's BF16 buffer slot (:2783-2791 _copy_main_params_to_model_params). Megatron FSDP
# likewise gives a parameter group a uint8 buffer only if it is FP8 (fsdp/src/megatron_fsdp/param_and_grad_buffer.py
# :2214-2226 @core_v0.18.2).
QUANTIZED_PARAM_BYTES = {
    "fp8-delayed": ParamBytes(gather=1, write=1, fresh_amax=False),
    "fp8-current": ParamBytes(gather=1, write=1, fresh_amax=True),
    "fp8-blockwise": ParamBytes(gather=1, write=1, fresh_amax=True),
    "mxfp8": ParamBytes(gather=WEIGHT_BYTES, write=WEIGHT_BYTES, fresh_amax=False),
    "nvfp4": ParamBytes(gather=0.5 + 2 * 4 / 16**2, write=0.5, fresh_amax=True),
}


def gathered_weight_bytes(knobs: Knobs) -> float:
    """Bytes the distributed optimizer's parameter all-gather moves per GEMM weight (QUANTIZED_PARAM_BYTES): FP8
    parameters under a tensor-scaled or blockwise recipe sit in DDP's uint8 parameter buffer and gather as 1 byte
    (Megatron-Core distributed_data_parallel.py param_dtype torch.uint8 for FP8 params); MXFP8 parameters gather in BF16
    through the gradient buffer (reuse_grad_buf_for_mxfp8_param_ag: Transformer Engine cannot put an MXFP8 tensor's
    data in that buffer), as BF16 weights do. NVFP4 parameters gather their packed 4-bit row-wise data (DDP's uint8
    buffer of half the elements: param_and_grad_buffer.py nvfp4_packed_numel) after the step all-reduces one FP32 amax
    per 16x16 weight tile over the same group (TE tensor/utils.py _cast_master_weights_to_nvfp4_2d, which every rank
    turns into the E4M3 scales itself): an all-reduce moves twice a gather's bytes. The parameters TE does not quantize
    gather in BF16 (_gather_bytes)."""
    return QUANTIZED_PARAM_BYTES[knobs.precision].gather if knobs.quantized_params else WEIGHT_BYTES


def step_weight_bytes(knobs: Knobs) -> float:
    """Bytes the optimizer step moves into a GEMM weight TE quantizes beyond its state and gradient: the BF16 weight
    written, or with FP8/NVFP4 parameters the quantized shard and, for a fresh amax, the master read again
    (QUANTIZED_PARAM_BYTES); every other parameter's step writes its BF16 weight (iteration_terms)."""
    if not knobs.quantized_params:
        return WEIGHT_BYTES
    row = QUANTIZED_PARAM_BYTES[knobs.precision]
    return row.write + (MASTER_BYTES if row.fresh_amax else 0)


def fsdp2_traffic(params, quantized, lay, knobs: Knobs, gpu: GpuSpec, eff: dict) -> tuple:
    """(reduce-scatter, all-gather) seconds of one micro-batch under torch FSDP2, for a rank's `params` (`quantized` of
    them the weights TE quantizes: _gather_bytes). Megatron-Core's TorchFullyShardedDataParallel calls fully_shard per
    layer over the DP x CP group with reshard_after_forward True unless --torch-fsdp2-no-reshard-after-forward, and no
    mixed-precision policy (distributed/torch_fully_sharded_data_parallel.py; training/training.py:1288-1289
    @core_v0.16.0), and its no_sync is the base class's no-op (data_parallel_base.py): each micro-batch gathers every
    layer's weights in its forward and again in its backward (dp_raw_seconds counts the two; once where the weights
    stay gathered between them: Knobs.microbatch_gathers) and reduce-scatters the BF16 gradients (the parameters'
    dtype under Float16Module) in its backward. Megatron-LM refuses EP and PP under it, so every weight shards over
    the one group."""
    group = (lay.dp * lay.cp, lay.tp, gpu, eff)
    return (ring_seconds(params * WEIGHT_BYTES, *group),
            ring_seconds(_gather_bytes(params, quantized, gathered_weight_bytes(knobs)), *group))


def _gather_bytes(params, quantized, w):
    """Bytes a parameter all-gather moves: `w` for each of the `quantized` weights TE quantizes (gathered_weight_bytes),
    BF16 for the rest of `params` (QUANTIZED_PARAM_BYTES's note). Written as a correction to BF16, so that without
    quantized parameters (w = 2) the bytes are exactly the BF16 ones."""
    return params * WEIGHT_BYTES + quantized * (w - WEIGHT_BYTES)


def dp_raw_seconds(rs, ag, knobs: Knobs, microbatches, step_rs=0.0, step_ag=0.0):
    """A step's DP traffic from iteration_terms' DpTraffic: one reduce-scatter (all-reduce) and one all-gather, or
    under an FSDP that shards them, each micro-batch's reduce-scatter (Knobs.microbatch_reduce_scatters) and its
    forward's and backward's all-gathers (Knobs.microbatch_gathers; fsdp2_traffic, layout/dp_sharding.py), plus
    Megatron FSDP's once-a-step `step_rs` and `step_ag`."""
    rs_count = microbatches if knobs.microbatch_reduce_scatters else 1
    ag_count = microbatches * knobs.microbatch_gathers if knobs.microbatch_gathers else 1
    return rs * rs_count + ag * ag_count + step_rs + step_ag


def megatron_fsdp_unit_traffic(dense, expert, vocab, quantized, ring, w, grad) -> DpTraffic:
    """Megatron FSDP's collectives under optim_grads_params, `ring(dense_bytes, expert_bytes)` pricing one over the
    rank's DP groups, `w` the bytes each of the (dense, expert) `quantized` weights gathers in (_gather_bytes), `grad` a
    gradient's: every micro-batch reduce-scatters all gradients and gathers the decoder layers (the FSDP units) in its
    forward and again in its backward, but the embedding and output layer, no unit, are gathered once a step, in the
    first micro-batch's forward. Their modules get the pre-forward unshard hook alone, no post-forward release nor
    pre-backward gather as the TransformerLayer units do (megatron_fsdp.py _register_fsdp_hooks :1051-1090
    @core_v0.19.0); nothing releases their buckets (release_module_parameters runs on units, :600-626 and :956-975;
    _root_pre_backward marks unit buckets releasable alone, :929-940); all_gather_params launches only EMPTY or
    PRESERVED buckets (param_and_grad_buffer.py :4510-4517), so the later micro-batches' hooks, the fine-grained ones of
    EP overlap too, gather nothing for them; finish_grad_sync's synchronize_param_gather resets the pipeline once a step
    (megatron_fsdp.py :1316-1320, :1366), freeing them at core_v0.16.0 and marking them PRESERVED from core_v0.18
    (param_and_grad_buffer.py AllGatherPipeline.reset :4331-4363 @core_v0.19.0), to be gathered again in the next step's
    first forward."""
    layers = ring(_gather_bytes(dense - vocab, quantized[0], w), _gather_bytes(expert, quantized[1], w))
    return DpTraffic(ring(dense * grad, expert * grad), layers, 0.0 * layers, ring(vocab * WEIGHT_BYTES, 0.0 * vocab))


def megatron_fsdp_outer_traffic(dense, expert, vocab, quantized, inner: tuple, outer_ring, knobs: Knobs, grad,
                                passes) -> dict:
    """Megatron FSDP's once-a-step collectives between its copies (hybrid sharding: layout/dp_sharding.py
    OUTER_DP_SHARDING), for a rank's `dense` and `expert` parameters (`vocab` of them the embedding's and output
    layer's, `quantized` the (dense, expert) weights TE quantizes: _gather_bytes), sharded over the `inner` (dense,
    expert) groups, `outer_ring(dense_bytes, expert_bytes)` pricing one ring of those bytes over the copies: under outer
    no_shard, an all-reduce of the gradients at the last micro-batch, of the inner shard where the strategy shards
    gradients, else of the whole unsharded buffer (param_and_grad_buffer.py _bucket_group_gradient_reduce :4146-4205
    @core_v0.19.0 all-reduces the DP-shard buffer's data); under outer optim a reduce-scatter of the inner shard there,
    and in the next step's first micro-batch an all-gather of the stepped weights into the inner shards, run by every
    unit gather while microbatch_count is 0 (AllGatherPipeline.all_gather_params): `passes` over the units
    (layout/dp_sharding.py outer_gather_passes: the first micro-batch's forward and backward at PP 1, every warm-up
    forward too under a pipeline), and once for the embedding and output layer, which stay gathered."""
    shard = (1, 1) if knobs.fsdp_strategy.grads else inner  # an unsharded gradient buffer goes whole
    grads = outer_ring(dense * grad / inner[0] * shard[0], expert * grad / inner[1] * shard[1])
    if knobs.outer_dp_sharding_strategy == "no_shard":
        return {"step_rs": 2 * grads}
    w = gathered_weight_bytes(knobs)
    layers = outer_ring(_gather_bytes(dense - vocab, quantized[0], w) / inner[0],
                        _gather_bytes(expert, quantized[1], w) / inner[1])
    return {"step_rs": grads, "step_ag": passes * layers + outer_ring(vocab * WEIGHT_BYTES / inner[0], 0.0)}


def dp_traffic(dense, expert, vocab, lay, knobs: Knobs, gpu: GpuSpec, eff: dict, microbatches=1, *,
               quantized) -> DpTraffic:
    """Raw DP traffic of a rank holding `dense` and `expert` parameters, `vocab` of them the embedding's and output
    layer's and `quantized` the (dense, expert) weights TE quantizes (iteration_terms): (gradient reduce-scatter,
    parameter all-gather: gathered_weight_bytes for those, BF16 for the rest), over DP x CP (dense) and EDP (experts);
    without the distributed optimizer, (gradient all-reduce, nothing); under Muon's layer-wise distributed optimizer
    (dist_muon: DDP's own distributed optimizer off, so DDP all-reduces the gradients, and each rank then all-gathers
    the parameters the others stepped: Megatron-Core optimizer/layer_wise_optimizer.py), (gradient all-reduce, BF16
    parameter all-gather), the gather not overlapped as Bridge's Muon recipes run it (Knobs.overlap_param_gather
    off); under torch FSDP2, one micro-batch's pair over DP x CP (fsdp2_traffic); Megatron FSDP's the distributed
    optimizer's where its strategy shards the optimizer (dp_raw_seconds counts them: layout/dp_sharding.py), else the
    all-reduce, and between its copies megatron_fsdp_outer_traffic (its passes over `microbatches`)."""
    grad = grad_bytes(knobs)
    muon = knobs.optimizer == "muon"
    # the distributed optimizer's copies (num_distributed_optimizer_instances): each reduce-scatters and gathers over
    # its own share of the ranks (Megatron-Core parallel_state.py intra partial DP groups, contiguous in DP order), and
    # the copies all-reduce each reduced shard between them (distributed/param_and_grad_buffer.py: the inter-instance
    # all-reduce after the intra-instance reduce-scatter)
    copies = knobs.num_distributed_optimizer_instances if knobs.sharded_optimizer and not knobs.torch_fsdp2 else 1
    dense_n, expert_n = lay.dp * lay.cp // copies, lay.edp // copies
    def ring(dense_bytes, expert_bytes):
        return (ring_seconds(dense_bytes, dense_n, lay.tp, gpu, eff)
                + ring_seconds(expert_bytes, expert_n, lay.etp * lay.ep, gpu, eff))

    def outer_ring(dense_bytes, expert_bytes):  # one ring of these bytes between the copies (ranks a group apart)
        return (ring_seconds(dense_bytes, copies, lay.tp * dense_n, gpu, eff)
                + ring_seconds(expert_bytes, copies, lay.etp * lay.ep * expert_n, gpu, eff))

    def across_copies(dense_bytes, expert_bytes):  # an all-reduce (2 rings) of one copy's shard between the copies
        return 2 * outer_ring(dense_bytes / dense_n, expert_bytes / expert_n)

    if knobs.torch_fsdp2:
        dp = DpTraffic(*fsdp2_traffic(dense + expert, quantized[0] + quantized[1], lay, knobs, gpu, eff))
    elif knobs.fsdp_strategy and knobs.fsdp_strategy.weights:
        dp = megatron_fsdp_unit_traffic(dense, expert, vocab, quantized, ring, gathered_weight_bytes(knobs), grad)
    elif knobs.sharded_optimizer:  # reduce-scatter (all-reduce under Muon) and the parameter all-gather
        w = gathered_weight_bytes(knobs)
        between = copies > 1 and not knobs.fsdp_strategy  # Megatron FSDP's copies: megatron_fsdp_outer_traffic
        dp = DpTraffic(ring(dense * grad, expert * grad) * (2 if muon else 1)
                       + (across_copies(dense * grad, expert * grad) if between else 0.0),
                       ring(_gather_bytes(dense, quantized[0], w), _gather_bytes(expert, quantized[1], w)))
    else:  # gradient all-reduce (a reduce-scatter and an all-gather of the grads); every rank steps all its weights
        all_reduce = 2 * ring(dense * grad, expert * grad)  # (Megatron-Core distributed/param_and_grad_buffer.py)
        dp = DpTraffic(all_reduce, 0.0 * all_reduce)
    if knobs.fsdp_strategy and copies > 1:
        passes = outer_gather_passes(lay.pp, lay.vpp, microbatches, knobs.ep_overlap)
        outer = megatron_fsdp_outer_traffic(dense, expert, vocab, quantized, (dense_n, expert_n), outer_ring, knobs,
                                            grad, passes)
        dp = dp._replace(**{name: getattr(dp, name) + seconds for name, seconds in outer.items()})
    return dp


def stage_iteration_terms(spec: ModelSpec, p, lay, knobs: Knobs, gpu: GpuSpec, eff: dict, microbatches=1) -> tuple:
    """iteration_terms of the largest stage's parameters `p` (rank_params.StageParams, or the planner's arrays of its
    fields): the step's and the planner's one reading of them."""
    return iteration_terms(spec, p.dense, p.expert, p.vocab, lay, knobs, gpu, eff, microbatches,
                           nonmatrix=(p.nonmatrix, p.expert_nonmatrix), quantized=quantized_split(p))


def iteration_terms(spec: ModelSpec, dense, expert, vocab, lay, knobs: Knobs, gpu: GpuSpec, eff: dict,
                    microbatches=1, *, nonmatrix=(0, 0), quantized=None) -> tuple:
    """Per-iteration seconds outside the pipeline, for the largest stage's `dense` and `expert` parameters, `vocab` of
    them the embedding's and output layer's, `nonmatrix` the (dense, expert) ones not 2-D, read under Muon only, and
    `quantized` the (dense, expert) weights TE quantizes (rank_params.quantized_split; None: every 2-D one but the
    vocabulary's) (rank_params.StageParams; scalars, or arrays with `lay` fields of the same shape):
    - raw DP traffic (dp_traffic; `microbatches` a step runs set Megatron FSDP's passes across its copies);
    - the optimizer step, memory-bound over this rank's shard (master weights and moments read and written,
      grads read, weights written: BF16, or step_weight_bytes for the quantized ones; Muon keeps one momentum on the
      2-D weights, the embedding, output layer and non-2-D parameters stay on Adam: model_state.py), plus Muon's
      Newton-Schulz GEMMs on the 2-D weights it steps (walls/muon.py);
    - optimizer CPU offload: the offloaded share through the host (HybridDeviceOptimizer; measured 1.9x-4.2x
      step time on Qwen3-30B-A3B, megatron_flops_memory_notes.md item 6)."""
    if quantized is None:
        quantized = (dense - vocab - nonmatrix[0], expert - nonmatrix[1])
    dp = dp_traffic(dense, expert, vocab, lay, knobs, gpu, eff, microbatches, quantized=quantized)
    muon = knobs.optimizer == "muon"
    share = optimizer_divisors(lay, knobs)
    linear, experts = (dense - vocab) / share[0], expert / share[1]  # this rank's shard, the vocabulary apart
    vocab_shard = vocab / share[0]

    # bytes a parameter's update moves: the state it holds (model_state.optimizer_state_bytes: FP32 master copy and
    # moments) read and written, the FP32 main gradient read, and the model weight written (Megatron-Core
    # optimizer/distributed_optimizer.py steps FP32 main params on FP32 main grads, then copies them to the BF16 model
    # params, or quantizes the ones TE quantizes into FP8/NVFP4 ones: step_weight_bytes; the rest stay BF16)
    per_linear, adam = (2 * held + FP32_GRAD_BYTES for held in optimizer_state_bytes(knobs))
    if muon:  # the non-2-D parameters step on Adam
        linear, experts = linear - nonmatrix[0] / share[0], experts - nonmatrix[1] / share[1]
        vocab_shard = vocab_shard + nonmatrix[0] / share[0] + nonmatrix[1] / share[1]
    # every weight written in BF16, then the quantized ones' difference (exactly 0 without quantized parameters)
    moved = ((linear + experts) * ((per_linear if muon else adam) + WEIGHT_BYTES)
             + vocab_shard * (adam + WEIGHT_BYTES)
             + (quantized[0] / share[0] + quantized[1] / share[1]) * (step_weight_bytes(knobs) - WEIGHT_BYTES))
    f = knobs.optimizer_offload_fraction
    optimizer = moved * (1 - f) / (gpu.hbm_tbps * 1e12 * eff["mem_eff"])
    if muon:
        optimizer = optimizer + ns_seconds(spec, linear, experts, lay.tp, lay.etp, gemm_rate(gpu, "bf16", eff))
    offload = moved * f / (eff["cpu_optimizer_gbps"] * 1e9)
    return dp, optimizer, offload
