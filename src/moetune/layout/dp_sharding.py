"""Megatron FSDP's data-parallel sharding strategies (ddp.data_parallel_sharding_strategy under
ddp.use_megatron_fsdp / Megatron-LM's --use-megatron-fsdp): which model states each one shards, and how often its
collectives run. Knobs.megatron_fsdp names the strategy; walls/model_state.py and walls/iteration.py read this table.

Megatron-Core distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py _init_each_parameter_group_buffers (unchanged
core_v0.16.0-core_v0.18.2) makes three buffers a parameter group and distributes them by strategy: the model weights
(BF16, or uint8 for FP8 parameters), the FP32 main weights the optimizer steps, and the main gradients. A distributed
buffer keeps 1/N of the group on each rank: N is the DP x CP group for dense parameters and the expert data-parallel
group (EDP) for experts (mcore_fsdp_adapter.py builds the dense mesh on get_data_parallel_group(with_context_parallel=
True), the expert mesh on get_expert_data_parallel_group()). The optimizer steps the local main weights, so its state
shards exactly where they do.

megatron_fsdp.py: with the gradients sharded ("optim_grads", "optim_grads_params"), every backward reduce-scatters
them (grad_reduce_every_bprop; no_sync is overridden: "For grads shard mode there will actually always be gradient
sync happening"); otherwise the gradients accumulate and reduce once, at the last micro-batch. With the weights
sharded ("optim_grads_params") every TransformerLayer is an FSDP unit whose weights are all-gathered before its
forward, released after it (_post_forward -> release_module_parameters) and gathered again before its backward (the
embedding and output layer, no unit, once a step: walls/iteration.py megatron_fsdp_unit_traffic); both
overlaps are forced on for it (MegatronFSDP.__init__ sets overlap_param_gather and overlap_grad_reduce). "no_shard"
all-reduces full gradients and steps full optimizer states on every rank, as DDP without the distributed optimizer.
"""

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from moetune.errors import MoetuneError
from moetune.layout.pipeline import interleaved_warmup


@dataclass(frozen=True, slots=True)
class FsdpStrategy:
    weights: bool  # the model weights stay sharded between uses: gathered per unit, twice a micro-batch
    grads: bool  # the main gradients are sharded: reduce-scattered every micro-batch
    optimizer: bool  # the FP32 main weights and the optimizer state are sharded

    def sharded(self) -> list[str]:
        """What the strategy shards, in words (estimate's layout line)."""
        return [name for name, on in (("weights", self.weights), ("gradients", self.grads),
                                      ("optimizer state", self.optimizer)) if on]


MEGATRON_FSDP_STRATEGIES = {
    "no_shard": FsdpStrategy(weights=False, grads=False, optimizer=False),
    "optim": FsdpStrategy(weights=False, grads=False, optimizer=True),
    "optim_grads": FsdpStrategy(weights=False, grads=True, optimizer=True),
    "optim_grads_params": FsdpStrategy(weights=True, grads=True, optimizer=True),
}
# Megatron FSDP's hybrid sharding (HSDP: ddp.num_distributed_optimizer_instances N > 1; mcore_fsdp_adapter.py
# _init_dist_index @core_v0.19.0): the strategy above shards over an inner group, DP x CP / N (EDP / N for experts),
# and the N copies form the outer group. ddp.outer_dp_sharding_strategy (Megatron-LM --outer-dp-sharding-strategy,
# default no_shard) says what the outer group shards. "no_shard": nothing; each copy's gradient shards are
# all-reduced between the copies at the last micro-batch (param_and_grad_buffer.py GradReducePipeline
# _bucket_group_gradient_reduce :4127-4213). "optim": the FP32 main weights, the main-gradient
# view and so the optimizer state shard over inner and outer groups together, all the DP ranks, while the weights and
# accumulating gradients stay in inner shards (the hfsdp helper buffers: param_and_grad_buffer.py :2317-2507);
# the copies reduce-scatter the gradients at the last micro-batch and all-gather the stepped weights with the next
# step's unit gathers while microbatch_count is 0 (megatron_fsdp.py all_gather_and_wait_parameters_ready :458-493):
# outer_gather_passes.
OUTER_DP_SHARDING = ("no_shard", "optim")
# Megatron FSDP's all-gather per FSDP unit a micro-batch under "optim_grads_params": before the forward, and again
# before the backward (the forward's were released)
UNIT_GATHERS = 2


