"""The memory wall: bytes on one rank of each pipeline stage, each a named line item.

Model states (Megatron DDP + distributed optimizer, megatron/core/distributed/ and
megatron/core/optimizer/distrib_optimizer.py): BF16 weights, a full-size gradient buffer (FP32 by
default), and Adam states (FP32 master copy + two moments) sharded over DP x CP for dense
parameters and over EDP for expert parameters — the ``6 + 12/DP`` bytes/param of Megatron-LM's
theoretical_memory_usage.py, with the expert shard of Bridge's theoretical_memory_utils.py.
Activations: activations.py per layer, times the micro-batches in flight on that stage.
"""

import math
import tomllib
from collections import Counter
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.specs.hardware import GIB
from moetune.specs.model import ModelSpec
from moetune.walls.activations import (
    FP32,
    ActivationContext,
    full_recompute_layer_bytes,
    layer_activation_items,
    offload_staging_bytes,
    whole,
)
from moetune.walls.rank_params import StageParams, stage_params, vocab_shard

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


@cache
def default_overheads() -> dict[str, float]:
    return tomllib.loads((resources.files("moetune") / "data" / "memory_overheads.toml").read_text())


MAX_OVERHEAD_GIB = 1e6  # a PiB: more than any GPU or node holds


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past a float's range
        return False


def check_overheads(user: dict, where: str = "overheads") -> dict[str, float]:
    """A user's overhead figures, each a known key of memory_overheads.toml holding a number: GiB >= 0, or the
    fragmentation fraction in [0, 1); anything else is one error line naming the key (`where`: the file)."""
    known = default_overheads()
    for key, value in user.items():
        if key not in known:
            what = "a section" if isinstance(value, dict) else "unknown key"
            raise MoetuneError(f"{where}: {what} '{key}'; the file holds flat keys, one of {', '.join(known)}")
        number = isinstance(value, int | float) and not isinstance(value, bool) and _finite(value)
        high = 1.0 if key == "fragmentation_fraction" else MAX_OVERHEAD_GIB  # past it, byte counts overflow
        if not number or not 0 <= value < high:
            span = "in [0, 1)" if high == 1.0 else f"in [0, {MAX_OVERHEAD_GIB:g}) (GiB)"
            raise MoetuneError(f"{where}: {key} = {value!r} must be a number {span}")
    return user


def merged_overheads(user: dict | None) -> dict[str, float]:
    """memory_overheads.toml with a user's --overheads figures on top."""
    return {**default_overheads(), **check_overheads(user or {})}


@dataclass(kw_only=True, slots=True, frozen=True)
class StageMemory:
    stage: int
    params: int  # parameters on one rank of this stage
    items: dict[str, int]  # named bytes
    in_flight_microbatches: float
    host_bytes: int = 0  # what this rank keeps in host memory: the optimizer's CPU-offloaded share

    @property
    def total(self) -> int:
        return sum(self.items.values())


# Muon's state a parameter: the FP32 master copy and one FP32 momentum buffer (emerging_optimizers Muon keeps
# momentum_buffer alone, against Adam's exp_avg and exp_avg_sq). Megatron puts linear weights under Muon and the rest
# under Adam; the norms and biases among the rest are counted at Muon's bytes here (under 0.1% of a MoE layer's
# parameters), the embedding and output layer at Adam's. The layer-wise distributed optimizer (dist_muon) owns whole
# parameters per DP rank: sharded like the distributed optimizer here, even where layers do not split evenly.
MUON_MOMENT_BYTES = 4
MASTER_BYTES = 4  # the FP32 master copy of a BF16 parameter, under either optimizer
FP32_GRAD_BYTES = 4  # the FP32 main gradient the optimizer steps on
WEIGHT_BYTES = 2  # the BF16 model weight


