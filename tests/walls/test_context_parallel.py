"""Context-parallel exchanges (walls/context_parallel.py): bytes of each cp_comm_type by hand, where each is legal, what
a plan's "auto" picks, and the published DeepSeek-V3 128k run that only an all-to-all exchange explains."""

import re

import pytest

from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload, validate_shapes
from moetune.planner.estimate import estimate
from moetune.planner.runs import published_rows
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.attention_rate import ring_slowdown
from moetune.walls.compute import rates
from moetune.walls.context_parallel import cp_seconds, layer_cp, widths
from moetune.walls.cp_legal import a2a_allows, a2a_cp_limit, cp_exchange_exists, exchange_refusal, hcp_inner_size
from moetune.walls.efficiency import efficiency

QWEN235, DSV3, GPT_OSS = (load_model(m) for m in ("qwen3-235b-a22b", "deepseek-v3", "gpt-oss-120b"))


def test_widths_are_the_heads_the_attention_kernel_sees():
    # Qwen3-235B-A22B: 64 query heads, 4 KV groups, head dim 128
    assert widths(QWEN235, QWEN235.layers[0], 2) == (64 * 128, 2 * 4 * 128, 64 * 128)
    # TP 16 past the 4 groups: each rank holds one group's K and V (a TP-th of 16 such pairs)
    assert widths(QWEN235, QWEN235.layers[0], 16) == (64 * 128, 2 * 1 * 128 * 16, 64 * 128)
    # DeepSeek-V3 MLA: 128 heads, K = 128 nope + 64 rope, V = 128 (the up-projected heads, not the latent)
    assert widths(DSV3, DSV3.layers[0], 8) == (128 * 192, 128 * (192 + 128), 128 * 128)


def test_each_exchange_moves_its_bytes_by_hand():
    gpu, eff = load_gpu("gb200"), efficiency("gb200")
    nvlink, lat = gpu.nvlink_gbps * 1e9 * eff["nvlink_eff"], eff["a2a_latency_us"] * 1e-6
    tokens, cp, tp = 16384, 8, 1  # a 128k sequence over CP 8, inside one NVL72 domain
    kv = tokens * 2 * 4 * 128 * 2  # K and V of 4 groups, BF16
    qkvo = tokens * (64 * 128 + 2 * 4 * 128 + 64 * 128) * 2
    kind = QWEN235.layers[0]
    ring = 3 * 7 * (kv / nvlink + lat)
    # p2p: K,V around the ring CP-1 times forward, K,V and their gradients backward; all of it can hide
    assert cp_seconds(QWEN235, kind, tokens, cp, tp, gpu, eff, "p2p") == pytest.approx((0.0, ring))
    # all_gather: the same bytes, none hidden
    assert cp_seconds(QWEN235, kind, tokens, cp, tp, gpu, eff, "all_gather") == pytest.approx((ring, 0.0))
    # a2a: Q, K, V in and O out, forward and backward, (CP-1)/CP of each leaving the rank; none hidden
    assert cp_seconds(QWEN235, kind, tokens, cp, tp, gpu, eff, "a2a") == pytest.approx(
        (2 * 7 / 8 * qkvo / nvlink + 4 * lat, 0.0))
    # a2a+p2p [4, 2]: the a2a over 4, then a 2-rank ring of chunks of the same size
    hard, soft = cp_seconds(QWEN235, kind, tokens, cp, tp, gpu, eff, "a2a+p2p", inner=4)
    assert (hard, soft) == pytest.approx((2 * 3 / 4 * qkvo / nvlink + 4 * lat, 3 * 1 * (kv / nvlink + lat)))


def test_a2a_needs_the_heads_of_each_tp_rank_to_split():
    # Qwen3-235B-A22B has 4 KV groups: CP 4 at TP 1, never CP 8, and at TP 4 one group per rank leaves CP 1
    assert a2a_allows(QWEN235, 4, 1) and not a2a_allows(QWEN235, 8, 1) and not a2a_allows(QWEN235, 2, 4)
    assert a2a_allows(DSV3, 32, 1) and a2a_allows(DSV3, 64, 2)  # MLA: 128 heads, each its own group
    # a2a+p2p's inner group: the largest the heads allow whose ranks share NVLink (8 GPUs on H100)
    assert int(hcp_inner_size(QWEN235, 8, 1, 8)) == 4 and int(hcp_inner_size(DSV3, 32, 1, 8)) == 8
    assert int(hcp_inner_size(DSV3, 32, 2, 8)) == 4 and int(hcp_inner_size(QWEN235, 8, 4, 8)) == 1


