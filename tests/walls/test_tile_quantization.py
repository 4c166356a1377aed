"""GEMM tile quantization in the compute wall (walls/compute.py): weight dimensions round up to whole output
tiles, 128 rows on Hopper and 256 on Blackwell (hardware.toml gemm_tile)."""

from dataclasses import replace

import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.compute import forward_flops, forward_seconds, rates
from moetune.walls.efficiency import efficiency
from moetune.walls.flops import gemm_shapes
from moetune.walls.memory import activation_context


def _routed_seconds(model: str, gpu_key: str, tile: int) -> float:
    spec, gpu = load_model(model), load_gpu(gpu_key)
    kind = next(k for k in spec.layers if k.mlp == "moe")
    lay, knobs = Layout(world_size=8, ep=8), Knobs(precision="bf16", routing="force-balance")
    ctx = activation_context(lay, Workload(seq_length=4096, micro_batch_size=1, global_batch_size=64), knobs)
    r = replace(rates(gpu, "bf16", efficiency(gpu.key)), tile=tile)
    return forward_seconds(spec, kind, ctx, r, lay.ep, forward_flops(spec, kind, ctx))["routed_experts"]


def test_catalog_tiles_follow_the_mma_shapes():
    assert {load_gpu(k).gemm_tile for k in ("a100", "h100", "h200", "h20")} == {128}
    assert {load_gpu(k).gemm_tile for k in ("b200", "gb200", "gb300")} == {256}


def test_widths_that_fill_whole_tiles_cost_nothing_extra():
    """Qwen3-30B-A3B's experts are 2048 x 768 (3 x 256): no rounding on any tile size."""
    assert _routed_seconds("qwen3-30b-a3b", "b200", 256) == pytest.approx(_routed_seconds("qwen3-30b-a3b", "b200", 1))


def test_gpt_oss_experts_waste_part_of_blackwell_tiles():
    """gpt-oss-120b's experts are 2880 wide: 11.25 tiles of 256 (12 issued), 22.5 of 128 (23 issued). Forward,
    dgrad and wgrad outputs round up N, K and both: fc2 (2880 x 2880) issues 3 x 2880^2 / (2 x 2880 x 3072 +
    3072^2) of its MACs usefully on Blackwell, fc1 (2880 -> 5760) somewhat more."""
    spec = load_model("gpt-oss-120b")
    kind = next(k for k in spec.layers if k.mlp == "moe")
    assert gemm_shapes(spec, kind)["routed_experts"] == [(2880, 5760, "n"), (2880, 2880, "k")]
    base = _routed_seconds("gpt-oss-120b", "b200", 1)
    blackwell, hopper = _routed_seconds("gpt-oss-120b", "b200", 256), _routed_seconds("gpt-oss-120b", "b200", 128)
    fc2_eff = 3 * 2880**2 / (2 * 2880 * 3072 + 3072**2)
    assert 1 < blackwell / base < 1 / fc2_eff
    assert 1 < hopper / base < blackwell / base
