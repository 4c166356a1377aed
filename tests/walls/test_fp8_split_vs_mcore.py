"""The weights Transformer Engine quantizes on one rank of each pipeline stage: moetune's count
(rank_params.StageParams.quantized) vs the model Megatron-Core 0.16.1 builds on `meta`, where a parameter counts when it
is the `weight` of a linear layer other than the output layer (moetune.oracle.fp8_split: the router, a shared expert's
gate, norms and biases do not). Exact equality, layout by layout, on the layouts test_muon_split_vs_mcore.py builds,
whose batch test holds the planner's batch to the same counts."""

import pytest

pytest.importorskip("megatron.core")

from tests.walls.test_muon_split_vs_mcore import CASES, oracle_and_ours  # noqa: E402

from moetune.oracle.fp8_split import quantized_per_stage  # noqa: E402


@pytest.mark.parametrize(("model", "kwargs", "layer_spec"), CASES, ids=[c[0] for c in CASES])
def test_the_quantized_weights_equal_megatron_cores_linear_weights(model, kwargs, layer_spec, shared_data):
    theirs, ours = oracle_and_ours(quantized_per_stage, model, kwargs, layer_spec, shared_data)
    assert [s.quantized for s in ours] == theirs
    # not vacuous: the router (in every case) and the norms are held but not quantized
    assert all(s.quantized < s.total - s.vocab - s.nonmatrix - s.expert_nonmatrix for s in ours)
