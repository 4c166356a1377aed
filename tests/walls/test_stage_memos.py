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
# two global batches: the micro-batches a step runs change its bubble and in-flight activations, not a stage's layers
RUNS = [(KNOBS[0], WL), (KNOBS[1], WL),
        (KNOBS[0], Workload(seq_length=4096, micro_batch_size=1, global_batch_size=2048))]


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
    for vpp in (2, 3):  # interleaved: what a stage holds alike, its micro-batches in flight not (memory.in_flight)
        middle = (layers - 2) // (pp * vpp - 1)
        counts = [layers - middle * (pp * vpp - 1), *[middle] * (pp * vpp - 1)]
        out.append(Layout(pp=pp, pipeline_layout=write_pipeline_layout(counts, mtp), **common))
    if (layers + 2) % pp == 0:
        out.append(Layout(pp=pp, account_for_embedding=True, account_for_loss=True, **common))
    return out[:-4:max(1, len(out) // 12)] + out[-4:]  # a dozen or so across the range, and the last four


CASES = [  # (model, layouts): each model's layer kinds differ from stage to stage under some split
    # two pipeline depths under one outer key (the stage-boundary send/recv follows PP)
    ("deepseek-v3", _splits(61, 8, 1, world_size=256, tp=2, ep=32) + _splits(61, 4, 1, world_size=256, tp=2, ep=32)),
    ("qwen3-next-80b-a3b", _splits(48, 4, 0, world_size=64, tp=2, ep=16)),
    ("gpt-oss-120b", _splits(36, 4, 0, world_size=32, tp=1, ep=8)),
]


class _Forgetful(dict):
    """A memo that never finds what it holds: every lookup misses, so every stage is worked out anew."""

    def __contains__(self, key) -> bool:
        return False


def _forgetting(monkeypatch) -> None:
    """The two stage memos forget: every stage, layer kind and shared part is worked out again on each call."""
    for module in (memory, step):
        def forgetful(store, key, make, limit):
            made = make()  # the entry's memos, empty: dicts made forgetful, anything else (a list of parts) left new
            fresh = [_Forgetful() if isinstance(x, dict) else x for x in made]
            return made._make(fresh) if hasattr(made, "_make") else tuple(fresh)
        monkeypatch.setattr(module, "remembered_stages", forgetful)


def _memory(spec, lay, knobs, wl):
    return memory.memory_wall(spec, lay, wl, knobs, arch="hopper")


def _times(spec, lay, knobs, wl):
    return step.stage_times(spec, lay, wl, knobs, H100, efficiency("h100"))


def _step(spec, lay, knobs, wl):  # the step's iteration terms are kept in the stage-time memo too
    return step.step_time(spec, lay, wl, knobs, H100, efficiency("h100"))


@pytest.mark.parametrize(("name", "layouts"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("wall", [_memory, _times, _step], ids=["memory_wall", "stage_times", "step_time"])
def test_a_stage_remembered_under_another_split_is_the_stage_worked_out_afresh(name, layouts, wall, monkeypatch):
    spec = load_model(name)
    assert len(layouts) >= 5, "the case should hold several splits sharing one outer key"
    remembered = {}
    memory._STAGE_MEMORY.clear(), step._LAYER_TIMES.clear()
    for knobs, wl in RUNS:  # one memo across the runs, as a search shares it
        for lay in [*layouts, *layouts]:  # each split after the ones before it, then after all of them
            remembered.setdefault((knobs, wl, lay), []).append(wall(spec, lay, knobs, wl))
    _forgetting(monkeypatch)
    for (knobs, wl, lay), answers in remembered.items():
        fresh = wall(spec, lay, knobs, wl)
        assert answers == [fresh, fresh], (knobs.precision, wl.global_batch_size, lay)


def test_the_splits_differ_in_what_their_stages_hold():
    """The splits above do put different layers on a stage, or the test would compare a stage with itself."""
    spec = load_model("deepseek-v3")
    totals = {tuple(s.total for s in _memory(spec, lay, KNOBS[0], WL)) for lay in CASES[0][1]}
    assert len(totals) >= 5
    assert len({lay.pp for lay in CASES[0][1]}) == 2 and {lay.vpp for lay in CASES[0][1]} == {1, 2, 3}


def test_the_remembered_iteration_terms_follow_the_micro_batches_where_megatron_fsdp_reads_them(monkeypatch):
    """Megatron FSDP's gathers across its optimizer copies (outer strategy "optim") run once a micro-batch, so the
    step's iteration terms kept in the stage-time memo must tell two global batches apart (walls/iteration.py
    dp_traffic); gpt-oss-120b on 32 H100 at EP 4: EDP 2, two copies."""
    spec = load_model("gpt-oss-120b")
    knobs = Knobs(megatron_fsdp="optim_grads_params", num_distributed_optimizer_instances=2,
                  outer_dp_sharding_strategy="optim")
    layouts = _splits(36, 4, 0, world_size=32, tp=1, ep=4)
    runs = [WL, Workload(seq_length=4096, micro_batch_size=1, global_batch_size=16)]  # 64 and 2 micro-batches
    memory._STAGE_MEMORY.clear(), step._LAYER_TIMES.clear()
    remembered = {(wl, lay): _step(spec, lay, knobs, wl) for wl in runs for lay in layouts}
    _forgetting(monkeypatch)
    for (wl, lay), answer in remembered.items():
        assert answer == _step(spec, lay, knobs, wl), (wl.global_batch_size, lay)
