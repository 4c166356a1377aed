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
from moetune.walls.layer_time import layer_time
from moetune.walls.memory import activation_context

SPEC, GPU = load_model("qwen3-30b-a3b"), load_gpu("b200")
LAYOUT = Layout(world_size=8, ep=8)
MOE = next(k for k in SPEC.layers if k.mlp == "moe")


def _layer(mbs: int, host_us: float, precision: str = "bf16", sync_us: float = 0.0, host_norm: float | None = None,
           **knobs):
    knobs = {"routing": "force-balance", **knobs}
    k = Knobs(precision=precision, dispatcher="alltoall", **knobs)
    ctx = activation_context(LAYOUT, Workload(seq_length=4096, micro_batch_size=mbs, global_batch_size=512), k)
    eff = {**efficiency("b200"), "host_us_per_layer": host_us, "sync_us_per_moe_layer": sync_us}
    eff["host_norm"] = host_norm or eff["host_norm"]
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


@pytest.mark.parametrize("norm", [1.0, 2.0, 4.0, 64.0])
def test_at_equal_times_the_layer_takes_the_norm_of_the_two(norm):
    """CPU and GPU each t: the layer takes (t^p + t^p)^(1/p) = 2^(1/p) t, the host_norm p of efficiency.toml; p 1
    adds the two (2t: nothing overlaps), a large p nears their maximum (t: all of the CPU hidden)."""
    _, gpu = _layer(1, 0.0)
    t, _ = _layer(1, gpu * 1e6, host_norm=norm)
    assert t.host + gpu == pytest.approx(2 ** (1 / norm) * gpu, rel=1e-9)


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
    from moetune.walls.host import layer_cpu_share
    eff = efficiency("b200")
    attn_moe, mamba, moe_only = (LayerKind(mixer="gqa", mlp="moe"), LayerKind(mixer="mamba", mlp="none"),
                                 LayerKind(mixer="none", mlp="moe"))
    assert layer_cpu_share(attn_moe, (), eff) == pytest.approx(1.0)  # host_us_per_layer is one standard layer
    assert layer_cpu_share(mamba, (), eff) == eff["host_part_mixer"]  # a hybrid stack's half-layers cost their part
    assert layer_cpu_share(moe_only, (), eff) == eff["host_part_moe"]
    assert layer_cpu_share(mamba, ("attn",), eff) == eff["host_part_mixer"]  # attn graphs do not reach a Mamba mixer
    assert layer_cpu_share(mamba, ("mamba",), eff) == pytest.approx(0.1 * eff["host_part_mixer"])
    both = eff["host_part_mixer"] * 0.1 + eff["host_part_moe"] * 0.85 * 0.85  # attn 0.9; router, preprocess 0.15 each
    assert layer_cpu_share(attn_moe, ("attn", "moe_router", "moe_preprocess"), eff) == pytest.approx(both)
    assert layer_cpu_share(attn_moe, ("full_iteration",), eff) == pytest.approx(0.05)
    mine = {**eff, "graph_capture_moe_router": 1.0}  # an --efficiency file's own share reaches the host wall
    assert layer_cpu_share(moe_only, ("moe_router",), mine) == 0.0