def test_attention_sinks_run_context_parallel_only_over_a2a():
    """gpt-oss's sinks run only in TE's fused attention, which takes CP only with a2a (rules.yaml cp.sinks_need_a2a):
    the planner keeps a CP layout of gpt-oss only where a2a splits its 8 KV groups."""
    assert GPT_OSS.softmax_sinks and GPT_OSS.num_query_groups == 8
    assert cp_exchange_exists(GPT_OSS, 4, 2, 8, "auto") and cp_exchange_exists(GPT_OSS, 4, 2, 8, "a2a")
    assert not cp_exchange_exists(GPT_OSS, 4, 2, 8, "p2p") and not cp_exchange_exists(GPT_OSS, 8, 2, 8, "auto")
    assert cp_exchange_exists(QWEN235, 8, 4, 8, "p2p") and not cp_exchange_exists(QWEN235, 8, 4, 8, "a2a")


def test_auto_names_only_an_exchange_that_runs_and_refuses_where_none_does():
    """gpt-oss-120b on 256 GB200 at 128k, TP1: auto is a2a up to CP 8 (its 8 KV groups), and at CP 32 no exchange runs
    (sinks need a2a, a2a needs a KV group per CP rank): one error line, not a p2p price and rule error
    cp.sinks_need_a2a."""
    gpu, wl = load_gpu("gb200"), Workload(seq_length=131072, micro_batch_size=1, global_batch_size=256)
    assert estimate(GPT_OSS, gpu, Layout(world_size=256, cp=8, ep=64), wl, Knobs(cp_comm_type="auto"),
                    with_time=False).knobs.cp_comm_type == "a2a"
    assert exchange_refusal(GPT_OSS, 8, 1, 64) is None and exchange_refusal(QWEN235, 32, 1, 64) is None
    with pytest.raises(MoetuneError, match=r"no CP exchange runs at CP 32 with TP 1: .*cp.sinks_need_a2a.*"
                                           r"8 KV groups over CP, so CP can be at most 8 here; use --cp 8 or less$"):
        estimate(GPT_OSS, gpu, Layout(world_size=256, cp=32, ep=64), wl, Knobs(cp_comm_type="auto"))
    assert "or a smaller --tp" in exchange_refusal(GPT_OSS, 8, 2, 64)  # 4 KV groups a TP2 rank
    assert a2a_cp_limit(GPT_OSS, 2) == 4 and a2a_cp_limit(QWEN235, 1) == 4 and a2a_cp_limit(DSV3, 2) == 64


def test_past_the_kv_groups_a_rank_holds_one_group_and_no_a2a_split_runs():
    """TP 16 over gpt-oss's 8 KV groups: each rank holds one group (flops.kv_groups_per_rank), so the all-to-all's
    head split allows no CP over 1, and the refusals say so rather than naming 0 groups and a CP limit of 4 (the
    gcd with 64 / 16 heads alone)."""
    assert a2a_cp_limit(GPT_OSS, 16) == 1 and a2a_cp_limit(QWEN235, 8) == 1
    why = exchange_refusal(GPT_OSS, 2, 16, 72)
    assert "4 heads and 1 KV groups over CP, so CP can be at most 1 here; use --cp 1 (or a smaller --tp" in why
    gpu, wl = load_gpu("h100"), Workload(seq_length=8192, micro_batch_size=1, global_batch_size=64)
    with pytest.raises(MoetuneError, match=r"the 8 heads and 1 KV groups of a TP 8 rank must each split over CP"):
        estimate(QWEN235, gpu, Layout(world_size=64, tp=8, cp=2, ep=8), wl, Knobs(cp_comm_type="a2a"))


def _r064(cp_comm_type: str):
    """R064: DeepSeek-V3 at 128k on 256 H100, TP1 CP32 PP8 VPP4 EP32, FP8 blockwise, DeepEP, recompute up_proj, norm,
    moe, mlp, optimizer CPU offload; 303 TFLOP/s/GPU (Bridge long-context skill card). The card names no MBS, GBS or
    CP exchange: MBS 1 and 64 micro-batches here (the pipeline bubble is then 3%)."""
    row = published_rows()["R064"]
    knobs = Knobs(precision="fp8-blockwise", dispatcher="deepep", recompute="selective",
                  recompute_modules=frozenset({"mla_up_proj", "layernorm", "moe", "mlp"}), routing="force-balance",
                  optimizer_offload_fraction=1.0, main_grads_fp32=False, cp_comm_type=cp_comm_type)
    layout = Layout(world_size=256, tp=1, cp=32, pp=8, vpp=4, ep=32, etp=1, pipeline_layout="Et|(tt|)*30mL")
    e = estimate(DSV3, load_gpu("h100"), layout, Workload(seq_length=131072, micro_batch_size=1,
                                                          global_batch_size=64), knobs)
    return e, float(row["tflops_per_gpu"])