def optimizer_state_bytes(knobs: Knobs) -> tuple[int, int]:
    """Bytes of optimizer state a parameter *holds*, (linear weights, embedding and output layer): the FP32 master copy
    plus Adam's exp_avg and exp_avg_sq (FP32, or BF16 under --bf16-moments), or plus Muon's one momentum on the linear
    weights, the vocabulary staying on Adam. What an update reads and writes each step is derived from it
    (iteration.iteration_terms); the gradient and the BF16 weight are separate line items."""
    adam = MASTER_BYTES + 2 * knobs.adam_moments_bytes
    return (MASTER_BYTES + MUON_MOMENT_BYTES if knobs.optimizer == "muon" else adam), adam


def weight_items(p: StageParams, knobs: Knobs, arch: str) -> dict[str, int]:
    """The weights of a rank: BF16, plus under an FP8/FP4 recipe TE's cached quantized copies of the GEMM weights (all
    but the embedding and output layer), or with FP8 or NVFP4 parameters those weights in place of their BF16 ones;
    `arch` is the GPU's (quantized_weight_bytes)."""
    params = p.dense + p.expert
    if not knobs.fp8:
        return {"weights": 2 * params}
    fp8 = whole(quantized_weight_bytes(knobs.precision, arch) * (params - p.vocab))
    if knobs.quantized_params:
        return {"weights": 2 * p.vocab, "fp8_weights": fp8}
    return {"weights": 2 * params, "fp8_weight_cache": fp8}