def outer_gather_passes(pp, vpp, microbatches, ep_overlap=False):
    """Passes over a stage's FSDP units that also all-gather across the copies in a step, under outer "optim": a unit
    gather asks for the copies' gather while its model chunk's microbatch_count is 0 (megatron_fsdp.py
    all_gather_and_wait_parameters_ready :484-490 @core_v0.19.0), the count rises only when a backward ends
    (_root_post_backward :884), and each forward released the unit (release_module_parameters), so every forward
    that starts before its chunk's first backward ends gathers across the copies again, and so does that backward.
    PP 1: the first micro-batch's forward and backward, 2. Under a pipeline, the first stage's count, as
    overlap.ep_overlap_unpaired takes it (its warm-up opens the critical path): 1F1B, PP - 1 warm-up forwards and one
    more before the first backward (at most every micro-batch), + 1; interleaved, Megatron's schedule walked
    (schedules.py get_pp_rank_microbatches, get_schedule_table @core_v0.18.2: 2(PP-1) + (VPP-1)PP warm-up chunks,
    one more under EP overlap, then a forward before each backward), each chunk's count + 1, the chunks' mean.
    Arrays broadcast."""
    passes = np.vectorize(_stage0_passes, otypes=[float])(pp, vpp, microbatches, bool(ep_overlap))
    return passes if passes.ndim else float(passes)


@lru_cache(maxsize=None)
def _stage0_passes(pp: int, vpp: int, m: int, ep_overlap: bool) -> float:
    if pp == 1 or m < 1:  # m < 1: a candidate the batch refuses elsewhere
        return 2.0
    if vpp == 1:
        return min(pp, m) + 1.0
    table = []  # each virtual forward's chunk, in groups of PP micro-batches (microbatch_group_size_per_vp_stage)
    for start in range(0, m, pp):
        end = m if start + pp >= m else start + pp
        table += [c for c in range(vpp) for _ in range(start, end)]
    total = m * vpp
    warmup = min(interleaved_warmup(pp, vpp) + int(ep_overlap), total)
    counts = 0
    for c in range(vpp):
        first = next(k for k in range(total) if vpp - 1 - table[k] == c)  # chunk c's first backward
        done = total if first >= total - warmup else warmup + first + 1
        counts += table[:done].count(c)
    return counts / vpp + 1.0


# Megatron FSDP's communication unit, in elements, where ddp.suggested_communication_unit_size is left unset
# (megatron_fsdp.py MegatronFSDP.__init__ :419-443, core_v0.16.x-core_v0.19.0): twice the mean FSDP unit under
# "optim_grads_params", else the bucket size or 1B, and never below 1B; a set size replaces all of it, floor included.
# The all-gather prefetches buckets ahead of the unit computing while less than half of it is in flight
# (param_and_grad_buffer.py AllGatherPipeline, suggested_AG_prefetch_size), and the reduce-scatter queue holds
# unsharded gradients until more than all of it waits (wait_for_previous_grad_reduce, suggested_RS_queue_capacity).
# ddp.fsdp_double_buffer (Megatron-LM --fsdp-double-buffer; on under nccl_ub or megatron_fsdp_max_pool_double_buffer)
# replaces both: two pool buffers of the largest unit for the weights and two for the gradients, allocated once and
# kept (_init_each_parameter_group_buffers: FixedPoolAllocator / MaxPoolAllocator, UB_BUFFER_NUM 2), the gathers
# refusing a third unit (all_gather_params need_skip_prefetch) and the reduce-scatters waiting before one
# (GradReducePipeline._enforce_double_buffer_limit), param_and_grad_buffer.py @core_v0.19.0.
MIN_COMMUNICATION_UNIT = 1_000_000_000