def test_the_128k_deepseek_run_is_explained_by_an_all_to_all_exchange():
    """A p2p ring over 32 ranks on 4 nodes passes MLA's wide K,V (80 KB a token) over the NIC 93 times a layer: moetune
    puts that run at a third of what was measured. An all-to-all exchange moves each chunk once, and a plan's "auto"
    picks it (a2a+p2p, a2a inside each node): then the measured TFLOP/s is within 15%."""
    ring, measured = _r064("p2p")
    picked, _ = _r064("auto")
    assert ring.fits and picked.fits
    assert ring.time["tflops_per_gpu"] < measured / 2
    assert picked.knobs.cp_comm_type in ("a2a", "a2a+p2p")
    assert picked.time["tflops_per_gpu"] == pytest.approx(measured, rel=0.15)
    for kind in ("a2a", "a2a+p2p"):
        assert _r064(kind)[0].time["tflops_per_gpu"] == pytest.approx(measured, rel=0.15), kind


def test_linear_mixers_trade_their_inputs_for_heads():
    """Mamba-2 (Nemotron-3-Nano) and gated delta-net (Qwen3-Next) layers run CP as all-to-alls of their own, whatever
    cp_comm_type says: z, x, B, C, dt in and y out (Mamba), q, k, v in and the output out (GDN), forward and
    backward, none hidden."""
    gpu, eff = load_gpu("h100"), efficiency("h100")
    nvlink, lat = gpu.nvlink_gbps * 1e9 * eff["nvlink_eff"], eff["a2a_latency_us"] * 1e-6
    tokens, cp, tp = 8192, 4, 2
    nano = load_model("nemotron3-nano-30b-a3b")  # 64 heads of 64, 8 groups, state 128
    mamba = next(k for k in nano.layers if k.mixer == "mamba")
    width = 3 * 64 * 64 + 2 * 8 * 128 + 64
    expected = 2 * 3 / 4 * tokens / tp * 2 * width / nvlink + 12 * lat
    r = rates(gpu, "bf16", eff)
    # raw, exposed, no ring, and a recompute replays the forward half
    assert layer_cp(nano, mamba, _Ctx(tokens), cp, tp, gpu, eff, Knobs(), r, 0.0) == pytest.approx(
        (expected, expected, 1.0, expected / 2))
    nxt = load_model("qwen3-next-80b-a3b")  # 16 key heads and 32 value heads of 128
    gdn = next(k for k in nxt.layers if k.mixer == "gdn")
    expected = 2 * 3 / 4 * tokens / tp * 2 * (2 * 16 * 128 + 2 * 32 * 128) / nvlink + 8 * lat
    assert layer_cp(nxt, gdn, _Ctx(tokens), cp, tp, gpu, eff, Knobs(), r, 0.0)[0] == pytest.approx(expected)


class _Ctx:
    def __init__(self, tokens):
        self.tokens, self.seq_length = tokens, tokens * 4


@pytest.mark.parametrize(("model", "tp", "cp", "needle"), [
    ("nemotron3-nano-30b-a3b", 1, 3, "mamba heads per TP rank (64) must be divisible by CP (3)"),
    ("nemotron3-nano-30b-a3b", 2, 64, "mamba heads per TP rank (32) must be divisible by CP (64)"),
    ("qwen3-next-80b-a3b", 2, 16, "linear_num_key_heads per TP rank (8) must be divisible by CP (16)"),
])
def test_linear_mixers_give_each_cp_rank_whole_heads(model, tp, cp, needle):
    spec = load_model(model)
    with pytest.raises(MoetuneError, match=re.escape(needle)):
        validate_shapes(spec, Layout(world_size=tp * cp, tp=tp, cp=cp))
    validate_shapes(spec, Layout(world_size=tp * 2, tp=tp, cp=2))  # two ranks split them


