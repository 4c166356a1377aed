"""Overlap windows (walls/overlap.py): the DP reduce-scatter and all-gather hide only under one micro-batch's backward
/ forward, so more micro-batches do not hide more; EP overlap leaves its unpaired micro-batches exposed."""

import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.model import LayerKind
from moetune.specs.registry import load_model
from moetune.walls.efficiency import efficiency
from moetune.walls.host import layer_cpu_share
from moetune.walls.overlap import (
    dp_exposed_seconds,
    ep_overlap_exposed,
    ep_overlap_hide,
    ep_overlap_sides,
    ep_overlap_unpaired,
)

EFF = {"dp_overlap_hide": 1.0}


def test_traffic_within_the_windows_is_hidden():
    # 3 s of stage compute per micro-batch: 2 s of backward hides the reduce-scatter, 1 s of forward the all-gather
    on = Knobs()
    assert dp_exposed_seconds(1.5, 0.5, 3.0, EFF, on) == 0.0
    assert dp_exposed_seconds(2.5, 1.5, 3.0, EFF, on) == pytest.approx(0.5 + 0.5)


def test_overlap_flags_off_expose_their_collective():
    """ddp.overlap_grad_reduce / overlap_param_gather off: that collective runs outside the pipeline, all exposed."""
    assert dp_exposed_seconds(1.5, 0.5, 3.0, EFF, Knobs(overlap_grad_reduce=False)) == pytest.approx(1.5)
    assert dp_exposed_seconds(1.5, 0.5, 3.0, EFF, Knobs(overlap_param_gather=False)) == pytest.approx(0.5)
    spec, gpu = load_model("gpt-oss-120b"), load_gpu("b200")
    lay, wl = Layout(world_size=64, ep=8), Workload(seq_length=4096, micro_batch_size=4, global_batch_size=1280)
    base = Knobs(precision="bf16", dispatcher="hybridep", routing="force-balance")
    on, off = (estimate(spec, gpu, lay, wl, Knobs(**{**{f: getattr(base, f) for f in base.__slots__},
                                                    "overlap_grad_reduce": flag})) for flag in (True, False))
    assert off.time["step_seconds"] > on.time["step_seconds"]


def test_exposed_dp_does_not_shrink_with_more_micro_batches():
    """gpt-oss-120b on 64 B200, PP1 EP8 (R006's layout): 16 B parameters per rank. Doubling the global batch
    doubles the micro-batches but not the window, so the exposed DP seconds stay the same."""
    spec, gpu = load_model("gpt-oss-120b"), load_gpu("b200")
    lay, knobs = Layout(world_size=64, ep=8), Knobs(precision="bf16", dispatcher="hybridep", routing="force-balance")
    exposed = [estimate(spec, gpu, lay, Workload(seq_length=4096, micro_batch_size=4, global_batch_size=gbs), knobs)
               .time["exposed_collectives"]["dp_grad_reduce_param_gather"] for gbs in (1280, 2560)]
    assert exposed[0] > 0.3
    assert exposed[1] == pytest.approx(exposed[0])


def test_ep_overlap_leaves_the_unpaired_micro_batches_exposed():
    """PP=1: the first forward and the last backward, one micro-batch; PP4 x VPP4: the first stage warms up with
    2*3 + 3*4 = 18 forward chunks, 4.5 micro-batches."""
    assert ep_overlap_unpaired(Layout(world_size=8, ep=8), 16) == 1.0
    assert ep_overlap_unpaired(Layout(world_size=64, pp=4, vpp=4, ep=16), 16) == pytest.approx(4.5)
    # 4 micro-batches on PP4 x VPP4: the 18-chunk warm-up covers all 16 chunks, none is paired
    assert ep_overlap_unpaired(Layout(world_size=64, pp=4, vpp=4, ep=16), 4) == 4
    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("gb200")
    lay = Layout(world_size=8, ep=8)
    e = {m: estimate(spec, gpu, lay, Workload(seq_length=4096, micro_batch_size=1, global_batch_size=8 * m),
                     Knobs(precision="mxfp8", dispatcher="hybridep", ep_overlap=True, routing="force-balance",
                           cuda_graph_scope=("attn", "moe_router", "moe_preprocess")))  # graphed: the overlap hides
         for m in (4, 8)}
    per_mb = {m: e[m].time["exposed_collectives"]["ep_alltoall"] / m for m in e}
    assert per_mb[4] > per_mb[8]  # the unpaired micro-batch weighs more in a shorter step


# One MoE layer's compute by class (seconds, forward + backward): attention-side classes 3x their forward (GEMMs),
# core attention 3.5x, the routed experts 3x; no elementwise or replay, so the windows are easy to read.
LAYER = {"attn_proj": 3.0, "core_attn": 3.5, "routed_experts": 6.0}  # forwards 1 + 1; experts 2


