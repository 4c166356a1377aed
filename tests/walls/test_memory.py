"""walls/memory.py line items that are not parameters or activations: tp_comm_overlap's Userbuffers."""

import re

import pytest

from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.specs.registry import load_model
from moetune.walls.memory import memory_wall
from moetune.walls.overheads import merged_overheads

QWEN235 = load_model("qwen3-235b-a22b")  # hidden 4096
WL = Workload(seq_length=16384, micro_batch_size=1, global_batch_size=256)


def _ub(layout: Layout, knobs: Knobs, wl: Workload = WL) -> set[int]:
    return {s.items.get("tp_comm_userbuffers", 0) for s in memory_wall(QWEN235, layout, wl, knobs, arch="hopper")}


@pytest.mark.parametrize(("precision", "bytes_per_row_element"), [
    ("bf16", 12 * 2),  # 12 buffers of [tokens, hidden] in BF16
    ("fp8-current", 8 * 1 + 4 * 2),  # the 8 all-gather buffers in uint8 under an FP8 recipe
    ("mxfp8", 8 * 1 + 4 * 2),
])
def test_userbuffers_are_twelve_sequence_by_hidden_buffers(precision, bytes_per_row_element):
    """Transformer Engine's initialize_ub registers one [seq x MBS / CP, hidden] buffer per overlapped GEMM (qkv, proj,
    fc1, fc2 x fprop, dgrad, wgrad) on every stage; by hand for Qwen3-235B-A22B at 16k, TP4 (ModelZoo R151's layout)."""
    lay = Layout(world_size=256, tp=4, pp=8, vpp=4, ep=8, account_for_embedding=True, account_for_loss=True)
    assert _ub(lay, Knobs(precision=precision, tp_comm_overlap=True)) == {16384 * 4096 * bytes_per_row_element}
    assert _ub(lay, Knobs(precision=precision)) == {0}
    cp2 = Layout(world_size=256, tp=4, cp=2, pp=8, vpp=4, ep=8, account_for_embedding=True, account_for_loss=True)
    wl = Workload(seq_length=32768, micro_batch_size=1, global_batch_size=256)
    assert _ub(cp2, Knobs(precision=precision, tp_comm_overlap=True), wl) == {16384 * 4096 * bytes_per_row_element}


def test_no_userbuffers_where_bridge_turns_the_overlap_off():
    """TP 1, or TP without sequence parallel: Megatron Bridge turns tp_comm_overlap off (training/comm_overlap.py)."""
    knobs = Knobs(precision="bf16", tp_comm_overlap=True)
    assert _ub(Layout(world_size=256, tp=1, pp=8, vpp=4, ep=8, account_for_embedding=True, account_for_loss=True),
               knobs) == {0}
    assert _ub(Layout(world_size=256, tp=4, pp=8, vpp=4, ep=8, account_for_embedding=True, account_for_loss=True,
                      sequence_parallel=False), knobs) == {0}


@pytest.mark.parametrize(("user", "message"), [
    ({"cuda_context_gib": -50}, "cuda_context_gib = -50 must be a number in [0, 1e+06) (GiB)"),
    ({"fragmentation_fraction": 2.0}, "fragmentation_fraction = 2.0 must be a number in [0, 1)"),
    ({"cuda_context_gibb": 1.5}, "unknown key 'cuda_context_gibb'"),
    ({"h100": {"cuda_context_gib": 5}}, "a section 'h100'"),
    ({"cuda_context_gib": True}, "cuda_context_gib = True must be a number"),
    ({"cuda_context_gib": "big"}, "cuda_context_gib = 'big' must be a number"),
    ({"deepep_buffer_gib": float("nan")}, "deepep_buffer_gib = nan must be a number"),
    ({"nccl_gib": 1e308}, "nccl_gib = 1e+308 must be a number in [0, 1e+06) (GiB)"),  # its bytes overflowed
])
def test_bad_overheads_are_one_error(user, message):
    """A negative or unknown overhead would quietly make a configuration fit (or do nothing): refused."""
    with pytest.raises(MoetuneError, match=re.escape(message)):
        merged_overheads(user)



def test_the_optimizer_offload_must_fit_the_host_too():
    """Megatron-Core's CPU offload keeps an FP32 copy, the Adam moments and an FP32 gradient of each offloaded
    parameter on the host (hybrid_optimizer.py): 16 B a parameter. DeepSeek-V3 on 16 GB300 at TP8 EP16 fits the
    GPU only with the whole optimizer offloaded, and that is over 600 GiB a GPU against a Grace's 223 GiB per GPU."""
    from moetune.layout.knobs import Knobs
    from moetune.layout.layout import Layout
    from moetune.layout.validate import Workload
    from moetune.planner.estimate import estimate
    from moetune.specs.hardware import load_gpu
    from moetune.specs.registry import load_model
    from moetune.walls.rank_params import stage_params
    gpu = load_gpu("gb300")
    lay = Layout(world_size=16, tp=8, pp=2, ep=8, pipeline_layout="Et*31|t*30mL")
    knobs = Knobs(precision="mxfp8", dispatcher="hybridep", recompute="full", optimizer_offload_fraction=1.0)
    e = estimate(load_model("deepseek-v3"), gpu, lay, Workload(seq_length=4096, global_batch_size=128), knobs)
    shards = [(-(-p.dense // (lay.dp * lay.cp)) + -(-p.expert // lay.edp)) for p in stage_params(e.model, lay)]
    assert e.host_peak_bytes == 16 * max(shards)
    assert e.host_peak_bytes > 600 * 2**30 and not e.host_fits and not e.fits
    assert e.to_json()["memory"]["host_fits"] is False
    import dataclasses
    unchecked = dataclasses.replace(gpu, host_memory_gib=0)  # a cluster file's 0: not known, not checked
    assert estimate(e.model, unchecked, lay, e.workload, knobs).fits == (e.peak_bytes <= gpu.capacity_bytes)


def test_hidden_dropout_masks_are_counted_where_the_launch_keeps_megatron_lms_default():
    """Megatron-LM trains with --hidden-dropout 0.1 unless told otherwise; bias-dropout-add keeps a one-byte mask of
    every residual branch's output (s x b x h, split by sequence parallelism) for the backward. A launch that leaves
    the flag out had been sized as if it ran none."""
    from moetune.configio import load_config
    from moetune.planner.from_config import from_config

    spec, args = load_model("qwen3-30b-a3b"), "--bf16 --expert-model-parallel-size 8 --seq-length 4096"
    sized = {}
    for extra in ("", " --hidden-dropout 0.0 --attention-dropout 0.0"):
        layout, workload, knobs = from_config(load_config(mlm_args=args + extra, gpu="h100", gpus=16))
        (stage,) = memory_wall(spec, layout, workload, knobs, arch="hopper")
        sized[bool(extra)] = stage.items
    mask = 4096 * spec.hidden_size * spec.num_layers  # one byte an element, one mask a branch, every layer
    assert sized[False]["act_attn_dropout_mask"] == sized[False]["act_mlp_dropout_mask"] == mask
    assert "act_attn_dropout_mask" not in sized[True]
