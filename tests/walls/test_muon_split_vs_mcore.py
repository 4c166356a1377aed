"""What Muon leaves to Adam on one rank of each pipeline stage: moetune's count (rank_params.StageParams vocab,
nonmatrix and expert_nonmatrix) vs the model Megatron-Core 0.16.1 builds on `meta`, read by Megatron's own rule
(optimizer/muon.py:252-258 @core_v0.16.1: 2-D and not is_embedding_or_output_parameter is Muon's; moetune.oracle
.muon_split). Exact equality, layout by layout; the scalar path and the planner's batch alike."""

import json

import pytest

pytest.importorskip("megatron.core")

from moetune.layout.layout import Layout  # noqa: E402
from moetune.oracle import muon_adam_per_stage  # noqa: E402
from moetune.specs.registry import load_model  # noqa: E402
from moetune.walls.batch_layouts import build_batch  # noqa: E402
from moetune.walls.rank_params import padded_vocab_size, stage_params  # noqa: E402

CASES = [
    # (model, layout kwargs, layer spec)
    # dense attention with per-head q/k norms, ETP under EP, VPP
    ("qwen3-30b-a3b", dict(world_size=32, tp=2, pp=2, vpp=2, ep=8, etp=2), "te"),
    # MLA's q/kv latent norms, an MTP layer (its norms, and the embedding copy its stage builds) on the last stage
    ("deepseek-v3", dict(world_size=64, tp=2, pp=4, ep=8, first_stage_layers=13, last_stage_layers=18), "te"),
    ("moonlight-16b-a3b", dict(world_size=16, tp=2, pp=1, ep=8), "te"),
    # gated delta-net: a 3-D conv1d weight, A_log and dt_bias split over TP, the output norm whole
    ("qwen3-next-80b-a3b", dict(world_size=64, tp=4, pp=2, vpp=2, ep=32), "te"),
    # Mamba-2: conv1d weight and bias, A_log, D, dt_bias, the gated norm, all over TP
    ("nemotron3-nano-30b-a3b", dict(world_size=32, tp=4, pp=4, ep=8, first_stage_layers=12, last_stage_layers=14),
     "local"),
    # routed experts' biases (expert_nonmatrix), the router's bias and the attention sinks
    ("gpt-oss-20b", dict(world_size=16, tp=2, pp=2, vpp=2, ep=4), "te"),
    # LayerNorm biases, QKV and output-projection biases; a tied-embedding model's output copy on the last stage
    ("phi-3.5-moe", dict(world_size=16, tp=4, pp=2, vpp=2, ep=2), "local"),
    ("ernie-4.5-21b-a3b", dict(world_size=32, tp=2, pp=2, vpp=2, ep=8), "te"),
]


def _oracle_kwargs(lay: Layout) -> dict:
    vpp = lay.vpp if lay.pipeline_layout is None and lay.vpp > 1 else None
    return dict(tp=lay.tp, pp=lay.pp, ep=lay.ep, etp=lay.etp, vpp=vpp, world_size=lay.world_size,
                num_layers_in_first_pipeline_stage=lay.first_stage_layers,
                num_layers_in_last_pipeline_stage=lay.last_stage_layers)


def oracle_and_ours(counter, model: str, kwargs: dict, layer_spec: str, shared_data) -> tuple:
    """(the oracle `counter`'s per-stage answer, moetune's stage_params) for one case of CASES."""
    spec, lay = load_model(model), Layout(**kwargs)
    hf = json.loads((shared_data / "models" / f"{model}.config.json").read_text())
    padded = padded_vocab_size(spec.vocab_size, lay.tp, spec.vocab_divisor)
    theirs = counter(hf, padded_vocab_size=padded, spec=layer_spec, **_oracle_kwargs(lay))
    return theirs, stage_params(spec, lay, layer_spec=layer_spec)


@pytest.mark.parametrize(("model", "kwargs", "layer_spec"), CASES, ids=[c[0] for c in CASES])
def test_what_muon_leaves_to_adam_equals_megatron_core(model, kwargs, layer_spec, shared_data):
    theirs, stages = oracle_and_ours(muon_adam_per_stage, model, kwargs, layer_spec, shared_data)
    ours = [dict(vocab=s.vocab, nonmatrix=s.nonmatrix, expert_nonmatrix=s.expert_nonmatrix) for s in stages]
    assert ours == theirs
    assert any(s["nonmatrix"] for s in theirs)  # the count is not vacuous


@pytest.mark.parametrize(("model", "kwargs"), [(m, kw) for m, kw, spec in CASES if spec == "te"],
                         ids=[m for m, _, spec in CASES if spec == "te"])
def test_the_planner_batch_counts_as_the_scalar_path(model, kwargs):
    spec, lay = load_model(model), Layout(**kwargs)
    batch = build_batch(spec, [(lay, 1)])
    scalar = stage_params(spec, lay)
    for field in ("nonmatrix", "expert_nonmatrix", "vocab", "quantized"):  # quantized: test_fp8_split_vs_mcore.py
        kept = getattr(batch, field)[0][batch.valid[0]]
        # the batch keeps each distinct stage once (batch_layouts._distinct), at its lowest index
        assert list(kept) == [getattr(scalar[i], field) for i in batch.stage_index[0][batch.valid[0]]]