def test_a_ring_runs_its_attention_in_chunks_of_the_keys():
    """A p2p ring of R ranks runs one attention call per step on seq/(2R)-token chunks (Transformer Engine's
    diagonal / lower-triangle / upper-triangle calls, in lockstep): each sees 1/R of the causal mean keys, at the
    keys rate L / (L + attn_keys_half). By hand at 8k over 8 ranks: 4,096.5 keys a query in one call, 512.06 a
    chunk: (4096.5/4636.5) / (512.06/1052.06) = 1.815."""
    r = rates(load_gpu("h100"), "bf16", efficiency("h100"))
    assert r.attn_keys_half == 540
    assert ring_slowdown(8192, 1, r) == 1.0
    assert ring_slowdown(8192, 8, r) == pytest.approx((4096.5 / 4636.5) / (4096.5 / 8 / (4096.5 / 8 + 540)))
    assert ring_slowdown(131072, 8, r) < 1.07  # long context: chunks of 8k keys run near the full rate
    lay = Layout(world_size=64, tp=1, cp=4, pp=1, ep=8)
    wl = Workload(seq_length=8192, micro_batch_size=1, global_batch_size=64)
    p2p, a2a = (estimate(QWEN235, load_gpu("h100"), lay, wl, Knobs(precision="bf16", cp_comm_type=t, recompute="full"))
                for t in ("p2p", "a2a"))
    attn = {e.knobs.cp_comm_type: e.time["compute_by_class"]["core_attn"] for e in (p2p, a2a)}
    assert attn["p2p"] == pytest.approx(attn["a2a"] * ring_slowdown(8192, 4, r))
    # full recompute replays the forward attention in the ring's chunks too: 1 / (1 + 2.5) of the fwd + bwd
    extra = p2p.time["compute_by_class"]["recompute"] - a2a.time["compute_by_class"]["recompute"]
    assert extra == pytest.approx(attn["a2a"] / 3.5 * (ring_slowdown(8192, 4, r) - 1))


@pytest.mark.parametrize(("tp", "cp", "kind", "offered"), [
    # TP 8 past Qwen3-235B-A22B's 4 groups: one a rank, so neither a2a nor a2a+p2p's a2a group splits them and p2p
    # alone runs (each refusal had offered the other)
    (8, 2, "a2a", "use p2p, or a smaller CP or TP"),
    (8, 4, "a2a+p2p", "use p2p$"),
    # TP 1: 4 groups a rank, so CP 8 runs a2a+p2p [4, 2] beside p2p
    (1, 8, "a2a", "use p2p or a2a\\+p2p, or a smaller CP or TP"),
])
def test_an_exchange_refused_offers_only_exchanges_that_run(tp, cp, kind, offered):
    gpu, wl = load_gpu("h100"), Workload(seq_length=32768, micro_batch_size=1, global_batch_size=64)
    layout = Layout(world_size=64, tp=tp, cp=cp, ep=8)
    with pytest.raises(MoetuneError, match=offered):
        estimate(QWEN235, gpu, layout, wl, Knobs(cp_comm_type=kind), with_time=False)


def test_an_a2a_group_of_one_runs_past_the_kv_groups_as_within_them():
    """a2a+p2p [1, 4]: a one-rank a2a group splits nothing, so it runs at TP 4 (one KV group a rank) and at TP 8 past
    Qwen3-235B-A22B's 4 groups alike; TP 8 had refused it as 'the a2a group (1) must split the 4 KV groups over TP 8'.
    A group of 2 is still refused there, by the one group a rank holds."""
    gpu, wl = load_gpu("h100"), Workload(seq_length=32768, micro_batch_size=1, global_batch_size=64)
    for tp in (4, 8):
        layout, knobs = Layout(world_size=64, tp=tp, cp=4, ep=8), Knobs(cp_comm_type="a2a+p2p", hcp_a2a_size=1)
        assert estimate(QWEN235, gpu, layout, wl, knobs, with_time=False).knobs.hcp_a2a_size == 1
    with pytest.raises(MoetuneError, match=r"the a2a group \(2\) must split the 1 KV groups of a TP 8 rank;"):
        estimate(QWEN235, gpu, Layout(world_size=64, tp=8, cp=4, ep=8), wl,
                 Knobs(cp_comm_type="a2a+p2p", hcp_a2a_size=2), with_time=False)


def test_an_a2a_group_of_cp_runs_as_a2a():
    """a2a+p2p [CP, 1]: a ring of one rank, which Transformer Engine runs (attn_forward_func_with_cp hands a one-rank
    p2p group to plain a2a over cp_group[0]), so estimate prices it as a2a where it had refused 'leave a p2p ring of
    at least 2'. The head split still binds: Qwen3-235B-A22B's 4 KV groups cannot take a group of 8."""
    gpu, wl = load_gpu("h100"), Workload(seq_length=65536, micro_batch_size=1, global_batch_size=64)
    layout = Layout(world_size=64, tp=1, cp=8, ep=8)
    whole = estimate(DSV3, gpu, layout, wl, Knobs(cp_comm_type="a2a+p2p", hcp_a2a_size=8))
    a2a = estimate(DSV3, gpu, layout, wl, Knobs(cp_comm_type="a2a"))
    assert whole.knobs.hcp_a2a_size == 8
    assert whole.time["tflops_per_gpu"] == pytest.approx(a2a.time["tflops_per_gpu"], rel=1e-9)
    with pytest.raises(MoetuneError, match=r"the a2a group \(8\) must split the 4 KV groups of a TP 1 rank;"):
        estimate(QWEN235, gpu, layout, wl, Knobs(cp_comm_type="a2a+p2p", hcp_a2a_size=8), with_time=False)