def model_state_bytes(p: StageParams, layout: Layout, knobs: Knobs, arch: str) -> dict[str, int]:
    params = p.dense + p.expert
    items = {**weight_items(p, knobs, arch), "main_grads": (4 if knobs.main_grads_fp32 else 2) * params}
    if knobs.torch_fsdp2:
        items.update(fsdp2_sharded_items(items, params, layout))
    linear, adam = optimizer_state_bytes(knobs)
    shard = optimizer_shard(p, layout, knobs)
    if knobs.optimizer == "muon":  # the embedding and output layer stay on Adam
        vocab = -(-p.vocab // optimizer_divisors(layout, knobs)[0])
        items["optimizer_states"] = whole(linear * (shard - vocab) + adam * vocab)
    else:
        items["optimizer_states"] = whole(adam * shard * (1 - knobs.optimizer_offload_fraction))
    return items


def fsdp2_sharded_items(items: dict[str, int], params, layout) -> dict[str, int]:
    """The BF16 weights and the gradients of a rank under torch FSDP2. Megatron-Core's TorchFullyShardedDataParallel
    calls fully_shard on every TransformerLayer, the embedding and the output layer over the DP x CP group
    (distributed/torch_fully_sharded_data_parallel.py: get_data_parallel_group(with_context_parallel=True), unchanged
    core_v0.16.0-core_v0.18.2), experts included (Megatron-LM refuses EP > 1 under it), so each rank keeps 1/(DP x CP)
    of each weight between uses. There is no DDP gradient buffer: the sharded BF16 .grad is copied to an FP32 .grad
    of the FP32 master shard at the step, each BF16 one freed as it is copied (optimizer/optimizer.py
    Float16OptimizerWithFloat16Params._copy_model_grads_to_main_grads), so the gradient line is the FP32 shard.
    TE's cached FP8 copies of the gathered weights are left whole."""
    shards = layout.dp * layout.cp
    return {"weights": -(-items["weights"] // shards), "main_grads": FP32_GRAD_BYTES * -(-params // shards)}


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
    return (layout.dp * layout.cp, layout.edp) if knobs.distributed_optimizer else (1, 1)


def offloaded_host_bytes(p: StageParams, layout: Layout, knobs: Knobs):
    """Host bytes of the optimizer's CPU offload: for each offloaded parameter of this rank's optimizer shard, its FP32
    copy, the Adam moments and an FP32 gradient copy (Megatron-Core optimizer/cpu_offloading/hybrid_optimizer.py
    keeps all three on the host, the gradient in cpu_copy_map_grad)."""
    # Adam's state (Knobs refuses Muon's offload) and the FP32 gradient copy
    per_param = optimizer_state_bytes(knobs)[1] + FP32_GRAD_BYTES
    return whole(per_param * optimizer_shard(p, layout, knobs) * knobs.optimizer_offload_fraction)


def in_flight(layout: Layout, stage: int, microbatches: int) -> float:
    """Micro-batches whose activations a stage holds at its peak, in whole-stage units.
    1F1B: PP - p (warm-up + 1). Interleaved: Megatron's warm-up of 2(PP-p-1) + (VPP-1)PP chunks + 1,
    each chunk 1/VPP of the stage (schedules.py get_pp_warmup...; Korthikanti Sec. 4.2.3)."""
    one_f_one_b = np.minimum(layout.pp - stage, microbatches)
    chunks = 2 * (layout.pp - stage - 1) + (layout.vpp - 1) * layout.pp + 1
    interleaved = np.minimum(chunks, microbatches * layout.vpp) / layout.vpp
    out = np.where(layout.vpp == 1, one_f_one_b, interleaved)
    return out if isinstance(out, np.ndarray) and out.ndim else float(out)


# A full-iteration plan keeps its routed-expert activations in a paged stash (config_map.STATIC_EXPERTS), a CUDA
# buffer sized at this factor of the average routed tokens: Megatron Bridge's full-iteration MoE recipes set
# moe_paged_stash_buffer_size_factor_cuda = 1.2 (perf_recipes/deepseek/common.py, gpt_oss/common.py @067f987;
# Megatron-Core's default is 1.10)
PAGED_STASH_CUDA = 1.2


def activation_context(layout: Layout, workload: Workload, knobs: Knobs) -> ActivationContext:
    return ActivationContext(
        seq_length=workload.seq_length, micro_batch_size=workload.micro_batch_size, tp=layout.tp,
        cp=layout.cp, etp=layout.etp, sequence_parallel=layout.sp,
        recompute_modules=knobs.effective_modules if knobs.recompute == "selective" else frozenset(),
        token_imbalance=knobs.imbalance_at(layout.ep),
        stash_factor=PAGED_STASH_CUDA if "full_iteration" in knobs.cuda_graph_scope else 1.0,
        fp8_gemm_inputs=knobs.fp8, offload_modules=knobs.offload_modules,
    )


def stage_activation_items(spec: ModelSpec, layout: Layout, workload: Workload, knobs: Knobs,
                           stage: int, layers: tuple[int, ...], mtp_layers: int) -> tuple[dict[str, int], float]:
    """Activation line items of one stage at its peak, and the micro-batches in flight."""
    ctx = activation_context(layout, workload, knobs)
    kinds = [spec.layers[i] for i in layers] + [spec.mtp_layer_kind] * mtp_layers
    flight = in_flight(layout, stage, workload.num_microbatches(layout))
    if knobs.recompute == "full":
        stored = full_recompute_layer_bytes(spec, ctx) * len(kinds)
        working = max((sum(layer_activation_items(spec, k, ctx).values()) for k in kinds), default=0)
        return {"activations_layer_inputs": round(stored * flight), "activations_recompute_working": working}, flight
    items: dict[str, int] = {}
    for kind, count in Counter(kinds).items():  # one evaluation per layer kind, times its layers
        for name, value in layer_activation_items(spec, kind, ctx).items():
            items[name] = items.get(name, 0) + value * count
    out = {f"act_{k}": round(v * flight) for k, v in items.items()}
    if knobs.offload_modules:
        out["act_offload_staging"] = int(offload_staging_bytes(spec, ctx))
    return out, flight


def logits_bytes(spec: ModelSpec, tokens, vocab_shard):
    """Logits of one micro-batch on the last stage: BF16 logits plus the FP32 softmax the vocab-parallel
    cross entropy saves for backward, once per loss head (main + each MTP layer)."""
    return tokens * vocab_shard * (2 + FP32 * (1 + spec.mtp_num_layers))


def output_proj_cache_bytes(spec: ModelSpec, vocab_shard):
    """Under fp8_output_proj the LM head is a Transformer Engine linear run in MXFP8 (Megatron-Core
    extensions/transformer_engine.py TELMHeadColumnParallelLinear), built outside the layers' FP8-parameter init
    (transformer_block.py: get_fp8_context(is_init=True) per layer), so its BF16 weight stays and TE caches its MXFP8
    copy across micro-batches, as for any BF16 GEMM weight under an FP8 recipe (FP8_CACHE_BYTES)."""
    return whole(FP8_CACHE_BYTES["mxfp8"] * vocab_shard * spec.hidden_size)


def loss_bytes(spec: ModelSpec, layout: Layout, workload: Workload) -> int:
    tokens = workload.seq_length // layout.cp * workload.micro_batch_size
    return logits_bytes(spec, tokens, vocab_shard(spec, layout.tp))


def overhead_bytes(knobs: Knobs, overheads: dict[str, float]) -> dict[str, int]:
    items = {"cuda_context": overheads["cuda_context_gib"], "nccl_buffers": overheads["nccl_gib"]}
    if knobs.dispatcher in ("deepep", "hybridep"):
        items[f"{knobs.dispatcher}_buffers"] = overheads[f"{knobs.dispatcher}_buffer_gib"]
    if knobs.cuda_graph_scope:
        full = "full_iteration" in knobs.cuda_graph_scope
        items["cuda_graph_pool"] = overheads["cuda_graph_full_gib" if full else "cuda_graph_partial_gib"]
    return {k: round(v * GIB) for k, v in items.items()}


# tp_comm_overlap: Transformer Engine's initialize_ub (pytorch/module/base.py), as Megatron-LM calls it
# (training/initialize.py: shape [seq x MBS / CP, hidden]), registers one buffer of that shape for each of 12 overlapped
# GEMMs (qkv, proj, fc1, fc2 x fprop, dgrad, wgrad): BF16, except the 8 all-gather ones, uint8 under an FP8 recipe.
# (A recipe keeping its first and last layers in BF16 registers a second, BF16 set; the perf recipes turn that off.)
UB_BUFFERS, UB_ALL_GATHER = 12, 8
UB_FP8_PRECISIONS = ("fp8-blockwise", "fp8-delayed", "fp8-current", "mxfp8")


def userbuffer_bytes(spec: ModelSpec, tokens, tp, sp, knobs: Knobs):
    """Userbuffers of tp_comm_overlap on one rank (`tokens` = seq x MBS / CP); 0 where Megatron Bridge turns the
    overlap off (TP < 2 or no sequence parallel, training/comm_overlap.py)."""
    if not knobs.tp_comm_overlap:
        return 0
    gathered = 1 if knobs.precision in UB_FP8_PRECISIONS else 2
    per_row = UB_ALL_GATHER * gathered + (UB_BUFFERS - UB_ALL_GATHER) * 2
    return np.where((np.asarray(tp) > 1) & np.asarray(sp, dtype=bool), tokens * spec.hidden_size * per_row, 0)


def memory_wall(spec: ModelSpec, layout: Layout, workload: Workload, knobs: Knobs,
                overheads: dict[str, float] | None = None, *, arch: str) -> list[StageMemory]:
    """Per-stage memory of one rank, every line item named, on a GPU of architecture `arch`."""
    overheads = merged_overheads(overheads)
    ub = int(userbuffer_bytes(spec, workload.seq_length // layout.cp * workload.micro_batch_size, layout.tp,
                              layout.sp, knobs))  # the same buffers on every stage
    result = []
    for p in stage_params(spec, layout):
        items = model_state_bytes(p, layout, knobs, arch)
        acts, flight = stage_activation_items(spec, layout, workload, knobs, p.stage, p.layers, p.mtp_layers)
        items.update(acts)
        if p.loss:
            items["logits_and_loss"] = loss_bytes(spec, layout, workload)
        if p.loss and knobs.fp8_output_proj:
            items["fp8_output_proj_cache"] = output_proj_cache_bytes(spec, vocab_shard(spec, layout.tp))
        items.update(overhead_bytes(knobs, overheads))
        if ub:
            items["tp_comm_userbuffers"] = ub
        allocated = sum(v for k, v in items.items() if k not in ("cuda_context", "nccl_buffers"))
        items["fragmentation"] = round(allocated * overheads["fragmentation_fraction"])
        result.append(StageMemory(stage=p.stage, params=p.total, items=items, in_flight_microbatches=flight,
                                  host_bytes=int(offloaded_host_bytes(p, layout, knobs))))
    return result


