"""The two data tables: kernel-name classes and the remedy rules (with --config filtering)."""

import pytest

from moetune.profile.kernels import class_kind, classify, kernel_classes
from moetune.profile.remedies import recommend
from moetune.profile.table import remedies_table
from moetune.profile.walls import arch, decide

NAMES = [
    ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*)", None, "deepep"),
    ("void deep_ep::internode::cached_notify(int, int, int, int*, void**)", None, "deepep"),
    ("void hybrid_ep::dispatch_kernel<__nv_bfloat16, 8, 4>(hybrid_ep::Params)", None, "hybridep"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "all_to_all", "alltoall"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", None, "sendrecv"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "send", "sendrecv"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", None, "allgather"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", None, "reducescatter"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", None, "allreduce"),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", None, "other_comm"),
    ("userbuffers_fp16_sum_inplace_gpu_rr_rs", None, "reducescatter"),
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>",
     None, "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x128x128_4x1x1_kernel0_0", None,
     "attention"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", None, "gemm"),
    ("sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x128_cgasize1x2x1_warpgroupsize1x1x1", None, "gemm"),
    ("void deep_gemm::fp8_gemm_kernel<4096u, 7168u, 128u, (deep_gemm::GemmType)1>(GroupedContiguous)", None,
     "grouped_gemm"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >", None, "other"),
    # convolutions are implicit GEMMs (the HTA V100 sample trace's ResNet kernels); batch norm is not
    ("cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1", None, "gemm"),
    ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*, int)", None,
     "gemm"),
    ("void wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int, float const*, int, float*)", None,
     "gemm"),
    ("cudnn_infer_volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", None, "gemm"),
    ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(float, float, float)", None, "other"),
]


@pytest.mark.parametrize("name, collective, expected", NAMES)
def test_kernel_names(name, collective, expected):
    assert classify(name, "kernel", collective) == expected


def test_copies_by_category_and_kinds():
    assert classify("Memcpy DtoD (Device -> Device)", "gpu_memcpy") == "memcpy"
    assert classify("Memset (Device)", "gpu_memset") == "memcpy"
    assert {c.kind for c in kernel_classes()} == {"compute", "communication", "memory"}
    assert class_kind("deepep") == "communication" and kernel_classes()[-1].id == "other"


def test_every_rule_cites_a_seed_and_uses_known_walls():
    table = remedies_table()
    walls = {w["id"] for w in table["walls"]}
    assert walls == {"memory", "communication", "host_overhead", "compute"}
    for rule in table["remedies"]:
        assert rule["wall"] in walls and "seed" in rule["source"] and rule["why"]
        assert sum(k in rule for k in ("change", "variants", "action")) == 1, rule["rule"]


@pytest.mark.parametrize("cc, name", [((7, 0), "volta"), ((7, 5), "turing"), ((8, 0), "ampere"),
                                      ((8, 9), "ada"), ((9, 0), "hopper"), ((10, 0), "blackwell"), (None, "unknown")])
def test_arch(cc, name):
    assert arch(cc) == name


COMM = {"busy_share": 0.6, "exposed_comm_share": 0.3, "rank_wait_share": 0.0, "host_bound_share": 0.02,
        "exposed.alltoall": 0.3, "exposed.ep_comm": 0.3, "share.fused_ep": 0.0, "gpu.arch": "hopper",
        "gpu.nvl72": False, "moe": True}


def test_decide_orders_walls():
    assert decide(COMM)[0] == "communication"
    assert decide({**COMM, "host_bound_share": 0.5})[0] == "host_overhead"  # the larger score wins
    assert decide({**COMM, "exposed_comm_share": 0.01, "exposed.alltoall": 0.01})[0] == "compute"
    assert decide({**COMM, "oom": True})[0] == "memory"
    assert decide({**COMM, "config.model.recompute_granularity": "full"})[0] == "memory"


def test_the_memory_verdict_says_which_sign_it_read_in_words():
    """Each memory condition has its words (diagnose_remedies.yaml `says`), not the table's expression
    (`oom == True` had been printed as the reason)."""
    walls = {w["id"]: w for w in remedies_table()["walls"]}
    assert len(walls["memory"]["says"]) == len(walls["memory"]["any"])
    assert decide({**COMM, "oom": True})[1].startswith("the run hit a CUDA out-of-memory (")
    assert decide({**COMM, "alloc_retries": 3})[1].startswith("the caching allocator retried")


