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


# Kimi-K2's parameters Megatron builds other than 2-D, by hand from its config.json (hidden 7,168, q_lora_rank 1,536,
# kv_lora_rank 512, RMSNorm, no biases): a layer's input and pre-MLP norms and MLA's q and kv latent norms; the final
# norm on the last stage. At TP 1 nothing splits them.
LAYER_NORMS = 2 * 7168 + 1536 + 512
STAGE_NONMATRIX = [15 * LAYER_NORMS, 15 * LAYER_NORMS, 15 * LAYER_NORMS, 16 * LAYER_NORMS + 7168]
# the padded vocabulary (163,840, a multiple of 128) x hidden: the embedding on the first stage, the output layer on
# the last
VOCAB = 163840 * 7168


def test_muon_keeps_one_momentum_on_2d_weights_and_adam_on_the_vocabulary_and_the_rest():
    """Megatron's Muon steps a parameter only when it is 2-D and not the embedding or output layer (optimizer/muon.py
    :252-258 @core_v0.16.1); Adam keeps its two moments on the rest (norms here). moetune had charged the norms at
    Muon's bytes."""
    for p, nonmatrix, vocab in zip(stage_params(KIMI, LAYOUT), STAGE_NONMATRIX, [VOCAB, 0, 0, VOCAB], strict=True):
        assert (p.nonmatrix, p.expert_nonmatrix, p.vocab) == (nonmatrix, 0, vocab)
        for dist in (True, False):
            adam = model_state_bytes(p, LAYOUT, Knobs(distributed_optimizer=dist), "hopper")["optimizer_states"]
            muon = model_state_bytes(p, LAYOUT, Knobs(distributed_optimizer=dist, optimizer="muon"),
                                     "hopper")["optimizer_states"]
            dense_shard = LAYOUT.dp * LAYOUT.cp if dist else 1
            shard = -(-p.dense // dense_shard) + -(-p.expert // (LAYOUT.edp if dist else 1))
            on_adam = -(-(vocab + nonmatrix) // dense_shard)
            assert adam == 12 * shard and muon == 8 * (shard - on_adam) + 12 * on_adam


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


@pytest.mark.parametrize(("model", "layout"), [
    ("gpt-oss-20b", Layout(world_size=32, tp=2, pp=2, ep=8)),  # routed experts' biases, sharded over EDP
    ("nemotron3-nano-30b-a3b", Layout(world_size=32, tp=2, pp=2, ep=4)),  # Mamba's conv1d, A_log, D, dt_bias
])
def test_the_planner_batch_prices_muon_as_estimate_does(model, layout):
    """walls/batch_bytes.py reads the non-2-D counts through the batch (LayoutBatch.nonmatrix, expert_nonmatrix)."""
    from moetune.walls.batch import batch_step_seconds
    from moetune.walls.batch_bytes import batch_state_bytes
    from moetune.walls.batch_layouts import build_batch
    from moetune.walls.efficiency import efficiency
    spec, gpu, knobs = load_model(model), load_gpu("h100"), Knobs(optimizer="muon", precision="bf16")
    batch = build_batch(spec, [(layout, 1)])
    scalar = max(sum(model_state_bytes(p, layout, knobs, "hopper").values()) for p in stage_params(spec, layout))
    assert batch_state_bytes(spec, batch, knobs, "hopper")[0] == scalar
    wl = Workload(seq_length=4096, global_batch_size=256)
    step = batch_step_seconds(spec, batch, 4096, 256, knobs, gpu, efficiency(gpu.key))["step"][0]
    assert float(step) == pytest.approx(estimate(spec, gpu, layout, wl, knobs).time["step_seconds"], rel=1e-12)
