"""The optimizer state a parameter holds (model_state.py optimizer_state_bytes), which the memory wall charges and the
optimizer step's memory-bound update reads and writes (walls/iteration.py)."""

import pytest

from moetune.layout.knobs import Knobs
from moetune.walls.model_state import optimizer_state_bytes


@pytest.mark.parametrize(("knobs", "held"), [
    # Adam: FP32 master 4 + exp_avg 4 + exp_avg_sq 4 = 12 bytes on every parameter (Megatron-LM's 12/DP)
    (Knobs(), (12, 12)),
    # --bf16-moments (DeepSeek-V3 recipes): 4 + 2 + 2 = 8
    (Knobs(adam_moments_bytes=2), (8, 8)),
    # Muon: FP32 master 4 + one FP32 momentum 4 = 8 on the linear weights; the embedding and output layer on Adam, 12
    (Knobs(optimizer="muon"), (8, 12)),
    # the bytes are held whichever ranks share them: no distributed optimizer changes the shard, not the bytes
    (Knobs(optimizer="muon", distributed_optimizer=False), (8, 12)),
])
def test_state_held_per_parameter(knobs, held):
    assert optimizer_state_bytes(knobs) == held


@pytest.mark.parametrize(("precision", "weight"), [
    ("fp8-delayed", 1),  # the FP8 row-wise shard, cast with the scale of the amax history
    ("fp8-current", 1 + 4),  # and a read of the FP32 master for the fresh amax (TE compute_amax)
    ("fp8-blockwise", 1 + 4),  # per 128x128 block (fp8_block_scaling_compute_partial_amax)
    ("nvfp4", 0.5 + 4),  # packed E2M1, per 16x16 tile amax (nvfp4_multi_tensor_compute_partial_amax)
    ("mxfp8", 2),  # a BF16 copy staged in the gradient buffer, quantized after the gather
])
def test_the_step_writes_quantized_parameters_in_their_own_bytes(precision, weight):
    """With FP8/NVFP4 parameters the distributed optimizer quantizes its FP32 master shard into the parameter
    (Megatron-Core fp8_utils.quantize_param_shard, quantize_nvfp4_param_shard) instead of copying it to a BF16 weight;
    the embedding and output layer stay BF16. Adam moves 2 x 12 B of state and reads the 4 B FP32 gradient either
    way; the shards are R006's layout, gpt-oss-120b on 64 B200 (DP 64 dense, EDP 8 experts)."""
    from moetune.layout.layout import Layout
    from moetune.specs.hardware import load_gpu
    from moetune.specs.registry import load_model
    from moetune.walls.efficiency import efficiency
    from moetune.walls.iteration import iteration_terms
    gpu, lay, spec = load_gpu("b200"), Layout(world_size=64, ep=8), load_model("gpt-oss-120b")
    switch = "fp4_param_gather" if precision == "nvfp4" else "fp8_param_gather"
    on, off = Knobs(precision=precision, **{switch: True}), Knobs(precision=precision, **{switch: False})
    assert on.quantized_params and not off.quantized_params
    steps = [iteration_terms(spec, 1e9, 4e9, 1e8, lay, k, gpu, efficiency("b200"))[1] for k in (on, off)]
    quantized, vocab = (1e9 - 1e8) / 64 + 4e9 / 8, 1e8 / 64
    expected = (quantized * (2 * 12 + 4 + weight) + vocab * (2 * 12 + 4 + 2)) / ((quantized + vocab) * (2 * 12 + 4 + 2))
    assert steps[0] / steps[1] == pytest.approx(expected, rel=1e-12)
