"""The host wall of walls/step.py: the CPU issues a layer while the GPU runs, so only the CPU time the layer's
GPU time does not cover shows (a 4-norm, a smooth maximum of the two)."""

import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.compute import rates
from moetune.walls.efficiency import efficiency
from moetune.walls.memory import activation_context
from moetune.walls.step import layer_time

SPEC, GPU = load_model("qwen3-30b-a3b"), load_gpu("b200")
LAYOUT = Layout(world_size=8, ep=8)
MOE = next(k for k in SPEC.layers if k.mlp == "moe")


def _layer(mbs: int, host_us: float, precision: str = "bf16", sync_us: float = 0.0, **knobs):
    knobs = {"routing": "force-balance", **knobs}
    k = Knobs(precision=precision, dispatcher="alltoall", **knobs)
    ctx = activation_context(LAYOUT, Workload(seq_length=4096, micro_batch_size=mbs, global_batch_size=512), k)
    eff = {**efficiency("b200"), "host_us_per_layer": host_us, "sync_us_per_moe_layer": sync_us}
    t = layer_time(SPEC, MOE, LAYOUT, ctx, GPU, eff, k, rates(GPU, k.precision, eff))
    return t, sum(t.compute.values()) + sum(t.comm.values())


def test_no_cpu_cost_no_host_wall():
    t, _ = _layer(1, 0.0)
    assert t.host == 0.0


def test_a_cpu_far_behind_the_gpu_shows_almost_whole():
    t, gpu = _layer(1, 1e6)  # one second of CPU per layer
    assert t.host == pytest.approx(1.0 - gpu, rel=1e-3)


def test_a_gpu_far_ahead_of_the_cpu_hides_it():
    t, gpu = _layer(16, 100.0)  # 100 us of CPU under a 16-sequence micro-batch
    assert gpu > 50 * 100e-6
    assert t.host < 1e-3 * gpu


def test_at_equal_times_the_layer_takes_the_smooth_maximum():
    _, gpu = _layer(1, 0.0)
    t, _ = _layer(1, gpu * 1e6)
    assert t.host + gpu == pytest.approx(2 ** 0.25 * gpu, rel=1e-9)


def test_cuda_graph_scopes_cut_the_cpu_share_they_capture():
    eager, _ = _layer(1, 20000.0)
    graphed, _ = _layer(1, 20000.0, cuda_graph_scope=("attn", "moe_router", "moe_preprocess"))
    assert graphed.host < eager.host


def test_larger_micro_batches_dilute_the_host_wall_per_token():
    small, _ = _layer(1, 10000.0)
    big, _ = _layer(4, 10000.0)
    assert big.host / 4 < small.host


@pytest.mark.parametrize("routing", ["dropless", "force-balance"])
def test_every_eager_moe_layer_waits_for_its_token_counts(routing):
    """Under any routing (force-balanced counts vary too), unless a full-iteration graph's sync-free path runs."""
    plain, _ = _layer(16, 100.0, routing=routing)
    synced, _ = _layer(16, 100.0, routing=routing, sync_us=500.0)
    assert synced.host == pytest.approx(plain.host + 500e-6, rel=1e-9)
    graphed, _ = _layer(16, 100.0, routing=routing, sync_us=500.0, cuda_graph_scope=("full_iteration",))
    assert graphed.host == _layer(16, 100.0, routing=routing, cuda_graph_scope=("full_iteration",))[0].host


def test_fp8_recipes_multiply_the_cpu_cost():
    """seeds/004: FP8 "often increases the relative importance of communication and host overhead"."""
    bf16, gpu16 = _layer(1, 1e6)
    fp8, gpu8 = _layer(1, 1e6, precision="mxfp8")
    factor = efficiency("b200")["fp8_host_factor"]
    assert factor > 1
    assert fp8.host + gpu8 == pytest.approx(factor * (bf16.host + gpu16), rel=1e-3)


def test_cpu_share_by_layer_part_and_graph_scope():
    from moetune.specs.model import LayerKind
    from moetune.walls.host import PART_SHARE, layer_cpu_share
    attn_moe, mamba, moe_only = (LayerKind(mixer="gqa", mlp="moe"), LayerKind(mixer="mamba", mlp="none"),
                                 LayerKind(mixer="none", mlp="moe"))
    assert layer_cpu_share(attn_moe, ()) == pytest.approx(1.0)  # host_us_per_layer is one standard layer
    assert layer_cpu_share(mamba, ()) == PART_SHARE["mixer"]  # a hybrid stack's half-layers cost their part
    assert layer_cpu_share(moe_only, ()) == PART_SHARE["moe"]
    assert layer_cpu_share(mamba, ("attn",)) == PART_SHARE["mixer"]  # attn graphs do not reach a Mamba mixer
    assert layer_cpu_share(mamba, ("mamba",)) < 0.1 * PART_SHARE["mixer"]
    assert layer_cpu_share(attn_moe, ("attn", "moe_router", "moe_preprocess")) < layer_cpu_share(attn_moe, ("attn",))
    assert layer_cpu_share(attn_moe, ("full_iteration",)) == pytest.approx(0.05)


def test_a_longer_sequence_never_shortens_the_step():
    """Qwen3-30B-A3B on 256 B200 (TP2 CP4 EP8, GBS 32) is host-bound at 8k: the DP reduce-scatter runs in the gaps
    where the GPU waits for the host as well as under compute, so doubling the sequence (more work everywhere) cannot
    make the step shorter (counting compute alone once did: 0.83 -> 0.79 -> 0.76 s)."""
    from moetune.layout.knobs import Knobs
    from moetune.layout.layout import Layout
    from moetune.layout.validate import Workload
    from moetune.planner.estimate import estimate
    from moetune.specs.hardware import load_gpu
    from moetune.specs.registry import load_model

    steps = [estimate(load_model("qwen3-30b-a3b"), load_gpu("b200"), Layout(world_size=256, tp=2, cp=4, ep=8),
                      Workload(seq_length=s, micro_batch_size=1, global_batch_size=32),
                      Knobs(precision="mxfp8", dispatcher="deepep",
                            cuda_graph_scope=("attn", "moe_router", "moe_preprocess"))).time["step_seconds"]
             for s in (8192, 16384, 32768)]
    assert steps == sorted(steps)


def test_the_attn_scope_captures_a_gated_delta_net_layer_as_an_attention_layer():
    """Qwen3-Next's gated delta-net layers are TransformerLayers whose self_attention the attn scope graphs; they had
    kept 0.85 of their CPU cost under attn where an attention layer keeps 0.44 (explain audit)."""
    from moetune.walls.host import layer_cpu_share
    kinds = {k.mixer: k for k in load_model("qwen3-next-80b-a3b").layers}
    scopes = ("attn", "moe_router", "moe_preprocess")
    assert layer_cpu_share(kinds["gdn"], scopes) == pytest.approx(layer_cpu_share(kinds["gqa"], scopes))
    assert layer_cpu_share(kinds["gdn"], scopes) < 0.5 * layer_cpu_share(kinds["gdn"], ())
