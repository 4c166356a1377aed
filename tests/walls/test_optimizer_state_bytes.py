"""The optimizer state a parameter holds (walls/memory.py optimizer_state_bytes), which the memory wall charges and the
optimizer step's memory-bound update reads and writes (walls/iteration.py)."""

import pytest

from moetune.layout.knobs import Knobs
from moetune.walls.memory import optimizer_state_bytes


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
