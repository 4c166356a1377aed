"""One config per rule that breaks it: dotted overrides, cluster, estimator/profiler facts, context.

Each case is written from the rule's seed statement (what the seed says is wrong), not from the engine.
"""

from dataclasses import dataclass, field
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bridge"

def S(*items) -> tuple[str, ...]:
    """Overrides in order; a later key=value replaces an earlier one (one --set list has no contradictions)."""
    out: dict[str, str] = {}
    for item in items:
        for text in (item,) if isinstance(item, str) else item:
            out[text.split("=", 1)[0]] = text
    return tuple(out.values())


# A dropless MoE (64 experts) that trains in BF16 with the safe alltoall dispatcher and grouped GEMM.
MOE = ("model.num_moe_experts=64", "model.moe_grouped_gemm=true", "model.moe_token_dispatcher_type=alltoall",
       "model.moe_router_dtype=fp32", "mixed_precision.bf16=true", "train.manual_gc=true")
EP_OVERLAP = S(MOE, "model.expert_model_parallel_size=8", "comm_overlap.overlap_moe_expert_parallel_comm=true")
TE_GRAPHS = "model.cuda_graph_impl=transformer_engine"
# Megatron Bridge's full-iteration MoE settings (perf_recipes/deepseek/common.py _enable_deepseek_full_iteration_mxfp8
# @067f987): HybridEP with a per-rank token budget, paged stashing and the TE op fuser
FULL_ITERATION_HYBRIDEP = S(MOE, "model.expert_model_parallel_size=8", "model.cuda_graph_impl=full_iteration",
                            "model.moe_token_dispatcher_type=flex", "model.moe_flex_dispatcher_backend=hybridep",
                            "model.moe_expert_rank_capacity_factor=1.5", "model.moe_paged_stash=true",
                            "model.use_transformer_engine_op_fuser=true",
                            "rerun_state_machine.check_for_nan_in_loss=false")
# A Megatron-LM launch under --use-torch-fsdp2 (its validate_args asserts are what the fsdp.* rules mirror)
FSDP2_MLM = S(MOE, "dist.use_torch_fsdp2=true", "cluster.launcher=megatron-lm")
# A Bridge config under Megatron FSDP (dist's switch: Bridge turns ddp's on with it)
MFSDP = S(MOE, "dist.use_megatron_fsdp=true")


@dataclass(frozen=True)
class Case:
    sets: tuple[str, ...]
    gpu: str | None = None
    gpus: int | None = None
    derived: dict = field(default_factory=dict)
    context: str = "check"