def test_ep_windows_hide_each_all_to_all_beside_its_own_compute():
    """Attention-side forward 2 s hides the combine backward, the expert backward + forward (6 s) the two dispatches,
    the attention-side backward (4.5 s) the combine forward (model_chunk_schedule_plan.py run())."""
    assert ep_overlap_sides(LAYER) == pytest.approx((2.0, 2.0, 4.0, 4.5))
    assert ep_overlap_exposed(1.5, LAYER, 1.0, True) == 0.0
    # a = 3 s: the combine backward shows 1 s past the attention forward, the dispatches none (2a = 6 = 3f), the
    # combine forward none; a share of the windows only
    assert ep_overlap_exposed(3.0, LAYER, 1.0, True) == pytest.approx(1.0)
    # half the compute usable: 3 - 1, 6 - 3, 3 - 2.25
    assert ep_overlap_exposed(3.0, LAYER, 0.5, True) == pytest.approx(2.0 + 3.0 + 0.75)


def test_the_bias_pass_splits_between_the_expert_windows_at_its_own_bytes():
    """Biased experts' fc2 bias pass (gpt-oss) runs in the expert part at its own split, 28 of its 68 bytes forward
    with FP32 probabilities (compute.EXPERT_BIAS_BYTES), not a third of it forward as the GEMMs: f = 2 + 2.8 s and
    b = 4 + 4 s. Without delay_wgrad the dispatch backward (a = 5 s) hides under b and the dispatch forward shows
    a - f = 0.2 s (at the GEMMs' third, f = 4.27 s, 0.73 s); delayed, the window is f + b either way."""
    biased = {"routed_experts": 6.0, "expert_bias": 6.8}
    assert ep_overlap_sides(biased, 2.8) == pytest.approx((0.0, 4.8, 8.0, 0.0))
    assert ep_overlap_exposed(5.0, biased, 1.0, False, 2.8) == pytest.approx(5 + 0.2 + 5)
    assert ep_overlap_exposed(7.0, biased, 1.0, True, 2.8) == pytest.approx(7 + (14 - 12.8) + 7)


def test_delay_wgrad_hides_the_dispatch_backward_under_the_weight_gradient():
    """Without delay_wgrad_compute the dispatch backward waits for the whole expert backward (2f) and then runs beside
    the expert forward (f): with f = 2 s and a = 3 s it shows a - f = 1 s; delayed, the weight gradient runs beside
    it and 2a - 3f = 0. Past 2f both expose 2a - 3f."""
    assert ep_overlap_exposed(3.0, {"routed_experts": 6.0}, 1.0, False) == pytest.approx(3 + 1 + 3)
    assert ep_overlap_exposed(3.0, {"routed_experts": 6.0}, 1.0, True) == pytest.approx(3 + 0 + 3)
    for delay in (True, False):
        assert ep_overlap_exposed(5.0, {"routed_experts": 6.0}, 1.0, delay) == pytest.approx(5 + 4 + 5)


def test_a_comm_bound_layer_hides_all_of_the_windows_compute():
    """When each all-to-all outweighs its window, the step is the communication: the exposed part is the
    all-to-alls less all the usable compute, not less a fixed share of it."""
    a = 10.0
    exposed = ep_overlap_exposed(a, LAYER, 1.0, True)
    assert exposed == pytest.approx(4 * a - sum(LAYER.values()))


def test_only_nvlink_copies_take_from_the_window_compute():
    """The usable share of a window is ep_overlap_hide (0.7) while the all-to-all's NVLink copies run, all of it while
    only the NIC moves bytes; without CUDA graphs Blackwell's share is capped at ep_overlap_hide_eager (0: the CPU
    sets the pace), Hopper's is not."""
    h100, gb200 = efficiency("h100"), efficiency("gb200")
    assert ep_overlap_hide(h100, 1.0) == pytest.approx(h100["ep_overlap_hide"])
    assert ep_overlap_hide(h100, 0.0) == pytest.approx(1.0)
    assert ep_overlap_hide(h100, 0.2) == pytest.approx(1 - 0.2 * (1 - h100["ep_overlap_hide"]))
    assert ep_overlap_hide(gb200, 0.2) == 0.0
    assert ep_overlap_hide(gb200, 1.0, eager=0.0) == pytest.approx(gb200["ep_overlap_hide"])


def _eager(scopes: tuple[str, ...]) -> float:
    moe = LayerKind(mixer="gqa", mlp="moe")
    eff = efficiency("gb200")
    return layer_cpu_share(moe, scopes, eff) / layer_cpu_share(moe, (), eff)


def test_blackwell_overlap_is_capped_by_the_launches_left_eager():
    """On Blackwell the combined-1F1B schedule's CPU work sets the pace where a layer's launches are eager, so the
    usable share rises with what the graphs capture: nothing with no graph, a little with the router graphs alone,
    about half with TE-scoped attention and router graphs, all of ep_overlap_hide under a full-iteration graph.
    Hopper (ep_overlap_hide_eager 1) is never capped."""
    gb200, h100 = efficiency("gb200"), efficiency("h100")
    shares = [ep_overlap_hide(gb200, 1.0, _eager(s)) for s in
              ((), ("moe_router", "moe_preprocess"), ("attn", "moe_router", "moe_preprocess"), ("full_iteration",))]
    assert shares[0] == 0.0 and shares == sorted(shares) and len(set(shares)) == 4
    assert shares[2] == pytest.approx(1 - _eager(("attn", "moe_router", "moe_preprocess")))
    assert shares[3] == pytest.approx(gb200["ep_overlap_hide"])
    assert ep_overlap_hide(h100, 1.0, _eager(())) == pytest.approx(h100["ep_overlap_hide"])


