"""walls/overheads.py: the CUDA-graph pool is charged only where the scope captures a layer of the model.

Megatron-Core graphs a layer only where the scope names a module it has (transformer/cuda_graphs.py
_layer_is_graphable @core_v0.19.0): `mamba` a MambaLayer, `mlp` a dense MLP, `attn` a layer with self-attention,
`moe`/`moe_router`/`moe_preprocess` a MoELayer. A scope that names none of the model's modules builds no graph and
keeps no static buffers, and the host wall credits it nothing; the pool had been charged whatever the scope named
(Qwen3-30B-A3B, no Mamba layer, with `--cuda-graph-scope mamba` on 8 H100: 2 GiB plus its fragmentation share more
than with no graphs, at the same step time)."""

import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.batch_bytes import batch_memory
from moetune.walls.batch_layouts import build_batch
from moetune.walls.overheads import default_overheads

GPU = load_gpu("h100")
WL = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=64)


def _run(name: str, scope: tuple[str, ...]):
    spec, lay = load_model(name), Layout(world_size=8, ep=8)
    knobs = Knobs(precision="fp8-blockwise", dispatcher="deepep", cuda_graph_scope=scope)
    return spec, lay, knobs, estimate(spec, GPU, lay, WL, knobs)


@pytest.mark.parametrize("name, scope, pooled", [
    ("qwen3-30b-a3b", ("mamba",), False),  # no Mamba layer: nothing to capture
    ("qwen3-30b-a3b", ("mlp",), False),  # every layer's MLP is MoE: no dense MLP to capture
    ("qwen3-30b-a3b", ("attn",), True),
    ("qwen3-30b-a3b", ("moe_router",), True),
    ("deepseek-v3", ("mlp",), True),  # its first 3 layers are dense (first_k_dense_replace)
    ("nemotron3-nano-30b-a3b", ("mamba",), True),
    ("qwen3-30b-a3b", ("full_iteration",), True),
])
def test_the_graph_pool_is_held_only_where_the_scope_captures_a_layer(name, scope, pooled):
    *_, e = _run(name, scope)
    assert all(("cuda_graph_pool" in s.items) == pooled for s in e.stages)


def test_a_scope_that_captures_nothing_costs_what_no_graphs_cost_in_estimate_and_the_planner_alike():
    spec, lay, knobs, none_at_all = _run("qwen3-30b-a3b", ())
    _, _, mamba_knobs, mamba = _run("qwen3-30b-a3b", ("mamba",))
    assert mamba.peak_bytes == none_at_all.peak_bytes
    assert mamba.time["step_seconds"] == none_at_all.time["step_seconds"]
    batch = build_batch(spec, [(lay, 1)])
    planned = batch_memory(spec, batch, 4096, 64, mamba_knobs, default_overheads(), arch=GPU.arch)[0]
    assert float(planned) == pytest.approx(mamba.peak_bytes, rel=1e-9)