CASES: dict[str, Case] = {
    "fit.does_not_fit": Case(MOE, "h100", 8, {"fits": False, "peak_bytes": 96 << 30, "capacity_bytes": 78 << 30}),
    "fit.selective_before_full": Case(S(MOE, "model.recompute_granularity=full", "model.recompute_method=uniform",
                                       "model.recompute_num_layers=1")),
    "fit.full_recompute_needs_method": Case(S(MOE, "model.recompute_granularity=full")),
    "fit.unknown_recompute_module": Case(S(MOE, "model.recompute_granularity=selective",
                                           "model.recompute_modules=[bogus,moe_act]")),
    "fit.delayed_fp8_recompute": Case(S(MOE, "mixed_precision.fp8=hybrid", "mixed_precision.fp8_recipe=delayed",
                                        "model.recompute_granularity=selective",
                                        "model.recompute_modules=[moe_act]")),
    "fit.offload_inside_recomputed_moe": Case(S(MOE, "model.recompute_granularity=selective",
                                                "model.recompute_modules=[layernorm,moe]",
                                                "model.fine_grained_activation_offloading=true",
                                                "model.offload_modules=[moe_act]")),
    "fit.offload_before_recompute": Case(S(MOE, "optimizer.optimizer_cpu_offload=true")),
    "fit.host_memory_unchecked": Case(S(MOE, "optimizer.optimizer_cpu_offload=true"), "b300", 16,
                                      derived={"host_unchecked_bytes": 300 * 2**30}),
    "fit.fake_process_group": Case(MOE, "h100", 16),
    "fit.order": Case(S(MOE, TE_GRAPHS, "model.cuda_graph_scope=[attn]"), derived={"fits": False}),
    "scale.world_size_attention": Case(S(MOE, "model.tensor_model_parallel_size=8", "model.sequence_parallel=true"),
                                       "h100", 12),
    "scale.partial_node": Case(MOE, "h100", 12),  # 4 and 16 on 8-GPU nodes stay silent: test_rule_cases
    "scale.world_size_experts": Case(S(MOE, "model.expert_model_parallel_size=32"), "h100", 16),
    "scale.experts_divisible": Case(S(MOE, "model.num_moe_experts=60", "model.expert_model_parallel_size=8")),
    "shape.heads_divisible_by_tp": Case(S(MOE, "model.num_attention_heads=12", "model.tensor_model_parallel_size=8")),
    "shape.query_groups_vs_tp": Case(S(MOE, "model.num_attention_heads=24", "model.num_query_groups=6",
                                       "model.tensor_model_parallel_size=4")),
    "shape.ffn_divisible_by_tp": Case(S(MOE, "model.moe_layer_freq=2", "model.ffn_hidden_size=1001",
                                        "model.tensor_model_parallel_size=2")),
    "shape.shared_expert_divisible_by_tp": Case(S(MOE, "model.moe_shared_expert_intermediate_size=1001",
                                                  "model.tensor_model_parallel_size=2")),
    "shape.moe_ffn_divisible_by_etp": Case(S(MOE, "model.moe_ffn_hidden_size=1001",
                                             "model.expert_model_parallel_size=2",
                                             "model.expert_tensor_parallel_size=2")),
    "model.moe_layer_freq_length": Case(S(MOE, "model.num_layers=4", "model.moe_layer_freq=[1,0]")),
    "model.topk_over_experts": Case(S(MOE, "model.moe_router_topk=80")),
    "env.cpu_offload_v1": Case(S(MOE, "model.fine_grained_activation_offloading=true",
                                 "model.offload_modules=[moe_act]")),
    "env.ep_overlap_connections": Case(S(EP_OVERLAP, "env.CUDA_DEVICE_MAX_CONNECTIONS=1")),
    "train.one_training_length": Case(S(MOE, "train.train_iters=100", "train.train_samples=6400")),
    "model.seq_length_matches_dataset": Case(S(MOE, "model.seq_length=8192", "dataset.seq_length=4096")),
    "scale.maximize_dp": Case(MOE, derived={"fits_with_less_model_parallel": True,
                                            "less_model_parallel_layout": {"model.pipeline_model_parallel_size": 1}}),
    # 25 stages over PP 2 (a user's typo of DeepSeek-V3's string): Megatron-Core asserts PP divides the stages
    "pipeline.layout_stages_divisible": Case(S(MOE, "model.pipeline_model_parallel_size=2",
                                               "model.pipeline_model_parallel_layout=Et*3|(tt|)*22t|L")),
    # DeepSeek-V3's GB200 recipe string (16 stages over PP 4: VPP 4) beside a VPP of 3
    "pipeline.vpp_matches_layout": Case(S(MOE, "model.pipeline_model_parallel_size=4",
                                          "model.pipeline_model_parallel_layout=Et*3|(tt|)*29m|L",
                                          "model.virtual_pipeline_model_parallel_size=3")),
    "scale.tp_outside_nvlink": Case(S(MOE, "model.tensor_model_parallel_size=16", "model.sequence_parallel=true"),
                                    "h100", 32),
    # 8 KV groups (Megatron's default: one per head when unset would be 32) at TP 16
    "scale.tp_past_kv_groups": Case(S(MOE, "model.num_attention_heads=32", "model.num_query_groups=8",
                                      "model.tensor_model_parallel_size=16", "model.sequence_parallel=true"),
                                    "h100", 32),
    "scale.ep_outside_nvlink": Case(S(MOE, "model.expert_model_parallel_size=16"), "h100", 16),
    # GB200 past the rack: HybridEP refused beyond 72 ranks, DeepEP on no Grace-Blackwell, so only a smaller EP
    "scale.ep_outside_rack": Case(S(MOE, "model.num_moe_experts=256", "model.expert_model_parallel_size=128"),
                                  "gb200", 512),
    "scale.pp_without_vpp": Case(S(MOE, "model.pipeline_model_parallel_size=2")),
    # expert TP given: a Bridge config silent on it runs ETP 1 under EP > 1 (finalize; configio/finalize.py)
    "scale.prefer_ep_over_etp": Case(S(MOE, "model.tensor_model_parallel_size=2", "model.sequence_parallel=true",
                                      "model.expert_model_parallel_size=4", "model.expert_tensor_parallel_size=2")),
    # gpt-oss's biased expert linears under expert TP 2 (Megatron-Core asserts ETP 1 with add_bias_linear)
    "scale.moe_bias_needs_etp1": Case(S(MOE, "model.add_bias_linear=true", "model.expert_tensor_parallel_size=2",
                                       "model.expert_model_parallel_size=4")),
    # a Nemotron-H style hybrid split by a layout string over PP 2 x VPP 2 (HybridModel reads neither)
    "scale.hybrid_split_from_pattern": Case(S(MOE, "model.is_hybrid_model=true", "model.pipeline_model_parallel_size=2",
                                             "model.virtual_pipeline_model_parallel_size=2")),
    # a hybrid pattern split into 4 segments over PP 2: Megatron-LM runs VPP 2 from it, Megatron Bridge refuses
    # Nemotron-H style hybrid split unevenly over PP 2, for a release before Megatron-Core 0.17
    "scale.hybrid_split_needs_mcore_017": Case(S(MOE, "model.is_hybrid_model=true",
                                                 "model.pipeline_model_parallel_size=2",
                                                 "model.hybrid_layer_pattern=M*-M*-|M*-"),
                                               derived={"target_release": "0.16"}),
    "scale.hybrid_vpp_bridge": Case(S(MOE, "model.is_hybrid_model=true", "model.pipeline_model_parallel_size=2",
                                      "model.hybrid_layer_pattern=M*-|M*-|M*-|M*-")),
    # DeepSeek-V3-style single MTP layer under EP overlap on PP 1: Megatron-Core < 0.18 asserts PP > 1
    "ep_overlap.mtp_pp1_needs_mcore_018": Case(S(EP_OVERLAP, "model.mtp_num_layers=1")),
    "pipeline.layers_divisible": Case(S(MOE, "model.num_layers=12", "model.pipeline_model_parallel_size=8"),
                                      "h100", 8),
    "scale.ep1_etp_needs_mcore_019": Case(S(MOE, "model.tensor_model_parallel_size=2",
                                            "model.expert_tensor_parallel_size=1"),
                                          derived={"target_release": "0.18"}),
    "scale.ep1_etp_older_mcore": Case(S(MOE, "model.tensor_model_parallel_size=2",
                                        "model.expert_tensor_parallel_size=1")),
    # Transformer Engine's attention graphs beside EP overlap, on a release before Megatron-Core 0.16
    "ep_overlap.graphs_need_mcore_016": Case(S(EP_OVERLAP, TE_GRAPHS, "model.cuda_graph_scope=[attn]"),
                                             derived={"target_release": "0.15"}),
    # EP 1: Megatron-Core's MoE layer raises at any EP (moe_layer.py MoELayer.forward), not only beside EP
    "scale.moe_tp_needs_sp": Case(S(MOE, "model.tensor_model_parallel_size=2", "model.expert_tensor_parallel_size=2")),
    "batch.gbs_divisible": Case(S(MOE, "train.global_batch_size=12", "train.micro_batch_size=1"), "h100", 8),
    # gpt-oss's shape at 128k: 16K-token shards at CP 8 would be the 4K guess's CP 32, but its sinks run CP over a2a
    # alone, which its 8 KV groups cap at CP 8: the rule asks for CP 8 (rules/derive.py _cp_sizing)
    # 16k tokens over CP 64: 256-token shards, where the 4K guess is CP 4
    "longctx.cp_oversharded": Case(S(MOE, "model.seq_length=16384", "model.context_parallel_size=64"), "h100", 64),
    "longctx.cp_sizing": Case(S(MOE, "model.num_attention_heads=64", "model.num_query_groups=8",
                                "model.softmax_type=learnable", "model.cp_comm_type=a2a", "model.seq_length=131072",
                                "model.context_parallel_size=2")),
    "longctx.cp_seq_divisible": Case(S(MOE, "model.seq_length=4100", "model.context_parallel_size=4")),
    "sp.seq_divisible_by_tp": Case(S(MOE, "model.seq_length=4097", "model.tensor_model_parallel_size=2",
                                     "model.sequence_parallel=true")),
    "longctx.dp_squeezed": Case(S(MOE, "model.seq_length=32768", "model.pipeline_model_parallel_size=8"), "h100", 8),
    "fit.core_attn_fused_attention": Case(S(MOE, "model.recompute_granularity=selective",
                                           "model.recompute_modules=[core_attn]")),
    "longctx.sdpa_recompute": Case(S(MOE, "model.seq_length=65536", "model.context_parallel_size=16",
                                    "model.recompute_granularity=selective", "model.recompute_modules=[core_attn]")),
    "longctx.high_grad_accumulation": Case(S(MOE, "model.seq_length=32768", "model.context_parallel_size=8",
                                            "train.global_batch_size=128", "train.micro_batch_size=1"), "h100", 16),
    "longctx.tp_lever_nvl72": Case(S(MOE, "model.seq_length=65536", "model.context_parallel_size=16"), "gb200", 64),
    "longctx.new_kernels": Case(S(MOE, "model.seq_length=131072", "model.context_parallel_size=32")),
    # Llama 4's 8192-token chunks at 128k (the facts estimate supplies: planner/rule_findings.py model_facts)
    "longctx.chunked_attention_bridge": Case(S(MOE, "model.seq_length=131072", "model.context_parallel_size=2"),
                                             derived={"attention_chunk": 8192, "chunk_skipped_pct": 62}),
    # Kimi-K2's Muon recipe (dist_muon) with the param-gather overlap Megatron-LM asserts off beside it
    "optimizer.layerwise_param_gather_overlap": Case(S(MOE, "optimizer.optimizer=dist_muon",
                                                       "optimizer.overlap_param_gather_with_optimizer_step=true")),
    # Kimi-K2's Muon recipe at TP 16 over 8 KV groups
    # Kimi-K2's Muon recipe (dist_muon) on Megatron-Core 0.15, whose --optimizer takes adam or sgd alone
    # (arguments.py core_v0.15.0:2197-2199)
    "optimizer.muon_needs_mcore_016": Case(S(MOE, "optimizer.optimizer=dist_muon"), derived={"target_release": "0.15"}),
    # Megatron-LM launches with Muon and DP overlap (Kimi-K2's Bridge recipes overlap the gradient reduce under it)
    "optimizer.muon_dp_overlap_needs_mcore_018": Case(S(MOE, "optimizer.optimizer=muon", "ddp.overlap_grad_reduce=true",
                                                        "cluster.launcher=megatron-lm")),
    "optimizer.dist_muon_dp_overlap_needs_mcore_017": Case(S(MOE, "optimizer.optimizer=dist_muon",
                                                             "ddp.overlap_grad_reduce=true",
                                                             "ddp.overlap_param_gather=true",
                                                             "cluster.launcher=megatron-lm")),
    "optimizer.muon_split_qkv_past_kv_groups": Case(S(MOE, "optimizer.optimizer=dist_muon",
                                                      "model.num_attention_heads=32", "model.num_query_groups=8",
                                                      "model.tensor_model_parallel_size=16",
                                                      "model.sequence_parallel=true"), "h100", 32),
    # an MXFP8 plan (Bridge's preset reuses the grad buffer) over DeepSeek-V3's BF16 perf recipe, which overlaps
    "optimizer.mxfp8_reuse_step_overlap": Case(S(MOE, "mixed_precision=bf16_with_mxfp8_mixed",
                                                 "comm_overlap.overlap_param_gather_with_optimizer_step=true"),
                                               "gb200", 8),
    "precision.mxfp8_param_gather_reuse": Case(S(MOE, "mixed_precision=bf16_with_mxfp8_mixed",
                                                 "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag=false"),
                                               "gb200", 8),
    "precision.fp8_params_without_fp8": Case(S(MOE, "mixed_precision.fp8_param_gather=true")),
    # the DeepSeek-V3 GB300 FSDP/HSDP MXFP8 perf recipes (Bridge @067f987) set cfg.model.fp8_param_gather beside the
    # preset's own; here it says otherwise than mixed_precision, which setup copies over it
    "precision.model_fp8_param_gather_overwritten": Case(S(MOE, "model.fp8_param_gather=true")),
    "precision.fp4_params_without_fp4": Case(S(MOE, "mixed_precision.fp4_param_gather=true"), "b200", 8),
    "precision.fp8_params_with_optimizer_offload": Case(S(MOE, "mixed_precision=bf16_with_mxfp8_mixed",
                                                          "optimizer.optimizer_cpu_offload=true",
                                                          "optimizer.optimizer_offload_fraction=0.5",
                                                          "optimizer.use_precision_aware_optimizer=true"),
                                                        "gb200", 8),
    "precision.fp4_params_with_optimizer_offload": Case(S(MOE, "mixed_precision=bf16_with_nvfp4_mixed",
                                                          "optimizer.optimizer_cpu_offload=true",
                                                          "optimizer.optimizer_offload_fraction=0.5",
                                                          "optimizer.use_precision_aware_optimizer=true"),
                                                        "b200", 8),
    "dispatcher.flex_without_backend": Case(S(MOE, "model.expert_model_parallel_size=8",
                                              "model.moe_token_dispatcher_type=flex",
                                              "model.moe_flex_dispatcher_backend=null"), "h100", 8),
    # Nemotron-3 Nano's Mamba-2 mixer (64 heads, 8 groups) at TP4: 16 heads a rank cannot split over CP 32
    "cp.mamba_heads": Case(S(MOE, "model.hybrid_layer_pattern=MEM*E", "model.hidden_size=2688",
                             "model.mamba_num_heads=64", "model.mamba_num_groups=8", "model.seq_length=131072",
                             "model.tensor_model_parallel_size=4", "model.context_parallel_size=32")),
    # Qwen3-Next's gated delta-net (16 key, 32 value heads) at TP4: 4 key heads a rank cannot split over CP 8
    "cp.gdn_needs_mcore_018": Case(S(MOE, "model.experimental_attention_variant=gated_delta_net",
                                     "model.linear_num_key_heads=16", "model.linear_num_value_heads=32",
                                     "model.seq_length=65536", "model.context_parallel_size=2")),
    "cp.gdn_heads": Case(S(MOE, "model.experimental_attention_variant=gated_delta_net",
                           "model.linear_num_key_heads=16", "model.linear_num_value_heads=32",
                           "model.seq_length=131072", "model.tensor_model_parallel_size=4",
                           "model.context_parallel_size=8")),
    # Qwen3-235B-A22B's 64 heads / 4 KV groups at TP4: one group per rank, so a2a cannot split it over CP 8
    "cp.dsa_allgather": Case(S(MOE, "model.experimental_attention_variant=dsa", "model.multi_latent_attention=true",
                               "model.seq_length=131072", "model.context_parallel_size=4")),
    "cp.a2a_heads": Case(S(MOE, "model.num_attention_heads=64", "model.num_query_groups=4", "model.seq_length=131072",
                           "model.tensor_model_parallel_size=4", "model.context_parallel_size=8",
                           "model.cp_comm_type=a2a")),
    # no sizes; its fix offers sizes whose a2a group splits the heads stated here (Qwen3-30B-A3B's 32 / 4 groups)
    "cp.hcp_sizes": Case(S(MOE, "model.seq_length=131072", "model.context_parallel_size=8",
                           "model.num_attention_heads=32", "model.num_query_groups=4", "model.cp_comm_type=a2a+p2p")),
    # Qwen3-30B-A3B's 32 heads / 4 KV groups at TP2: 2 groups a rank, which an a2a group of 4 cannot split (CP 8 as
    # [4, 2]); Bridge's HCP guide: a2a only within a sub-group small enough to fit within the KV head count
    "cp.hcp_a2a_heads": Case(S(MOE, "model.num_attention_heads=32", "model.num_query_groups=4",
                               "model.seq_length=131072", "model.tensor_model_parallel_size=2",
                               "model.context_parallel_size=8", "model.cp_comm_type=a2a+p2p",
                               "model.hierarchical_context_parallel_sizes=[4,2]")),
    "cp.sinks_need_a2a": Case(S(MOE, "model.softmax_type=learnable", "model.seq_length=65536",
                                "model.context_parallel_size=2")),
    # DeepSeek-V3's MLA at CP 8 over a2a, which Transformer Engine before 2.15 refuses
    "cp.mla_exchange_needs_te_215": Case(S(MOE, "model.num_attention_heads=128", "model.multi_latent_attention=true",
                                           "model.seq_length=131072", "model.context_parallel_size=8",
                                           "model.cp_comm_type=a2a")),
    # DeepSeek-V3 (MLA, 128 heads) at CP 32 on H100: the p2p ring spans 4 nodes
    "cp.p2p_crosses_nvlink": Case(S(MOE, "model.num_attention_heads=128", "model.multi_latent_attention=true",
                                    "model.seq_length=131072", "model.context_parallel_size=32"), "h100", 256,
                                  context="explain"),
    "dispatcher.flex_activation": Case(S(MOE, "model.moe_flex_dispatcher_backend=hybridep")),
    "dispatcher.ncclep_needs_flex": Case(S(MOE, "model.moe_token_dispatcher_type=alltoall",
                                           "model.moe_flex_dispatcher_backend=ncclep")),
    "dispatcher.allgather_with_ep": Case(S(MOE, "model.moe_token_dispatcher_type=allgather",
                                          "model.expert_model_parallel_size=8")),
    "dispatcher.deepep_needs_ep": Case(S(MOE, "model.moe_token_dispatcher_type=flex",
                                        "model.moe_flex_dispatcher_backend=deepep")),
    "dispatcher.deepep_platform": Case(S(MOE, "model.moe_token_dispatcher_type=flex",
                                        "model.moe_flex_dispatcher_backend=deepep",
                                        "model.expert_model_parallel_size=8"),
                                       "gb200", 8),
    # hybridep_platform needs a non-NVIDIA GPU: the test writes a cluster .toml (see test_rule_cases.py).
    "dispatcher.hybridep_platform": Case(S(MOE, "model.moe_token_dispatcher_type=flex",
                                          "model.moe_flex_dispatcher_backend=hybridep",
                                          "model.expert_model_parallel_size=8"), "@cdna3", 8),
    "dispatcher.platform_default": Case(S(MOE, "model.expert_model_parallel_size=8"), "h100", 8),
    "dispatcher.hybridep_topology": Case(S(MOE, "model.moe_token_dispatcher_type=flex",
                                          "model.moe_flex_dispatcher_backend=hybridep",
                                          "model.expert_model_parallel_size=8"), "h100", 8),
    "dispatcher.hybridep_ranks_env": Case(S(MOE, "model.moe_token_dispatcher_type=flex",
                                           "model.moe_flex_dispatcher_backend=hybridep",
                                           "model.expert_model_parallel_size=16",
                                           "env.NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=16"), "h100", 16),
    "dispatcher.hybridep_ranks_env_missing": Case(S(MOE, "model.moe_token_dispatcher_type=flex",
                                                   "model.moe_flex_dispatcher_backend=hybridep",
                                                   "model.expert_model_parallel_size=16"), "h100", 16),
    "dispatcher.hybridep_ep_exceeds_domain": Case(S(MOE, "model.num_moe_experts=256",
                                                   "model.moe_token_dispatcher_type=flex",
                                                   "model.moe_flex_dispatcher_backend=hybridep",
                                                   "model.expert_model_parallel_size=128"), "gb200", 128),
    "dispatcher.deepep_sms": Case(S(MOE, "model.moe_token_dispatcher_type=flex",
                                   "model.moe_flex_dispatcher_backend=deepep", "model.expert_model_parallel_size=8")),
    "dispatcher.hybridep_sms": Case(S(MOE, "model.moe_token_dispatcher_type=flex",
                                     "model.moe_flex_dispatcher_backend=hybridep",
                                     "model.expert_model_parallel_size=8"),
                                    "h100", 8),
    "dispatcher.hybridep_sms_bound": Case(S(MOE, "model.moe_token_dispatcher_type=flex",
                                           "model.moe_flex_dispatcher_backend=hybridep",
                                           "model.expert_model_parallel_size=8", "model.moe_hybridep_num_sms=24"),
                                          "gb200", 8),
    "dispatcher.hybridep_sms_range": Case(S(MOE, "model.moe_token_dispatcher_type=flex",
                                           "model.moe_flex_dispatcher_backend=hybridep",
                                           "model.expert_model_parallel_size=8", "model.moe_hybridep_num_sms=48")),
    "dispatcher.force_balance_benchmark": Case(MOE, context="diagnose"),
    # Megatron-Core: random router logits, "only for benchmark" (transformer_config.py:812-814 @core_v0.19.0)
    "dispatcher.force_balance_not_for_training": Case(S(MOE, "model.moe_router_force_load_balancing=true")),
    "ep_overlap.needs_ep": Case(S(MOE, "comm_overlap.overlap_moe_expert_parallel_comm=true")),
    # a dense model that says so (overrides silent on the experts leave them to the recipe: skipped)
    "ep_overlap.needs_experts": Case(("mixed_precision.bf16=true", "model.expert_model_parallel_size=2",
                                      "model.moe_token_dispatcher_type=alltoall", "model.num_moe_experts=null",
                                      "comm_overlap.overlap_moe_expert_parallel_comm=true")),
    "ep_overlap.dispatcher": Case(S(EP_OVERLAP, "model.moe_token_dispatcher_type=allgather")),
    "ep_overlap.precision": Case(S(EP_OVERLAP, "mixed_precision.bf16=false")),
    "ep_overlap.pp_needs_vpp": Case(S(EP_OVERLAP, "model.pipeline_model_parallel_size=2")),
    "ep_overlap.shared_expert_overlap": Case(S(EP_OVERLAP, "model.moe_shared_expert_intermediate_size=2048",
                                              "model.moe_shared_expert_overlap=true")),
    "ep_overlap.full_recompute": Case(S(EP_OVERLAP, "model.recompute_granularity=full",
                                       "model.recompute_method=uniform", "model.recompute_num_layers=1")),
    "ep_overlap.moe_recompute": Case(S(EP_OVERLAP, "model.recompute_granularity=selective",
                                      "model.recompute_modules=[moe,layernorm]")),
    "ep_overlap.mtp_layers": Case(S(EP_OVERLAP, "model.mtp_num_layers=2")),
    "model.mtp_beyond_checkpoint": Case(S(MOE, "model.mtp_num_layers=2"), derived={"mtp_checkpoint_layers": 1}),
    "ep_overlap.graph_scope_moe": Case(S(EP_OVERLAP, TE_GRAPHS, "model.cuda_graph_scope=[moe]")),
    "ep_overlap.delay_wgrad_needs_overlap": Case(S(MOE, "model.expert_model_parallel_size=8",
                                                  "comm_overlap.delay_wgrad_compute=true")),
    "ep_overlap.delay_wgrad_graph_scope": Case(S(EP_OVERLAP, "comm_overlap.delay_wgrad_compute=true", TE_GRAPHS,
                                                "model.cuda_graph_scope=[attn,moe_router,moe_preprocess]",
                                                "model.add_bias_linear=false")),
    "ep_overlap.delay_wgrad_graph_gaf": Case(S(EP_OVERLAP, "comm_overlap.delay_wgrad_compute=true", TE_GRAPHS,
                                              "model.cuda_graph_scope=[attn]", "model.add_bias_linear=false",
                                              "model.gradient_accumulation_fusion=false")),
    "ep_overlap.delay_wgrad_graph_bias": Case(S(EP_OVERLAP, "comm_overlap.delay_wgrad_compute=true", TE_GRAPHS,
                                               "model.cuda_graph_scope=[attn]", "model.add_bias_linear=true")),
    "ep_overlap.eager_on_blackwell": Case(EP_OVERLAP, "gb200", 64, context="explain"),
    "ep_overlap.candidate": Case(S(MOE, "model.expert_model_parallel_size=16"), "h100", 16, context="explain"),
    "overlap.grad_reduce": Case(S(MOE, "ddp.use_distributed_optimizer=true", "ddp.overlap_grad_reduce=false"),
                                "h100", 8),
    "overlap.tp_comm": Case(S(MOE, "model.tensor_model_parallel_size=2", "model.sequence_parallel=true"),
                            context="explain"),
    "overlap.tp_comm_needs_sp": Case(S(MOE, "comm_overlap.tp_comm_overlap=true")),
    # Megatron-LM turns sequence parallelism off at TP=1, then asserts it for TP overlap
    "overlap.tp_comm_quantizer": Case(S(MOE, "model.tensor_model_parallel_size=2", "model.sequence_parallel=true",
                                        "comm_overlap.tp_comm_overlap=true", "mixed_precision.fp8=e4m3",
                                        "mixed_precision.fp8_recipe=blockwise")),
    "cudagraph.full_iteration_dropless": Case(S(MOE, "model.cuda_graph_impl=full_iteration")),
    "cudagraph.full_iteration_nan_check": Case(S(MOE, "model.cuda_graph_impl=full_iteration")),
    # Bridge's full-iteration recipe with the experts split over two ranks each (TEGroupedMLP asserts)
    "compute.op_fuser_expert_tp": Case(S(FULL_ITERATION_HYBRIDEP, "model.expert_tensor_parallel_size=2")),
    # the op fuser without the stash, offloading the experts' FC1 input
    "compute.op_fuser_expert_offload": Case(S(MOE, "model.use_transformer_engine_op_fuser=true",
                                              "model.fine_grained_activation_offloading=true",
                                              "model.offload_modules=[expert_fc1]", "env.NVTE_CPU_OFFLOAD_V1=1")),
    # Nemotron-H's squared ReLU (not gated) under the op fuser without the kernel's weighted form
    "compute.op_fuser_activation": Case(S(MOE, "model.use_transformer_engine_op_fuser=true",
                                          "model.gated_linear_unit=false",
                                          "model.use_fused_weighted_squared_relu=false")),
    # Llama 4's router probability on the expert input under the op fuser
    "compute.op_fuser_probs_on_input": Case(S(MOE, "model.use_transformer_engine_op_fuser=true",
                                              "model.moe_router_topk=1", "model.moe_apply_probs_on_input=true")),
    "compute.te_cross_entropy": Case(S(MOE, "model.cross_entropy_fusion_impl=te", "cluster.launcher=megatron-lm")),
    # forced balance (random logits) still varies the tokens per expert: DeepEP's counts are dynamic
    "cudagraph.full_iteration_static_experts": Case(S(MOE, "model.cuda_graph_impl=full_iteration",
                                                      "model.moe_router_force_load_balancing=true",
                                                      "model.moe_token_dispatcher_type=flex",
                                                      "model.moe_flex_dispatcher_backend=deepep")),
    # Bridge's full-iteration recipe (perf_recipes/deepseek/common.py @067f987) with its TE op fuser left off
    "dispatcher.rank_capacity_needs_op_fuser": Case(S(FULL_ITERATION_HYBRIDEP,
                                                      "model.use_transformer_engine_op_fuser=false")),
    # the same recipe moved to DeepEP (the H100 backend): its budget stays behind
    "dispatcher.rank_capacity_needs_hybridep": Case(S(FULL_ITERATION_HYBRIDEP,
                                                      "model.moe_flex_dispatcher_backend=deepep")),
    "dispatcher.rank_capacity_grouped_tensor_needs_newer_mcore": Case(S(FULL_ITERATION_HYBRIDEP,
                                                                        "model.use_transformer_engine_op_fuser=false",
                                                                        "model.moe_use_grouped_tensor=true")),
    # the same recipe with its budget unset and the paged stash left on
    "dispatcher.paged_stash_needs_rank_capacity": Case(S(FULL_ITERATION_HYBRIDEP,
                                                         "model.moe_expert_rank_capacity_factor=null")),
    # the same recipe with the layer-wise CPU activation offload turned on
    "dispatcher.paged_stash_cpu_offloading": Case(S(FULL_ITERATION_HYBRIDEP, "model.cpu_offloading=true")),
    # the same recipe offloading the routed experts' activation input, which the stash already holds
    "dispatcher.paged_stash_expert_offload": Case(S(FULL_ITERATION_HYBRIDEP,
                                                    "model.fine_grained_activation_offloading=true",
                                                    "model.offload_modules=[core_attn,moe_act]",
                                                    "env.NVTE_CPU_OFFLOAD_V1=1")),
    "cudagraph.moe_scope_dropless": Case(S(MOE, TE_GRAPHS, "model.cuda_graph_scope=[moe]")),
    "cudagraph.dropless_start_scope": Case(S(MOE, TE_GRAPHS, "model.cuda_graph_scope=[moe_router,moe_preprocess]")),
    "cudagraph.preprocess_needs_router": Case(S(MOE, TE_GRAPHS, "model.cuda_graph_scope=[attn,moe_preprocess]")),
    # a transformer of 8 MoE layers (Megatron-Core's default moe_layer_freq 1: no dense MLP, no Mamba mixer)
    "cudagraph.scope_captures_nothing": Case(S(MOE, TE_GRAPHS, "model.num_layers=8",
                                               "model.cuda_graph_scope=[attn,mamba,mlp]")),
    "cudagraph.full_recompute": Case(S(MOE, TE_GRAPHS, "model.cuda_graph_scope=[attn]",
                                      "model.recompute_granularity=full", "model.recompute_method=uniform",
                                      "model.recompute_num_layers=1")),
    "cudagraph.moe_recompute_router": Case(S(MOE, TE_GRAPHS, "model.cuda_graph_scope=[attn,moe_router]",
                                            "model.recompute_granularity=selective", "model.recompute_modules=[moe]")),
    "cudagraph.full_iteration_scope_te": Case(S(MOE, TE_GRAPHS, "model.cuda_graph_scope=[attn,full_iteration]")),
    # Bridge's list scope (attn beside full_iteration, both names 0.15 knows) on Megatron-Core 0.15, whose
    # cuda_graph_scope is one string (transformer_config.py core_v0.15.0:646)
    "cudagraph.scope_list_needs_mcore_016": Case(S(MOE, "model.cuda_graph_impl=local",
                                                   "model.cuda_graph_scope=[attn,full_iteration]"),
                                                 derived={"target_release": "0.15"}),
    # Bridge's one-item list scope (as Bridge 0.16+ recipes write [attn]) on Megatron-Core 0.15, whose str
    # cuda_graph_scope then holds ['attn'], which Transformer Engine's graph helper refuses (cuda_graphs.py
    # core_v0.15.0:1357 asserts 'full' or 'attn')
    "cudagraph.scope_as_list_needs_mcore_016": Case(S(MOE, TE_GRAPHS, "model.cuda_graph_scope=[attn]"),
                                                    derived={"target_release": "0.15"}),
    "cudagraph.local_scoped": Case(S(MOE, "model.cuda_graph_impl=local", "model.cuda_graph_scope=[attn]")),
    "cudagraph.variable_length": Case(S(MOE, TE_GRAPHS, "model.cuda_graph_scope=[attn]",
                                       "model.variable_seq_lengths=true")),
    # GLM-5 on Megatron-Core's default DSA backend (Bridge's GLM-5 recipes set cudnn)
    "compute.dsa_unfused": Case(S(MOE, "model.multi_latent_attention=true",
                                  "model.experimental_attention_variant=dsa")),
    # GLM-5's attention under TE-scoped graphs (Bridge's GLM-5 recipes run none)
    "cudagraph.dsa_attention": Case(S(MOE, TE_GRAPHS, "model.cuda_graph_scope=[attn,moe_router,moe_preprocess]",
                                      "model.multi_latent_attention=true", "model.experimental_attention_variant=dsa")),
    "cudagraph.memory_budget": Case(S(MOE, TE_GRAPHS, "model.cuda_graph_scope=[attn,moe_router,moe_preprocess]")),
    "precision.router_fp32": Case(S(MOE, "model.moe_router_dtype=null")),
    "precision.fp8_fp4_exclusive": Case(S(MOE, "mixed_precision.fp8=e4m3", "mixed_precision.fp4=e2m1")),
    "precision.bf16_fp16_exclusive": Case(S(MOE, "mixed_precision.fp16=true")),
    "precision.mxfp8_needs_blackwell": Case(S(MOE, "mixed_precision.fp8=e4m3", "mixed_precision.fp8_recipe=mxfp8"),
                                            "h100", 8),
    "precision.fp8_output_proj_needs_mxfp8": Case(S(MOE, "mixed_precision.fp8=e4m3",
                                                    "mixed_precision.fp8_recipe=blockwise",
                                                    "model.fp8_output_proj=true"), "h100", 8),
    "precision.fp8_unsupported": Case(S(MOE, "mixed_precision.fp8=hybrid"), "a100", 8),
    # Transformer Engine asserts on an FP8 GEMM's local input of 4,097 tokens (seq x MBS at TP 1, CP 1)
    "precision.gemm_shapes": Case(S(MOE, "mixed_precision.fp8=e4m3", "mixed_precision.fp8_recipe=blockwise",
                                    "model.seq_length=4097", "train.micro_batch_size=1"), "h100", 8),
    "precision.fp4_needs_blackwell": Case(S(MOE, "mixed_precision.fp4=e2m1"), "h100", 8),
    "precision.fp8_hopper_start": Case(S(MOE, "mixed_precision.fp8=hybrid", "mixed_precision.fp8_recipe=tensorwise"),
                                       "h100", 8),
    "precision.fp8_blackwell_start": Case(S(MOE, "mixed_precision.fp8=hybrid", "mixed_precision.fp8_recipe=blockwise"),
                                          "b200", 8),
    "precision.nvfp4_after_stable": Case(S(MOE, "mixed_precision.fp4=e2m1"), "b200", 8),
    "precision.fp8_mfu": Case(S(MOE, "mixed_precision.fp8=e4m3"), context="explain"),
    "host.manual_gc": Case(S(MOE, "train.manual_gc=false")),
    "compute.grouped_gemm": Case(S(MOE, "model.moe_grouped_gemm=false")),
    "platform.limiting_wall": Case(MOE, "gb200", 4, context="explain"),
    "wall.memory": Case(MOE, derived={"dominant_wall": "memory"}, context="diagnose"),
    "wall.communication": Case(MOE, derived={"dominant_wall": "communication"}, context="diagnose"),
    "wall.host": Case(MOE, derived={"dominant_wall": "host"}, context="diagnose"),
    "wall.compute": Case(MOE, derived={"dominant_wall": "compute"}, context="diagnose"),
    "env.cuda_device_max_connections": Case(S(MOE, "model.tensor_model_parallel_size=2", "model.sequence_parallel=true",
                                             "env.CUDA_DEVICE_MAX_CONNECTIONS=8"), "h100", 8),
    # TP2 on Hopper, where Megatron-LM asks for 1 connection without an FSDP (env.cuda_device_max_connections)
    "env.fsdp_connections": Case(S(FSDP2_MLM, "model.tensor_model_parallel_size=2", "model.sequence_parallel=true",
                                   "env.CUDA_DEVICE_MAX_CONNECTIONS=1"), "h100", 8),
    "overlap.param_gather_needs_dist_opt": Case(S(MOE, "ddp.overlap_param_gather=true", "ddp.overlap_grad_reduce=true",
                                                  "ddp.use_distributed_optimizer=false",
                                                  "optimizer.use_distributed_optimizer=false",
                                                  "cluster.launcher=megatron-lm")),
    "precision.fp8_params_need_distributed_optimizer": Case(S(
        MOE, "mixed_precision=bf16_with_fp8_current_scaling_mixed", "ddp.overlap_param_gather=false",
        "ddp.use_distributed_optimizer=false", "optimizer.use_distributed_optimizer=false",
        "cluster.launcher=megatron-lm")),
    "overlap.param_gather_needs_grad_reduce": Case(S(MOE, "ddp.overlap_param_gather=true",
                                                     "ddp.use_distributed_optimizer=true",
                                                     "cluster.launcher=megatron-lm")),
    # Bridge re-enables the distributed optimizer for both when the recipe's ddp side stays true
    "optimizer.dist_opt_out_of_sync": Case(S(MOE, "optimizer.use_distributed_optimizer=false")),
    "optimizer.cpu_offload_needs_precision_aware": Case(S(MOE, "optimizer.optimizer_cpu_offload=true",
                                                          "optimizer.optimizer_offload_fraction=1.0")),
    "optimizer.low_precision_state_needs_precision_aware": Case(S(MOE, "optimizer.exp_avg_dtype=bf16",
                                                                  "optimizer.exp_avg_sq_dtype=bf16")),
    # Megatron-LM's validate_args under --use-torch-fsdp2 (arguments.py, core_v0.16.0-core_v0.18.2)
    "fsdp.torch_fsdp2_expert_parallel": Case(S(FSDP2_MLM, "model.expert_model_parallel_size=8")),
    "fsdp.torch_fsdp2_pipeline_parallel": Case(S(FSDP2_MLM, "model.pipeline_model_parallel_size=2")),
    "fsdp.torch_fsdp2_distributed_optimizer": Case(S(FSDP2_MLM, "ddp.use_distributed_optimizer=true",
                                                     "optimizer.use_distributed_optimizer=true")),
    "fsdp.torch_fsdp2_gradient_accumulation_fusion": Case(FSDP2_MLM),  # Megatron-LM's default is on
    "fsdp.torch_fsdp2_tied_embeddings": Case(S(FSDP2_MLM, "model.share_embeddings_and_output_weights=true")),
    "fsdp.torch_fsdp2_fp16": Case(S(FSDP2_MLM, "mixed_precision.bf16=false", "mixed_precision.fp16=true")),
    "fsdp.muon": Case(S(FSDP2_MLM, "optimizer.optimizer=dist_muon")),
    "fsdp.torch_fsdp2_drops_fp8_params": Case(S(FSDP2_MLM, "mixed_precision.fp8=hybrid",
                                                "mixed_precision.fp8_recipe=tensorwise",
                                                "mixed_precision.fp8_param_gather=true")),
    "model.moe_dropout": Case(S(MOE, "cluster.launcher=megatron-lm", "model.attention_dropout=0.0")),
    "fsdp.torch_fsdp2_ckpt_format": Case(S(FSDP2_MLM, "checkpoint.ckpt_format=torch")),
    # Megatron FSDP: Megatron-LM's launch asserts the format whatever it saves; Bridge only where it saves or loads
    "fsdp.megatron_fsdp_ckpt_format": Case(S(MFSDP, "checkpoint.save=/ckpt")),
    "fsdp.fsdp_dtensor_needs_megatron_fsdp": Case(S(MOE, "checkpoint.ckpt_format=fsdp_dtensor",
                                                    "cluster.launcher=megatron-lm")),
    "fsdp.megatron_fsdp_no_shard": Case(S(MFSDP, "checkpoint.ckpt_format=fsdp_dtensor",
                                          "ddp.data_parallel_sharding_strategy=no_shard")),
    # 8 GPUs at TP 8 (ETP 8 inherited): DP 1, EDP 1
    "fsdp.megatron_fsdp_one_rank": Case(S(MFSDP, "checkpoint.ckpt_format=fsdp_dtensor",
                                          "model.tensor_model_parallel_size=8", "model.sequence_parallel=true"),
                                        gpus=8),
    "fsdp.outer_optim_needs_hybrid_full_sharding": Case(S(MFSDP, "checkpoint.ckpt_format=fsdp_dtensor",
                                                          "ddp.outer_dp_sharding_strategy=optim",
                                                          "ddp.num_distributed_optimizer_instances=2",
                                                          "ddp.data_parallel_sharding_strategy=optim_grads")),
    # Megatron FSDP's wrapper beside EP overlap (mcore_fsdp_adapter.py @core_v0.18.2): NCCL user buffers alone, which
    # turn double buffering on after its check, and per-layer TE graphs
    "fsdp.ep_overlap_double_buffer": Case(S(EP_OVERLAP, "dist.use_megatron_fsdp=true",
                                            "checkpoint.ckpt_format=fsdp_dtensor", "ddp.nccl_ub=true")),
    "fsdp.ep_overlap_layer_graphs": Case(S(EP_OVERLAP, "dist.use_megatron_fsdp=true",
                                           "checkpoint.ckpt_format=fsdp_dtensor", TE_GRAPHS,
                                           "model.cuda_graph_scope=[attn]")),
    "fsdp.nccl_ub_forces_double_buffer": Case(S(MFSDP, "checkpoint.ckpt_format=fsdp_dtensor", "ddp.nccl_ub=true",
                                                "ddp.fsdp_double_buffer=false")),
    # Bridge's full-iteration recipe (gated experts) launched without its env_vars' CuTe DSL switch
    "env.op_fuser_cutedsl": Case(S(FULL_ITERATION_HYBRIDEP, "model.gated_linear_unit=true")),
    "env.nccl_ub_expandable_segments": Case(S(MFSDP, "checkpoint.ckpt_format=fsdp_dtensor", "ddp.nccl_ub=true",
                                              "env.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")),
}

# Rules whose condition rests on an estimator/profiler fact: applying the fix cannot change that fact.
FIX_NEEDS_NEW_FACTS = {"fit.does_not_fit", "fit.order", "scale.maximize_dp", "wall.memory", "wall.communication",
                       "wall.host", "wall.compute", "fit.host_memory_unchecked"}

# Real Megatron Bridge recipes (tests/fixtures/bridge, each file cites repo, path, commit) and their launch targets.
RECIPES = {
    "qwen3_30b_a3b_pretrain_16gpu_h100_bf16.yaml": ("h100", 16),
    "qwen3_30b_a3b_pretrain_8gpu_h100_bf16.yaml": ("h100", 8),
    "deepseek_v3_pretrain_256gpu_gb200_bf16.yaml": ("gb200", 256),
}