def test_config_drops_what_is_already_on_or_moot():
    base = {r.rule for r in recommend("communication", COMM)}
    assert {"comm.dispatcher", "comm.ep_overlap"} <= base
    on = {"comm_overlap.overlap_moe_expert_parallel_comm": True, "model.moe_shared_expert_overlap": False}
    assert "comm.ep_overlap" not in {r.rule for r in recommend("communication", COMM, on)}
    assert "comm.ep_overlap" not in {r.rule for r in recommend("communication", COMM,
                                                               {"model.expert_model_parallel_size": 1})}
    assert "comm.ep_overlap" in {r.rule for r in recommend("communication", COMM,
                                                           {"model.expert_model_parallel_size": 8})}
    assert "comm.dispatcher" not in {r.rule for r in recommend("communication", COMM,
                                                               {"model.moe_token_dispatcher_type": "flex"})}


def test_config_tailors_multiplied_values():
    host = {**COMM, "host_bound_share": 0.4}
    untailored = next(r for r in recommend("host_overhead", host) if r.rule == "host.larger_mbs")
    assert untailored.change == ["train.micro_batch_size=<2x current>"]
    tailored = next(r for r in recommend("host_overhead", host, {"train.micro_batch_size": 2})
                    if r.rule == "host.larger_mbs")
    assert tailored.overrides == {"train.micro_batch_size": 4}
    graphs = {"model.cuda_graph_impl": "transformer_engine"}
    assert "host.cuda_graphs" not in {r.rule for r in recommend("host_overhead", host, graphs)}

    # seeds/000 Phase 3's host-overhead row ends with CPU affinity tuning: emit's NUMA binding is that change
    affinity = next(r for r in recommend("host_overhead", host) if r.rule == "host.cpu_affinity")
    assert affinity.overrides == {} and affinity.change == [] and "numactl" in affinity.action

    def mbs(**config):
        found = recommend("host_overhead", host, config)
        return next((r.overrides for r in found if r.rule == "host.larger_mbs"), None)
    # the global batch splits over DP into micro-batches: the advice keeps it whole (batch.gbs_divisible), or goes
    assert mbs(**{"train.micro_batch_size": 1, "train.global_batch_size": 2, "cluster.num_gpus": 2}) is None
    assert mbs(**{"train.micro_batch_size": 1, "train.global_batch_size": 8, "cluster.num_gpus": 2}) == \
        {"train.micro_batch_size": 2}
    # GBS 24 over DP 4 (TP 2 of 8 GPUs) is 6 a rank: MBS 2 -> 3 is no multiple of 2, 6 is the least that splits it
    assert mbs(**{"train.micro_batch_size": 2, "train.global_batch_size": 24, "cluster.num_gpus": 8,
                  "model.tensor_model_parallel_size": 2}) == {"train.micro_batch_size": 6}


def test_fp8_variant_by_architecture():
    def fp8(f):
        return next((r.overrides for r in recommend("memory", f) if r.rule == "mem.fp8"), None)

    assert fp8({"gpu.arch": "blackwell"}) == {"mixed_precision": "bf16_with_mxfp8_mixed"}
    assert fp8({"gpu.arch": "hopper"}) == {"mixed_precision": "bf16_with_fp8_subchannel_scaling_mixed"}
    assert fp8({"gpu.arch": "ampere"}) is None
    assert next(r for r in recommend("memory", {"gpu.arch": "hopper"}) if r.rule == "mem.fp8")
    assert not [r for r in recommend("memory", {"gpu.arch": "hopper"}, {"mixed_precision": "bf16_with_mxfp8_mixed"})
                if r.rule == "mem.fp8"]


@pytest.mark.parametrize("exposed, knob", [("exposed.deepep", "model.moe_deepep_num_sms"),
                                           ("exposed.hybridep", "model.moe_hybridep_num_sms")])
