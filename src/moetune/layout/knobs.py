"""Training knobs beyond the layout: precision, recompute, optimizer, dispatcher, overlap, CUDA graphs.

Names follow Megatron Bridge / Megatron-Core (``recompute_granularity``, ``recompute_modules``,
``moe_token_dispatcher_type``, ``cuda_graph_scope``, ...). Defaults that depend on the platform are
filled by ``moetune.planner.defaults`` and reported as defaulted.
"""

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from moetune.layout.dp_sharding import MEGATRON_FSDP_STRATEGIES, UNIT_GATHERS, FsdpStrategy
from moetune.layout.imbalance import DROPLESS_IMBALANCE, DROPLESS_IMBALANCE_EP, busiest_share
from moetune.layout.knob_checks import check_knobs, check_megatron_fsdp, check_optimizer
from moetune.layout.knob_values import (  # noqa: F401  the knobs' vocabulary, imported from here across moetune
    CP1_COMM_TYPES,
    CP_COMM_TYPES,
    CUDA_GRAPH_SCOPES,
    DISPATCHERS,
    FP8_OUTPUT_PROJ_PRECISION,
    PLAN_ROUTER_DTYPE,
    PRECISIONS,
    ROUTER_DTYPES,
    SWITCHES,
)
from moetune.layout.param_gather import PARAM_SWITCHES

# SMs a fused dispatcher's kernels get when a config does not say (moe_deepep_num_sms / moe_hybridep_num_sms;
# newer Megatron: moe_flex_dispatcher_num_sms). MEGATRON_FLEX_SMS: Megatron-Core's TransformerConfig defaults
# (megatron-core 0.16; HybridEP's through 0.17, below). TUNED_FLEX_SMS: what the tuned recipes set, moetune's default
# for a plan: 32 for HybridEP (Megatron Bridge scripts/performance/utils/overrides.py _set_common_perf_overrides;
# Megatron-LM examples/moe_recipes YAMLs), DeepEP left at Megatron's 20 (Bridge never overrides it).
MEGATRON_FLEX_SMS = {"deepep": 20, "hybridep": 16}
TUNED_FLEX_SMS = {"deepep": 20, "hybridep": 32}
# From Megatron-Core core_v0.18.0 moe_hybridep_num_sms defaults to None (transformer_config.py; 16 through
# core_v0.17.x) and is handed to HybridEP as None, which then runs its own count for dispatch and combine: 24 where the
# EP group is one NVLink domain, 8 where it spans several (DeepEP hybrid-ep cf780852 csrc/hybrid_ep/config.cuh:315-316,
# `num_of_nodes == 1 ? 24 : 8`). DeepEP keeps 20: Megatron-Core passes 20 where the count is unset
# (token_dispatcher.py "None -> 20", core_v0.19.0 on).
HYBRIDEP_UNSET_FROM = "0.18.0"
HYBRIDEP_LIBRARY_SMS = {True: 24, False: 8}  # by whether the EP group lies in one NVLink domain


def unset_flex_sms(backend: str | None, library: bool, one_domain: bool | None) -> int | None:
    """SMs a fused dispatcher runs where the config leaves the count unset: Megatron-Core's default, or under a
    release that leaves HybridEP's to HybridEP (`library`: core_v0.18.0 on) HybridEP's own by whether the EP group
    lies in one NVLink domain (`one_domain`; None: the topology unknown, and so the count)."""
    if backend != "hybridep" or not library:
        return MEGATRON_FLEX_SMS.get(backend)
    return None if one_domain is None else HYBRIDEP_LIBRARY_SMS[one_domain]