def communication_unit(mean_unit, suggested=None):
    """Elements of Megatron FSDP's communication unit for FSDP units of `mean_unit` elements (0: no units), or the
    `suggested` size where ddp.suggested_communication_unit_size sets one."""
    return suggested if suggested else np.maximum(MIN_COMMUNICATION_UNIT, 2 * mean_unit)


def _resident_elements(largest, mean_unit, layer_elements, suggested, double_buffer, units):
    """Elements of `units(communication unit / largest unit)` units sized as the largest, at most the stage's layers
    (`layer_elements`); under fsdp_double_buffer, the pool's two buffers of the largest unit whatever the queue."""
    unit = np.maximum(largest, 1)
    if double_buffer:
        return 2 * unit
    return np.minimum(unit * units(communication_unit(mean_unit, suggested) / unit), layer_elements)


def gathered_elements(largest, mean_unit, layer_elements, suggested=None, double_buffer=False):
    """Unsharded weight elements resident at once under "optim_grads_params": the unit computing and whole units
    prefetched until half a communication unit is in flight, at most the stage's layers; units sized as the largest.
    Under fsdp_double_buffer, the pool's two buffers of the largest unit."""
    return _resident_elements(largest, mean_unit, layer_elements, suggested, double_buffer,
                              lambda per_unit: 1 + np.ceil(per_unit / 2))


def pending_grad_elements(largest, mean_unit, layer_elements, suggested=None, double_buffer=False):
    """Unsharded gradient elements at once: the whole units a queue of one communication unit holds (trimmed before
    each launch: param_and_grad_buffer.py reduce_gradients waits, then launches), the unit just launched and the one
    whose backward is filling its bucket, at most the stage's layers; units sized as the largest. Under
    fsdp_double_buffer, the pool's two buffers of the largest unit."""
    return _resident_elements(largest, mean_unit, layer_elements, suggested, double_buffer,
                              lambda per_unit: np.floor(per_unit) + 2)


def fsdp_optimizer_refusal(strategy: str | None, optimizer: str) -> str | None:
    """Why Megatron FSDP cannot run this optimizer (None where it can): Megatron-LM asserts Adam or SGD under it. The
    pins and flags that ask for both (plan's --fix, estimate's --megatron-fsdp) say it with their own names."""
    if strategy and optimizer not in ("adam", "sgd"):
        return ("Megatron-LM asserts Megatron FSDP runs Adam or SGD only (arguments.py validate_args @core_v0.18.2; "
                "rule fsdp.muon)")
    return None


def check_outer_sharding(outer: str, strategy: str | None, copies: int) -> None:
    """Refuse an outer_dp_sharding_strategy that Megatron FSDP refuses: a value outside OUTER_DP_SHARDING
    (arguments.py --outer-dp-sharding-strategy choices @core_v0.19.0), and "optim" without Megatron FSDP's hybrid
    sharding, or beside a strategy other than optim_grads_params (param_and_grad_buffer.py
    _init_each_parameter_group_buffers raises NotImplementedError; without copies there are no helper buffers for
    AllGatherPipeline.get_fsdp_buffer to read)."""
    if outer not in OUTER_DP_SHARDING:
        raise MoetuneError(f"outer_dp_sharding_strategy {outer!r}: Megatron FSDP takes {', '.join(OUTER_DP_SHARDING)}")
    if outer == "optim" and (strategy != "optim_grads_params" or copies < 2):
        wrong = ([f"Megatron FSDP's optim_grads_params (here {strategy or 'no Megatron FSDP'})"]
                 * (strategy != "optim_grads_params") + [f"num_distributed_optimizer_instances > 1 (here {copies})"]
                 * (copies < 2))
        raise MoetuneError(f"outer_dp_sharding_strategy optim needs {' and '.join(wrong)} (rule "
                           f"fsdp.outer_optim_needs_hybrid_full_sharding): set {'both' if len(wrong) > 1 else 'it'}, "
                           "or outer_dp_sharding_strategy no_shard")
