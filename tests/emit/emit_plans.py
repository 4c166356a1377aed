"""Planned configs (layout + knobs, as `moetune plan` hands them to emit), modelled on the seeds' examples."""

PLANS = {
    # seeds/004 + 000: DeepSeek-V3 on GB200 NVL72 -- HybridEP, TE-scoped graphs, EP overlap with VPP.
    "dsv3_gb200_hybridep": {
        "cluster.gpu": "gb200", "cluster.num_gpus": 256,
        "model.num_moe_experts": 256, "model.moe_router_topk": 8, "model.moe_grouped_gemm": True,
        "model.moe_router_dtype": "fp32", "model.multi_latent_attention": True,
        "model.tensor_model_parallel_size": 1, "model.context_parallel_size": 1,
        "model.pipeline_model_parallel_size": 4, "model.virtual_pipeline_model_parallel_size": 4,
        "model.expert_model_parallel_size": 64, "model.expert_tensor_parallel_size": 1,
        "model.sequence_parallel": False, "model.seq_length": 4096,
        "model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": "hybridep",
        "model.moe_hybridep_num_sms": 32, "model.moe_shared_expert_overlap": False,
        "model.recompute_granularity": "selective", "model.recompute_modules": ["mla_up_proj", "moe_act"],
        "model.cuda_graph_impl": "transformer_engine",
        "model.cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"],
        "model.add_bias_linear": False, "model.gradient_accumulation_fusion": True,
        "comm_overlap.overlap_moe_expert_parallel_comm": True, "comm_overlap.delay_wgrad_compute": True,
        "ddp.overlap_grad_reduce": True, "ddp.overlap_param_gather": True, "ddp.use_distributed_optimizer": True,
        "mixed_precision.bf16": True, "mixed_precision.fp8": "e4m3", "mixed_precision.fp8_recipe": "mxfp8",
        "train.global_batch_size": 4096, "train.micro_batch_size": 1, "train.manual_gc": True,
    },
    # seeds/002: DSV3-style 128K long context on H100 -- CP 32, DeepEP, selective recompute, optimizer offload.
    "longctx_h100_deepep": {
        "cluster.gpu": "h100", "cluster.num_gpus": 8192,
        "model.num_moe_experts": 256, "model.moe_grouped_gemm": True, "model.moe_router_dtype": "fp32",
        "model.tensor_model_parallel_size": 1, "model.context_parallel_size": 32,
        "model.pipeline_model_parallel_size": 8, "model.virtual_pipeline_model_parallel_size": 4,
        "model.expert_model_parallel_size": 32, "model.expert_tensor_parallel_size": 1,
        "model.seq_length": 131072,
        "model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": "deepep",
        "model.moe_deepep_num_sms": 24,
        "model.recompute_granularity": "selective",
        "model.recompute_modules": ["mla_up_proj", "layernorm", "moe", "mlp"],
        "optimizer.optimizer_cpu_offload": True, "optimizer.optimizer_offload_fraction": 0.5,
        "ddp.use_distributed_optimizer": True, "ddp.overlap_grad_reduce": True,
        "mixed_precision.bf16": True, "mixed_precision.fp8": "e4m3", "mixed_precision.fp8_recipe": "blockwise",
        "train.global_batch_size": 64, "train.micro_batch_size": 1, "train.manual_gc": True,
    },
    # seeds/000: safe bring-up on one H100 node -- alltoall, TP2 with sequence parallel, folded experts.
    "bringup_h100_alltoall": {
        "cluster.gpu": "h100", "cluster.num_gpus": 8,
        "model.num_moe_experts": 8, "model.moe_grouped_gemm": True, "model.moe_router_dtype": "fp32",
        "model.tensor_model_parallel_size": 2, "model.sequence_parallel": True,
        "model.pipeline_model_parallel_size": 1, "model.expert_model_parallel_size": 8,
        "model.expert_tensor_parallel_size": 1, "model.seq_length": 4096,
        "model.moe_token_dispatcher_type": "alltoall",
        "comm_overlap.tp_comm_overlap": True,
        "ddp.use_distributed_optimizer": True, "ddp.overlap_grad_reduce": True,
        "mixed_precision.bf16": True, "train.global_batch_size": 256, "train.micro_batch_size": 2,
        "train.manual_gc": True,
    },
    # seeds/002 NVL72 pattern: TP=4 CP=4 EP=32 PP=4 VPP=12, HybridEP, moe_act/norm recompute, CUDA graphs.
    "qwen3_235b_gb200_longctx": {
        "cluster.gpu": "gb200", "cluster.num_gpus": 512,
        "model.num_moe_experts": 128, "model.moe_grouped_gemm": True, "model.moe_router_dtype": "fp32",
        "model.tensor_model_parallel_size": 4, "model.sequence_parallel": True, "model.context_parallel_size": 4,
        "model.pipeline_model_parallel_size": 4, "model.virtual_pipeline_model_parallel_size": 12,
        "model.expert_model_parallel_size": 32, "model.expert_tensor_parallel_size": 1, "model.seq_length": 16384,
        "model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": "hybridep",
        "model.moe_hybridep_num_sms": 32,
        "model.recompute_granularity": "selective", "model.recompute_modules": ["moe_act", "layernorm"],
        "model.cuda_graph_impl": "transformer_engine",
        "model.cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"],
        "ddp.use_distributed_optimizer": True, "ddp.overlap_grad_reduce": True,
        "mixed_precision.bf16": True, "train.global_batch_size": 512, "train.micro_batch_size": 1,
        "train.manual_gc": True, "env.NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 32,
    },
}