@dataclass(kw_only=True, slots=True, frozen=True)
class Knobs:
    precision: str = "bf16"
    recompute: Literal["none", "selective", "full"] = "none"  # recompute_granularity (None/selective/full)
    recompute_modules: frozenset[str] = field(default_factory=frozenset)
    distributed_optimizer: bool = True  # use_distributed_optimizer; with Muon, the layer-wise one (dist_muon)
    # torch_fsdp2 (--use-torch-fsdp2 / dist.use_torch_fsdp2): PyTorch FSDP2 in place of Megatron's DDP, sharding the
    # weights, gradients and optimizer state over DP x CP (walls/model_state.py fsdp2_sharded_items)
    torch_fsdp2: bool = False
    # fsdp2_reshard_after_forward: FSDP2 frees each layer's gathered weights after its forward and gathers them again
    # in its backward (Megatron's default); off (Megatron-LM's --torch-fsdp2-no-reshard-after-forward) keeps them
    # from forward to backward: one gather a micro-batch fewer, every layer's gathered weights resident meanwhile
    fsdp2_reshard_after_forward: bool = True
    # megatron_fsdp: Megatron FSDP's data_parallel_sharding_strategy where it wraps the model (ddp.use_megatron_fsdp),
    # None under Megatron's DDP (layout/dp_sharding.py says what each strategy shards)
    megatron_fsdp: str | None = None
    # outer_dp_sharding_strategy: under Megatron FSDP with num_distributed_optimizer_instances > 1 (its hybrid
    # sharding), what the outer group of copies shards: "no_shard" (each copy holds all of the state), or "optim" (the
    # FP32 main weights and optimizer state over all the DP ranks; layout/dp_sharding.py OUTER_DP_SHARDING)
    outer_dp_sharding_strategy: str = "no_shard"
    # Megatron FSDP's transient buffers (layout/dp_sharding.py): fsdp_double_buffer, two pool buffers of the largest
    # unit each for gathered weights and pending gradients; suggested_communication_unit_size, elements of its
    # communication unit where set (None: Megatron's default)
    fsdp_double_buffer: bool = False
    suggested_communication_unit_size: int | None = None
    # "adam", or "muon": Megatron's emerging optimizer (linear weights under Muon's one momentum buffer, the rest under
    # Adam; optimizer/__init__.py _get_megatron_emerging_optimizer), as Kimi-K2's Bridge recipes run it (dist_muon)
    optimizer: str = "adam"
    optimizer_offload_fraction: float = 0.0  # optimizer_offload_fraction (HybridDeviceOptimizer)
    offload_modules: frozenset[str] = field(default_factory=frozenset)  # fine_grained_activation_offloading
    main_grads_fp32: bool = True  # grad buffers in FP32 (accumulate_allreduce_grads_in_fp32)
    adam_moments_bytes: int = 4  # 4: FP32 exp_avg/exp_avg_sq; 2: BF16 moments (DeepSeek-V3 recipes)
    dispatcher: str = "alltoall"  # alltoall | deepep | hybridep (flex backends) | allgather
    # SMs of the DeepEP / HybridEP kernels (moe_deepep_num_sms / moe_hybridep_num_sms); None: TUNED_FLEX_SMS
    flex_num_sms: int | None = None
    cuda_graph_scope: tuple[str, ...] = ()  # empty: no CUDA graphs
    ep_overlap: bool = False  # overlap_moe_expert_parallel_comm
    delay_wgrad: bool = False  # delay_wgrad_compute
    tp_comm_overlap: bool = False  # tp_comm_overlap (TE userbuffers)
    # ddp.overlap_grad_reduce / ddp.overlap_param_gather: on in Megatron Bridge's recipes (Megatron's own default is
    # off); a recipe may turn one off (the H100 DeepSeek-V3 one: overlap_grad_reduce=False)
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    routing: Literal["dropless", "force-balance"] = "dropless"
    # fp8_output_proj: the LM head (output layer) runs under MXFP8 as TE's TELMHeadColumnParallelLinear; otherwise it is
    # Megatron's own ColumnParallelLinear, outside Transformer Engine's FP8 autocast, in BF16 whatever the recipe
    # (megatron/core/models/gpt/gpt_model.py, fp8_utils.is_mxfp8_output_proj_active)
    fp8_output_proj: bool = False
    # fp8_param_gather: the FP8 recipes' weights are Transformer Engine FP8 tensors built under fp8_model_init
    # (Megatron-Core fp8_utils.get_fp8_context(is_init=True) with TransformerConfig.fp8_param), with no BF16 copy, and
    # the distributed optimizer writes and gathers them in FP8 (walls/model_state.py model_state_bytes). None: what
    # Bridge's preset of the recipe sets (FP8_PARAM_PRESET); read it as `fp8_params`
    fp8_param_gather: bool | None = None
    # fp4_param_gather: NVFP4's weights are Transformer Engine NVFP4 tensors built under Megatron-Core's
    # get_fp4_context(is_init=True) (TransformerConfig.fp4_param), with no BF16 copy; DDP gathers their packed 4-bit
    # data (walls/iteration.py gathered_weight_bytes). None: Bridge's NVFP4 preset's (on); read it as `fp4_params`
    fp4_param_gather: bool | None = None
    token_imbalance: float | None = None  # max/mean tokens per expert rank; None: DROPLESS_IMBALANCE / 1.0
    # cp_comm_type: how CP ranks exchange attention inputs (walls/context_parallel.py); Megatron's default is p2p.
    # hcp_a2a_size: the a2a group of a2a+p2p (hierarchical_context_parallel_sizes[0]); None: the largest that fits
    cp_comm_type: str = "p2p"
    hcp_a2a_size: int | None = None
    # moe_router_dtype: the dtype the MoE router computes its logits and so the routing probabilities in ("fp32" or
    # "fp64"; None: the activations' BF16), Megatron-Core moe/router.py TopKRouter.gating (probs follow the logits:
    # type_as(logits)). The biased experts' fc2 bias pass runs in it (walls/compute.py expert_bias_seconds).
    moe_router_dtype: str | None = PLAN_ROUTER_DTYPE
    # hidden_dropout / attention_dropout (model.*; Megatron-LM's --hidden-dropout / --attention-dropout, 0.1 by
    # default; 0 in Megatron Bridge's model bridges and every plan). Hidden dropout keeps a mask per residual branch
    # (walls/activations.py); fused attention keeps none for attention dropout, which Megatron refuses under graphed
    # attention recompute (rules read it)
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    # num_distributed_optimizer_instances: the distributed optimizer's copies across the DP ranks; each shards the state
    # over its 1/N of them (DP x CP / N dense, EDP / N experts: parallel_state.py intra partial DP groups) and the
    # copies all-reduce the reduced gradients (walls/iteration.py)
    num_distributed_optimizer_instances: int = 1
    # routed_buffer_factor: under full-iteration CUDA graphs, the routed-expert activations kept for backward as a
    # factor of the mean tokens an expert rank receives: the paged stash's CUDA buffer
    # (moe_paged_stash_buffer_size_factor_cuda) or, without the stash, the fixed-size buffers HybridEP fills up to
    # moe_expert_rank_capacity_factor. None: a plan's own stash (walls/memory.py PAGED_STASH_CUDA)
    routed_buffer_factor: float | None = None

    @property
    def fsdp_strategy(self) -> FsdpStrategy | None:
        """Megatron FSDP's strategy (layout/dp_sharding.py), None without it."""
        return MEGATRON_FSDP_STRATEGIES[self.megatron_fsdp] if self.megatron_fsdp else None

    @property
    def sharded_optimizer(self) -> bool:
        """Whether the optimizer state shards over the data-parallel ranks (Megatron FSDP's strategy says, else the
        distributed optimizer; torch FSDP2 apart: walls/model_state.py optimizer_divisors)."""
        return self.fsdp_strategy.optimizer if self.fsdp_strategy else self.distributed_optimizer

    @property
    def microbatch_reduce_scatters(self) -> bool:
        """Whether the DP gradient reduce-scatter runs every micro-batch (an FSDP with sharded gradients) rather than
        once, after the last one."""
        return self.torch_fsdp2 or bool(self.fsdp_strategy and self.fsdp_strategy.grads)

    @property
    def microbatch_gathers(self) -> int:
        """DP all-gathers of every weight a micro-batch (an FSDP with sharded weights), 0 where the weights are
        gathered once a step, after the optimizer. Torch FSDP2 gathers in the forward and again in the backward,
        unless its weights stay gathered between them (fsdp2_reshard_after_forward off: walls/iteration.py
        fsdp2_traffic)."""
        if self.torch_fsdp2:
            return 2 if self.fsdp2_reshard_after_forward else 1
        return UNIT_GATHERS if self.fsdp_strategy and self.fsdp_strategy.weights else 0

    def __post_init__(self) -> None:
        check_optimizer(self)
        check_megatron_fsdp(self)
        if self.megatron_fsdp and not self.distributed_optimizer:
            # Megatron-LM and Bridge both turn it on under Megatron FSDP (arguments.py:1112-1118 @core_v0.18.2;
            # config.py _validate_and_apply_megatron_fsdp_v1_configs @067f987)
            object.__setattr__(self, "distributed_optimizer", True)
        if self.optimizer == "muon" or not self.distributed_optimizer:
            # no bucketed gather to overlap: without the distributed optimizer there are no shards (Megatron-LM asserts
            # it), and Bridge's Muon recipes turn it off (recipes/kimi/h100/kimi_k2.py sets ddp.overlap_param_gather
            # False with Muon), so the layer-wise optimizer gathers after its step (optimizer/layer_wise_optimizer.py
            # allgather_params; from core_v0.18.0 it can hand the gather to DDP's hooks where the overlap is on)
            object.__setattr__(self, "overlap_param_gather", False)
        check_knobs(self)

    @property
    def imbalance(self) -> float:
        """Busiest expert rank's tokens over the mean: 1 under force-balanced routing."""
        if self.routing == "force-balance":
            return 1.0
        return DROPLESS_IMBALANCE if self.token_imbalance is None else self.token_imbalance

    def imbalance_at(self, ep):
        """The factor charged at this EP size (a number or an array of them): `imbalance` across expert ranks, 1 at
        EP 1, where every rank holds every expert, none waits for a busier one and each rank's routed total is
        exact; the default grows to its full value at DROPLESS_IMBALANCE_EP, a user's --token-imbalance is taken as
        measured. Time, memory, explain and the JSON all read it here."""
        if type(ep) is int:  # one layout's EP (estimate, a re-split's every split): the same sums on Python floats,
            # the IEEE doubles numpy's are, without its cost a call (a plan asks ~1,300 times)
            scale = 1.0 if self.token_imbalance is not None else busiest_share(ep)
            return 1.0 + (self.imbalance - 1.0) * scale if ep > 1 else 1.0
        ep = np.asarray(ep)
        # the busiest-of-EP share by table lookup: a search asks it of every candidate of every knob set
        scale = 1.0 if self.token_imbalance is not None else busiest_share(ep)
        charged = np.where(ep > 1, 1.0 + (self.imbalance - 1.0) * scale, 1.0)
        return float(charged) if charged.ndim == 0 else charged

    @property
    def num_sms(self) -> int:
        """SMs of the fused dispatcher's kernels (0 for alltoall / allgather, which NCCL runs)."""
        if self.dispatcher not in TUNED_FLEX_SMS:
            return 0
        return self.flex_num_sms or TUNED_FLEX_SMS[self.dispatcher]

    @property
    def fp8(self) -> bool:
        return self.precision != "bf16"

    @property
    def fp8_params(self) -> bool:
        """Whether the weights are kept in FP8 (fp8_param_gather as given, else the recipe preset's, off without the
        distributed optimizer and where the optimizer's CPU offload cannot step FP8 weights:
        param_gather.py offload_refuses_params)."""
        return self._param_switch("fp8_param_gather")

    @property
    def fp4_params(self) -> bool:
        """Whether the weights are kept in NVFP4 (fp4_param_gather as given, else the NVFP4 preset's, off without the
        distributed optimizer, whose shards quantize_nvfp4_param_shard casts back: distrib_optimizer.py, and beside
        the optimizer's CPU offload, which cannot step them: param_gather.py OFFLOAD_RECIPES)."""
        return self._param_switch("fp4_param_gather")

    @property
    def quantized_params(self) -> bool:
        """Whether the GEMM weights are the recipe's quantized tensors (FP8 or NVFP4 parameters), with no BF16 copy."""
        return self.fp8_params or self.fp4_params

    def _param_switch(self, name: str) -> bool:
        """A PARAM_SWITCHES switch as given, else its preset: on under a preset recipe where none of the switch's
        needs refuses it and its preset_off does not hold."""
        value, switch = getattr(self, name), PARAM_SWITCHES[name]
        if value is not None:
            return value
        return (self.precision in switch.preset and not switch.preset_off(self)
                and not any(need.refuses(self) for need in switch.needs))

    @property
    def effective_modules(self) -> frozenset[str]:
        """Selective recompute with no modules named means Megatron's default, ``core_attn``."""
        if self.recompute == "selective" and not self.recompute_modules:
            return frozenset({"core_attn"})
        return self.recompute_modules


def imbalance_source(knobs: Knobs) -> str:
    """Where the dropless factor a run is charged comes from, in words."""
    if knobs.token_imbalance is not None:
        return "--token-imbalance"
    return (f"default: layout/imbalance.py DROPLESS_IMBALANCE, {DROPLESS_IMBALANCE:g}x at EP {DROPLESS_IMBALANCE_EP} "
            "and above from the force-balance/dropless pairs R151-R158, less at smaller EP as the busiest of fewer "
            "ranks")
