"""Muon's optimizer state (walls/model_state.py): Kimi-K2's Bridge recipes run dist_muon, Muon under
the layer-wise distributed optimizer; moetune had charged Adam's two moments unsharded and called the shipped GB200
recipe out of memory (check audit: 204.5 GiB of 185)."""

import pytest

from moetune.configio import load_config
from moetune.errors import MoetuneError
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.config_map import to_config
from moetune.planner.estimate import estimate
from moetune.planner.from_config import from_config
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls.model_state import model_state_bytes
from moetune.walls.rank_params import stage_params

KIMI = load_model("kimi-k2")
LAYOUT = Layout(world_size=256, pp=4, ep=64, pipeline_layout="Et*15|t*15|t*15|t*16L")


def test_muon_keeps_one_momentum_on_linear_weights_and_adam_on_the_vocabulary():
    for p in stage_params(KIMI, LAYOUT):
        for dist in (True, False):
            adam = model_state_bytes(p, LAYOUT, Knobs(distributed_optimizer=dist), "hopper")["optimizer_states"]
            muon = model_state_bytes(p, LAYOUT, Knobs(distributed_optimizer=dist, optimizer="muon"),
                                     "hopper")["optimizer_states"]
            dense_shard = LAYOUT.dp * LAYOUT.cp if dist else 1
            shard = -(-p.dense // dense_shard) + -(-p.expert // (LAYOUT.edp if dist else 1))
            vocab = -(-p.vocab // dense_shard)
            assert adam == 12 * shard and muon == 8 * (shard - vocab) + 12 * vocab


def test_dist_muon_reads_and_writes_as_bridge_spells_it():
    config = load_config(sets=["optimizer.optimizer=dist_muon", "ddp.use_distributed_optimizer=false",
                               "optimizer.use_distributed_optimizer=false", "model.expert_model_parallel_size=64",
                               "model.pipeline_model_parallel_size=4", "train.global_batch_size=4096"],
                         gpu="gb200", gpus=256)
    _, _, knobs = from_config(config)
    assert (knobs.optimizer, knobs.distributed_optimizer) == ("muon", True)
    e = estimate(KIMI, load_gpu("gb200"), LAYOUT, Workload(seq_length=4096, global_batch_size=4096), knobs)
    out = to_config(e)
    assert (out["optimizer.optimizer"], out["ddp.use_distributed_optimizer"], out["ddp.overlap_param_gather"]) == \
        ("dist_muon", False, False)
    assert from_config(out)[2] == knobs  # round trip


@pytest.mark.parametrize(("sets", "needle"), [
    (["optimizer.optimizer=sgd"], "moetune models adam, muon and dist_muon"),
])
def test_an_optimizer_moetune_does_not_model_is_one_line(sets, needle):
    with pytest.raises(MoetuneError, match=needle):
        from_config(load_config(sets=sets, gpu="h100", gpus=8))


def test_muon_takes_no_precision_aware_state():
    with pytest.raises(MoetuneError, match="Muon runs without the precision-aware optimizer"):
        Knobs(optimizer="muon", adam_moments_bytes=2)