def test_ep_overlap_never_exposes_more_than_the_all_to_all_itself():
    """4 micro-batches on PP4 x VPP4 (the warm-up covers every chunk): the overlap pairs nothing."""
    def run(overlap):
        return estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), Layout(world_size=32, pp=4, vpp=4, ep=8),
                        Workload(seq_length=4096, micro_batch_size=1, global_batch_size=32),
                        Knobs(precision="bf16", dispatcher="alltoall", ep_overlap=overlap), with_memory=False).time
    on, off = run(True), run(False)
    assert on["exposed_collectives"]["ep_alltoall"] <= on["collectives"]["ep_alltoall"] + 1e-12
    assert on["step_seconds"] == pytest.approx(off["step_seconds"], rel=0.02)


def test_without_the_distributed_optimizer_gradients_are_all_reduced():
    """Megatron-Core's DDP all-reduces each bucket when use_distributed_optimizer is off (distributed/
    param_and_grad_buffer.py start_grad_sync) and every rank steps its whole copy, so no parameter all-gather: with
    FP32 grads 2 x 4 bytes a parameter cross the ring instead of 4 + 2 (R006's layout, gpt-oss-120b on 64 B200)."""
    from moetune.walls.iteration import iteration_terms
    gpu, eff, lay, spec = load_gpu("b200"), efficiency("b200"), Layout(world_size=64, ep=8), load_model("gpt-oss-120b")
    (rs, ag, *_), opt_sharded, _ = iteration_terms(spec, 1e9, 4e9, 1e8, lay, Knobs(), gpu, eff)
    (ar, none, *_), opt_whole, _ = iteration_terms(spec, 1e9, 4e9, 1e8, lay, Knobs(distributed_optimizer=False,
                                                                               overlap_param_gather=False), gpu, eff)
    assert none == 0.0
    assert ar == pytest.approx(2 * rs)
    assert rs + ag == pytest.approx(ar * 6 / 8)
    assert opt_whole > 8 * opt_sharded  # DP 64 (dense) and EDP 8 (experts) shards, now stepped whole


@pytest.mark.parametrize(("precision", "gathered"), [("fp8-current", 1), ("fp8-delayed", 1), ("mxfp8", 2)])
def test_fp8_parameters_gather_in_their_own_bytes(precision, gathered):
    """FP8 parameters sit in DDP's uint8 buffer and the distributed optimizer all-gathers them as 1 byte a GEMM weight
    (tensor-scaled recipes); MXFP8's gather through the gradient buffer in BF16; the embedding and output layer stay
    BF16. The gradient reduce-scatter is the same either way."""
    from moetune.walls.iteration import iteration_terms
    gpu, eff, lay, spec = load_gpu("b200"), efficiency("b200"), Layout(world_size=64, ep=8), load_model("gpt-oss-120b")
    (rs, ag, *_), _, _ = iteration_terms(spec, 1e9, 4e9, 1e8, lay, Knobs(precision=precision), gpu, eff)
    (rs16, ag16, *_), _, _ = iteration_terms(spec, 1e9, 4e9, 1e8, lay,
                                             Knobs(precision=precision, fp8_param_gather=False), gpu, eff)
    assert rs == rs16
    if gathered == 2:
        assert ag == ag16
    else:  # half the bytes but the vocabulary's, which stays BF16
        assert ag16 / 2 < ag < ag16 / 2 * (1 + 1e8 / 1e9)


@pytest.mark.parametrize("gpu,gpus,lay,gbs", [("b200", 32, dict(pp=4, vpp=3, ep=8), 32),  # 4 micro-batches < 4.67
                                              ("h100", 16, dict(ep=16), 16)])  # PP1, one micro-batch
def test_ep_overlap_with_nothing_to_pair_costs_what_no_overlap_does(gpu, gpus, lay, gbs):
    """With every micro-batch unpaired Megatron runs the all-to-all beside nothing: the step is the one without
    overlap (the host wait had been taken against the overlapped GPU time, making the overlap 5-14% slower)."""
    spec = load_model("qwen3-30b-a3b")
    wl = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=gbs)
    steps = [estimate(spec, load_gpu(gpu), Layout(world_size=gpus, **lay), wl,
                      Knobs(dispatcher="deepep", ep_overlap=on, delay_wgrad=on,  # graphed: the overlap hides
                            cuda_graph_scope=("attn", "moe_router", "moe_preprocess"))).time["step_seconds"]
             for on in (False, True)]
    assert steps[1] == pytest.approx(steps[0], rel=1e-9)