def test_exposed_fused_dispatch_tunes_the_sms_of_the_backend_that_ran(exposed, knob):
    """HybridEP on H100 or B200 runs hybrid_ep kernels, whose SMs moe_hybridep_num_sms sets; DeepEP's knob would do
    nothing for it (seeds/004 Tuning Parameters), whatever the platform."""
    facts = {**COMM, "exposed.alltoall": 0.0, "exposed.ep_comm": 0.3, exposed: 0.3, "share.fused_ep": 0.3}
    changes = {k for r in recommend("communication", facts) for k in r.overrides}
    assert knob in changes and not ({"model.moe_deepep_num_sms", "model.moe_hybridep_num_sms"} - {knob}) & changes


def _overrides(wall, facts, config=None):
    config = config or {}
    facts = {**facts, **{f"config.{k}": v for k, v in config.items()}}
    return {r.rule: r.overrides for r in recommend(wall, facts, config)}


def test_ep_overlap_brings_vpp_where_pp_has_none():
    """Megatron-Core refuses EP overlap at PP > 1 without VPP (seed 003 Prerequisites, rule ep_overlap.pp_needs_vpp)."""
    config = {"model.expert_model_parallel_size": 8, "model.pipeline_model_parallel_size": 2}
    assert _overrides("communication", COMM, config)["comm.ep_overlap"]["model.virtual_pipeline_model_parallel_size"] \
        == 2
    with_vpp = {**config, "model.virtual_pipeline_model_parallel_size": 4}
    assert "model.virtual_pipeline_model_parallel_size" not in _overrides("communication", COMM, with_vpp)[
        "comm.ep_overlap"]


def test_dp_and_tp_overlap_advice_is_legal_for_the_config():
    """Parameter-gather overlap needs the distributed optimizer (Megatron-LM asserts it); TP comm overlap needs a
    config with TP > 1 (an exposed all-reduce may be a DDP bucket's, and SP at TP 1 is refused)."""
    facts = {**COMM, "exposed.dp_tp_comm": 0.2, "exposed.alltoall": 0.0, "exposed.ep_comm": 0.0}
    plain = _overrides("communication", facts)
    # on the comm_overlap section too, which Bridge copies onto ddp with the distributed optimizer
    assert plain["comm.dp_overlap"] == {"ddp.overlap_grad_reduce": True, "ddp.overlap_param_gather": True,
                                        "comm_overlap.overlap_grad_reduce": True,
                                        "comm_overlap.overlap_param_gather": True}
    assert "comm.tp_overlap" not in plain
    no_dist = _overrides("communication", facts, {"ddp.use_distributed_optimizer": False})
    assert no_dist["comm.dp_overlap"] == {"ddp.overlap_grad_reduce": True}
    assert "comm.tp_overlap" in _overrides("communication", facts, {"model.tensor_model_parallel_size": 4})


@pytest.mark.parametrize("arch, fp8", [("hopper", True), ("blackwell", True), ("unknown", False), ("volta", False)])
def test_fp8_advice_only_where_the_gpu_is_known_to_run_it(arch, fp8):
    facts = {"share.matmul": 0.6, "share.other": 0.0, "gpu.arch": arch}
    assert ("compute.fp8" in _overrides("compute", facts)) == fp8


def test_moe_advice_waits_for_evidence_of_a_moe_model(traces_dir):
    """The 16-rank A100 trace's all-to-alls are a recommender's embedding exchange (TorchRec kjt all2all), and no
    grouped-GEMM or DeepEP kernel ran: no dispatcher, EP-overlap or grouped-GEMM advice, nor MoE fusions; with a config
    naming experts they come back."""
    from moetune.profile import diagnose
    path = traces_dir / "a100_16rank_sendrecv_rank0.json.gz"
    moe_rules = {"comm.dispatcher", "comm.ep_overlap", "compute.grouped_gemm"}
    plain = diagnose([path])
    assert "moe" not in plain.facts and not {r.rule for r in plain.recommendations} & moe_rules
    told = diagnose([path], config={"model.num_moe_experts": 64, "model.expert_model_parallel_size": 8})
    assert told.facts["moe"] is True and "comm.ep_overlap" in {r.rule for r in told.recommendations}
