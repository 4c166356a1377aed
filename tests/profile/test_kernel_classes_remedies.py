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
        assert ("change" in rule) != ("variants" in rule), rule["rule"]


@pytest.mark.parametrize("cc, name", [((7, 0), "volta"), ((7, 5), "turing"), ((8, 0), "ampere"),
                                      ((8, 9), "ada"), ((9, 0), "hopper"), ((10, 0), "blackwell"), (None, "unknown")])
def test_arch(cc, name):
    assert arch(cc) == name


COMM = {"busy_share": 0.6, "exposed_comm_share": 0.3, "rank_wait_share": 0.0, "host_bound_share": 0.02,
        "exposed.alltoall": 0.3, "exposed.ep_comm": 0.3, "share.fused_ep": 0.0, "gpu.arch": "hopper",
        "gpu.nvl72": False}


def test_decide_orders_walls():
    assert decide(COMM)[0] == "communication"
    assert decide({**COMM, "host_bound_share": 0.5})[0] == "host_overhead"  # the larger score wins
    assert decide({**COMM, "exposed_comm_share": 0.01, "exposed.alltoall": 0.01})[0] == "compute"
    assert decide({**COMM, "oom": True})[0] == "memory"
    assert decide({**COMM, "config.model.recompute_granularity": "full"})[0] == "memory"


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
