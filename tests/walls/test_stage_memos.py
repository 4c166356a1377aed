"""memory_wall and stage_times remember each pipeline stage's figures under a key that leaves the split out
(walls/memory.py _STAGE_MEMORY, walls/step.py _LAYER_TIMES): the claim is that a stage's bytes and seconds follow
from what it holds (its layers by kind, embedding, loss, MTP layers) and its place alone, whatever split put them
there. Here every split of a layout is worked out after the memo has seen all the others, and again with a memo that
forgets (each stage and each layer kind worked out afresh): the two must agree item by item, on models whose stages
differ in kind (dense-first MoE with MTP, hybrid gated delta-net, sliding-window layers)."""

import pytest

from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout, write_pipeline_layout
from moetune.layout.validate import Workload
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model
from moetune.walls import memory, step
from moetune.walls.efficiency import efficiency

H100 = load_gpu("h100")
WL = Workload(seq_length=4096, micro_batch_size=1, global_batch_size=512)
KNOBS = (Knobs(precision="bf16"), Knobs(precision="fp8-blockwise", recompute="selective",
                                        recompute_modules=("moe_act", "layernorm")))


def _splits(layers: int, pp: int, mtp: int, **common) -> list[Layout]:
    """Uneven first/last splits, an explicit pipeline layout, and the split accounting for embedding and loss."""
    out = []
    for first in range(1, layers):
        for last in range(1, layers - first):
            if (layers - first - last) % (pp - 2) == 0 and (layers - first - last) // (pp - 2) >= 1:
                out.append(Layout(pp=pp, first_stage_layers=first, last_stage_layers=last, **common))
    middle = (layers - 2) // (pp - 1)
    counts = [layers - middle * (pp - 1), *[middle] * (pp - 1)]
    out.append(Layout(pp=pp, pipeline_layout=write_pipeline_layout(counts, mtp), **common))
    if (layers + 2) % pp == 0:
        out.append(Layout(pp=pp, account_for_embedding=True, account_for_loss=True, **common))
    return out[:: max(1, len(out) // 12)]  # a dozen or so, across the range


CASES = [  # (model, layouts): each model's layer kinds differ from stage to stage under some split
    # two pipeline depths under one outer key (the stage-boundary send/recv follows PP)
    ("deepseek-v3", _splits(61, 8, 1, world_size=256, tp=2, ep=32) + _splits(61, 4, 1, world_size=256, tp=2, ep=32)),
    ("qwen3-next-80b-a3b", _splits(48, 4, 1, world_size=64, tp=2, ep=16)),
    ("gpt-oss-120b", _splits(36, 4, 0, world_size=32, tp=1, ep=8)),
]


class _Forgetful(dict):
    """A memo that never finds what it holds: every lookup misses, so every stage is worked out anew."""

    def __contains__(self, key) -> bool:
        return False


def _forgetting(monkeypatch) -> None:
    """The two stage memos forget; every other memo of those modules works as it does."""
    for module, stages in ((memory, memory._STAGE_MEMORY), (step, step._LAYER_TIMES)):
        def forgetful(store, key, make, limit, stages=stages, real=module.remembered):
            return (_Forgetful(), _Forgetful()) if store is stages else real(store, key, make, limit)
        monkeypatch.setattr(module, "remembered", forgetful)


def _memory(spec, lay, knobs):
    return memory.memory_wall(spec, lay, WL, knobs, arch="hopper")


def _times(spec, lay, knobs):
    return step.stage_times(spec, lay, WL, knobs, H100, efficiency("h100"))


@pytest.mark.parametrize(("name", "layouts"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("wall", [_memory, _times], ids=["memory_wall", "stage_times"])
def test_a_stage_remembered_under_another_split_is_the_stage_worked_out_afresh(name, layouts, wall, monkeypatch):
    spec = load_model(name)
    assert len(layouts) >= 5, "the case should hold several splits sharing one outer key"
    remembered = {}
    for knobs in KNOBS:
        memory._STAGE_MEMORY.clear(), step._LAYER_TIMES.clear()
        for lay in [*layouts, *layouts]:  # each split after the ones before it, then after all of them
            remembered.setdefault((knobs, lay), []).append(wall(spec, lay, knobs))
    _forgetting(monkeypatch)
    for (knobs, lay), answers in remembered.items():
        fresh = wall(spec, lay, knobs)
        assert answers == [fresh, fresh], (knobs.precision, lay)


def test_the_splits_differ_in_what_their_stages_hold():
    """The splits above do put different layers on a stage, or the test would compare a stage with itself."""
    spec = load_model("deepseek-v3")
    totals = {tuple(s.total for s in _memory(spec, lay, KNOBS[0])) for lay in CASES[0][1]}
    assert len(totals) >= 5
    assert len({lay.pp for lay in CASES[0][1]}) == 2
