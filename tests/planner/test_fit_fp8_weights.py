"""explain's Fit ladder takes FP8 weights first where an FP8 recipe keeps BF16 weights with Transformer Engine's FP8
copies beside them (Hopper's blockwise preset, Megatron-Bridge training/mixed_precision.py
bf16_with_fp8_subchannel_scaling_mixed: fp8_param_gather False): the seeds' memory wall names FP8 among its fixes
(seeds/000 Phase 3 table) and Bridge's performance guide keeps parameters in FP8 to lower memory (docs/
performance-guide.md, fp8_param_gather). The ladder had kept the recipe's BF16 weights and gone to recompute."""

import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.config_map import to_config
from moetune.planner.estimate import estimate
from moetune.planner.explain import explain
from moetune.planner.from_config import from_config
from moetune.planner.moves import apply_move, moves
from moetune.rules import derive, evaluate
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model


def _qwen(precision: str, seq: int = 4096, **knobs):
    """Qwen3-30B-A3B on 16 H100 at PP2 EP4 with the platform's DeepEP and TE-scoped graphs (seeds/000 First Answer
    Checklist): a GiB over the GPU under blockwise FP8 at 4K tokens."""
    return estimate(load_model("qwen3-30b-a3b"), load_gpu("h100"), Layout(world_size=16, pp=2, ep=4),
                    Workload(seq_length=seq, micro_batch_size=1, global_batch_size=1024),
                    Knobs(precision=precision, dispatcher="deepep",
                          cuda_graph_scope=("attn", "moe_router", "moe_preprocess"), **knobs))


def _ladder(e) -> list[dict]:
    return [s for s in explain(e)["fit"]["steps"] if "change" in s]


def test_blockwise_fp8_takes_fp8_weights_before_any_recompute():
    e = _qwen("fp8-blockwise")
    stage = e.stages[e.worst_stage]
    assert not e.fits and "fp8_weight_cache" in stage.items and not e.knobs.fp8_params
    ladder = _ladder(e)
    first = ladder[0]
    assert first["step"] == "fp8_weights" and first["change"] == {"mixed_precision.fp8_param_gather": True}
    # the BF16 copy of the GEMM weights goes (docs/memory.md: 2 B a parameter less), and that alone fits here: no
    # recompute step follows, and the run keeps its throughput (within 1%), above the recompute the ladder had taken
    assert first["fits"] and first["peak_gib"] < e.peak_bytes / 2**30 and len(ladder) == 1
    assert first["tokens_per_s_per_gpu"] > 0.99 * e.time["tokens_per_s_per_gpu"]
    recomputed = apply_move(e, moves()["selective_recompute_moe_act"])
    assert first["tokens_per_s_per_gpu"] > recomputed.time["tokens_per_s_per_gpu"]
    config = {**to_config(e), **first["change"]}
    assert from_config(config)[2].fp8_params  # the overrides give the weights the step sized
    assert not [f.rule for f in evaluate(config, derive(config), context="check")
                if f.severity == "error" and not f.rule.startswith("fit.")]


# no FP8 recipe; FP8 weights already (tensorwise's preset); stated off beside the optimizer offload, which steps only
# delayed FP8 weights (Megatron-LM validate_args)
@pytest.mark.parametrize("knobs", [dict(precision="bf16"), dict(precision="fp8-current"),
                                   dict(precision="fp8-blockwise", optimizer_offload_fraction=0.5)])
def test_no_fp8_weights_step_where_there_is_nothing_to_drop_or_it_is_refused(knobs):
    e = _qwen(seq=8192, **knobs)
    assert not e.fits and "fp8_weights" not in [s["step"] for s in explain(e)["fit"]["steps"]]
