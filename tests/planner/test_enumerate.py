"""How the search splits layers over pipeline stages (planner/enumerate.py)."""

from moetune.layout.layout import Layout, parse_pipeline_layout
from moetune.layout.pipeline import pipeline_chunks
from moetune.layout.validate import Workload
from moetune.planner.enumerate import pipeline_variants, tp_cp_sizes
from moetune.planner.search import plan
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model


def test_a_pipeline_no_other_split_places_gets_a_balanced_one():
    """61 layers (DeepSeek-V3, one MTP layer) over PP25: every stage full but the last leaves it none and 64 units do
    not divide by 25, so no split had been tried; the balanced one gives each stage 2 or 3 layers, the 3s in the
    middle, and Megatron's layout grammar places all 61 and the MTP layer."""
    [split] = pipeline_variants(61, 25, 1, 1)
    text = split["pipeline_layout"]
    assert len(parse_pipeline_layout(text)) == 25
    chunks = pipeline_chunks(Layout(world_size=25, pp=25, pipeline_layout=text), 61, 1)
    per_rank = [len(c.layers) for (c,) in chunks]
    assert sum(per_rank) == 61 and set(per_rank) == {2, 3} and per_rank[0] == per_rank[-1] == 2
    assert chunks[-1][0].mtp_layers == 1 and chunks[-1][0].loss and chunks[0][0].embedding
    assert text == "Ett|(t*3|)*11(tt|)*12ttmL"


def test_with_vpp_the_search_keeps_to_the_known_splits():
    """The fallback is for plain pipelines: with VPP (27 layers over PP4 x VPP4) no split is added, which keeps the
    search's layout count (and its time, bench/bench_plan.py) where it was."""
    assert pipeline_variants(27, 4, 4, 0) == []


def test_a_pinned_vpp_gets_the_balanced_split_the_full_search_skips():
    """Kimi-K2's 61 layers over PP4 x VPP3 fit none of the split flags, and the full search keeps the balanced string
    to plain pipelines; pinned (`--fix pp=4 --fix vpp=3`), plan had answered that no split of the layers runs while
    estimate ran a layout string over the same stages. The pinned search now tries the balanced one."""
    spec, wl = load_model("kimi-k2"), Workload(seq_length=4096, global_batch_size=1536)
    [split] = pipeline_variants(61, 4, 3, 0, balanced=True)
    chunks = pipeline_chunks(Layout(world_size=192, pp=4, vpp=3, pipeline_layout=split["pipeline_layout"]), 61, 0)
    assert sum(len(c.layers) for rank in chunks for c in rank) == 61
    result = plan(spec, load_gpu("h100"), 192, wl, fixed={"pp": 4, "vpp": 3}, top=1)
    assert result.results and result.results[0].layout.vpp == 3 and result.results[0].fits


def test_deepseek_v3_on_a_thousand_h100s_finds_a_fitting_layout():
    """1,000 GPUs = 2^3 x 5^3: the pipelines deep enough to fit DeepSeek-V3 in 80 GB there (PP20, 25, 40, 50) split
    its 61 layers by neither the stage flags nor the MTP layout, so plan had answered "nothing fits" (fuzz audit)."""
    result = plan(load_model("deepseek-v3"), load_gpu("h100"), 1000, Workload(seq_length=4096, global_batch_size=8000),
                  top=1)
    assert result.results and result.results[0].layout.pp in (20, 25, 40, 50) and result.results[0].fits



def test_a_pinned_cp_exchange_plans_only_layouts_that_exchange():
    """--fix cp_comm_type=a2a had returned CP 1 layouts (cp_comm_type p2p in the result, the pin silently dropped),
    which estimate refuses as --cp-comm-type a2a at CP 1 (audit: kimi-k2 on 1024 H100, GBS 4096, picked TP4 CP1)."""
    result = plan(load_model("glm-4.5-air"), load_gpu("h100"), 64, Workload(seq_length=4096, global_batch_size=512),
                  fixed={"cp_comm_type": "a2a"}, top=5)
    assert result.results and all(e.layout.cp > 1 and e.knobs.cp_comm_type == "a2a" for e in result.results)


def test_a_pinned_p2p_keeps_cp_1_in_the_search():
    """p2p is the exchange a CP-1 layout reports (Megatron-Core validates cp_comm_type only at CP > 1), so a p2p pin
    leaves CP 1 in the search as no pin does; any other pinned exchange still asks for CP > 1."""
    gpu = load_gpu("h100")
    free = tp_cp_sizes(gpu, 16, 4096, {})
    assert 1 in free[1] and tp_cp_sizes(gpu, 16, 4096, {"cp_comm_type": "p2p"}) == free
    assert tp_cp_sizes(gpu, 16, 4096, {"cp_comm_type": "a2a"})[1] == [c for c in free[1] if c > 1]