# Megatron-LM launches (a small DeepSeek-V3-style MoE on 64 GB200s) and the settings Megatron-LM runs them with, as its
# arguments' defaults and validate_args give them (megatron/training/arguments.py) for what each leaves out.
MLM_BASE = ("--num-layers 16 --hidden-size 2048 --ffn-hidden-size 8192 --num-attention-heads 16 --num-experts 64 "
            "--moe-ffn-hidden-size 1024 --moe-router-topk 6 --moe-grouped-gemm --moe-router-dtype fp32 "
            "--moe-layer-freq ([0]*1+[1]*15) --disable-bias-linear --seq-length 4096 --micro-batch-size 1 --bf16 "
            "--use-distributed-optimizer --tensor-model-parallel-size 2 --sequence-parallel "
            "--pipeline-model-parallel-size 4 --expert-model-parallel-size 8")
# what none of them sets: no layout string or uneven split, no CUDA graphs, no HybridEP SM cap, no capacity, ETP = TP,
# GBS = MBS x DP (64 GPUs / TP 2 / PP 4: DP 8), Megatron-LM's dropout and vocabulary padding, no DP overlap, FP32 Adam
# moments and gradient reduction
MLM_UNSET = {"model.pipeline_model_parallel_layout": None, "model.num_layers_in_first_pipeline_stage": None,
             "model.cuda_graph_impl": "none", "model.moe_hybridep_num_sms": None,
             "model.moe_expert_rank_capacity_factor": None, "model.expert_tensor_parallel_size": 2,
             "train.global_batch_size": 8, "dataset.seq_length": 4096, "model.hidden_dropout": 0.1,
             "model.make_vocab_size_divisible_by": 128, "ddp.overlap_grad_reduce": False,
             "comm_overlap.overlap_grad_reduce": False, "optimizer.use_precision_aware_optimizer": False,
             "mixed_precision.grad_reduce_in_fp32": True}
MLM_LAUNCHES = {
    "no_recompute_no_mtp": ("--moe-token-dispatcher-type alltoall",
                            {"model.recompute_granularity": None, "model.recompute_modules": None,
                             "model.mtp_num_layers": None, "model.virtual_pipeline_model_parallel_size": None}),
    "selective_recompute_with_mtp": (
        "--moe-token-dispatcher-type alltoall --recompute-granularity selective --recompute-modules moe_act layernorm "
        "--mtp-num-layers 1 --cuda-graph-impl transformer_engine --cuda-graph-scope attn",
        {"model.recompute_granularity": "selective", "model.recompute_modules": ["moe_act", "layernorm"],
         "model.mtp_num_layers": 1, "model.virtual_pipeline_model_parallel_size": None,
         # Megatron-LM turns Transformer Engine's RNG tracker on for CUDA graphs itself
         "model.cuda_graph_impl": "transformer_engine", "model.use_te_rng_tracker": True, "rng.te_rng_tracker": True}),
    "full_recompute_vpp_hybridep": (
        "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 "
        "--num-virtual-stages-per-pipeline-rank 2 --moe-token-dispatcher-type flex "
        "--moe-flex-dispatcher-backend hybridep --expert-tensor-parallel-size 1",
        {"model.recompute_granularity": "full", "model.recompute_method": "uniform", "model.recompute_modules": None,
         "model.mtp_num_layers": None, "model.virtual_pipeline_model_parallel_size": 2,
         "model.moe_flex_dispatcher_backend": "hybridep", "model.moe_deepep_num_sms": None,
         "model.expert_tensor_parallel_size": 1}),
}
