"""Every illegal layout is rejected with the rule it breaks; legal ones derive DP/EDP and stage contents."""

import re
from dataclasses import replace

import pytest

from moetune.errors import MoetuneError
from moetune.layout.cp_sizing import attention_share, shard_cp, undersharded_cp
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout, layout_stages, layout_stages_or_none, write_pipeline_layout
from moetune.layout.pipeline import parse_pipeline_layout, pipeline_chunks
from moetune.layout.validate import (
    Workload,
    sequence_refusal,
    validate,
    validate_knobs,
    validate_model_layout,
    validate_shapes,
    validate_workload,
)
from moetune.specs.registry import load_model


def test_folded_meshes_cover_the_world():
    lay = Layout(world_size=1024, tp=2, cp=2, pp=8, ep=64, etp=1)
    assert (lay.dp, lay.edp) == (32, 2)
    assert lay.tp * lay.cp * lay.dp * lay.pp == lay.etp * lay.ep * lay.edp * lay.pp == 1024


@pytest.mark.parametrize(("kwargs", "needle"), [
    (dict(world_size=12, tp=8), "TP*CP*PP"),
    (dict(world_size=16, ep=3), "ETP*EP*PP"),
    (dict(world_size=16, tp=0), "tp (0) must be at least 1"),
    (dict(world_size=16, vpp=2), "vpp (2) needs pp > 1"),
    (dict(world_size=16, pp=2, first_stage_layers=3, pipeline_layout="Et|tL"), "not both"),
    (dict(world_size=64, pp=8, vpp=4, pipeline_layout="Et*4|(t*4|)*14tmL"), "vpp (4) contradicts"),
    (dict(world_size=96, pp=3, pipeline_layout="Et*4|(t*4|)*14tmL"), "16 stages, not a multiple of pp (3)"),
])
def test_mesh_rules(kwargs, needle):
    with pytest.raises(MoetuneError, match=needle.replace("*", r"\*").replace("(", r"\(").replace(")", r"\)")):
        Layout(**kwargs)


@pytest.mark.parametrize(("model", "kwargs", "workload", "needle"), [
    ("qwen3-30b-a3b", dict(world_size=24, tp=3), {}, "num_attention_heads"),   # 32 heads
    # 48 heads, 8 KV groups: TP 6 neither divides them nor is a multiple (transformer_config.py asserts one)
    ("minimax-m2", dict(world_size=12, tp=6, ep=4), {}, "num_query_groups \\(8\\) must be a multiple or a divisor"),
    # ... and the fix offers no multiple of them, which its key norm over all heads rules out (TP 16 below)
    ("minimax-m2", dict(world_size=12, tp=12, ep=4), {}, "choose a --tp that divides it: minimax-m2's key norm spans"),
    # TP 16 past the 8 KV groups runs elsewhere (Megatron-Core >= 0.16), but MiniMax-M2's one key norm over all heads
    # has no shard a rank holding a copy of one group could take
    ("minimax-m2", dict(world_size=16, tp=16, ep=4), {}, "key norm spans all heads"),
    ("mixtral-8x7b", dict(world_size=16, ep=16), {}, "num_moe_experts"),        # 8 experts
    ("qwen3-30b-a3b", dict(world_size=50, pp=5, vpp=2), {}, "PP\\*VPP"),         # 48 layers vs 10 chunks
    ("deepseek-v3", dict(world_size=64, pp=8, ep=8), {}, "num_layers \\(61\\)"),  # 61 layers vs 8
    ("qwen3-30b-a3b", dict(world_size=16, ep=8), dict(global_batch_size=12), "global batch size \\(12\\)"),
    ("qwen3-30b-a3b", dict(world_size=16, tp=2, ep=8), dict(seq_length=4097), "sequence length \\(4097\\)"),
    ("qwen3-30b-a3b", dict(world_size=16, cp=4, ep=4), dict(seq_length=4100), "2 x CP"),
    ("qwen3-30b-a3b", dict(world_size=16, tp=2, ep=8, sequence_parallel=False), {}, "sequence parallel"),
    ("mixtral-8x7b", dict(world_size=40, etp=5, ep=8), {}, "moe_ffn_hidden_size"),  # 14336 % 5
    # Megatron's interleaved schedule: micro-batches a multiple of PP (12 / (1 x 4) = 3 over PP 2)
    ("qwen3-30b-a3b", dict(world_size=8, pp=2, vpp=2, ep=4), dict(global_batch_size=12),
     "number of micro-batches \\(3 = GBS 12 / \\(MBS x DP\\) 4\\) must be a multiple of PP \\(2\\)"),
    ("qwen3-30b-a3b", dict(world_size=16, pp=2, ep=8, first_stage_layers=0), {}, "must be a positive multiple"),
    ("qwen3-next-80b-a3b", dict(world_size=64, cp=32, ep=2), dict(seq_length=131072), "linear_num_key_heads"),
])
def test_model_and_workload_rules(model, kwargs, workload, needle):
    spec = load_model(model)
    lay = Layout(**kwargs)
    with pytest.raises(MoetuneError, match=needle):
        validate(spec, lay, Workload(**workload))


def test_deepseek_v3_recipe_layout_string():
    # The DeepSeek-V3 recipes' "Et*4|(t*4|)*14tmL": 16 virtual stages, 61 layers, MTP with the loss.
    stages = parse_pipeline_layout("Et*4|(t*4|)*14tmL")
    assert len(stages) == 16 and "".join(stages).count("t") == 61
    grid = pipeline_chunks(Layout(world_size=64, pp=8, vpp=2, ep=8, pipeline_layout="Et*4|(t*4|)*14tmL"), 61, 1)
    # stage s of the flat list is chunk s // PP of pipeline rank s % PP
    assert grid[0][0].layers == (0, 1, 2, 3) and grid[0][0].embedding
    assert grid[0][1].layers == tuple(range(32, 36))
    assert grid[7][1].layers == (60,) and grid[7][1].mtp_layers == 1 and grid[7][1].loss


def test_vpp_is_derived_from_a_layout_string():
    """Megatron derives VPP from pipeline_model_parallel_layout and accepts an equal explicit value."""
    assert Layout(world_size=64, pp=8, pipeline_layout="Et*4|(t*4|)*14tmL").vpp == 2
    assert Layout(world_size=64, pp=8, vpp=2, pipeline_layout="Et*4|(t*4|)*14tmL").vpp == 2


def test_uneven_middle_must_split_evenly():
    # 20 - 4 - 2 = 14 middle layers over 2 middle stages x 2 virtual chunks: 3.5 each, rejected
    with pytest.raises(MoetuneError, match="14 layers left"):
        pipeline_chunks(Layout(world_size=8, pp=4, vpp=2, first_stage_layers=4, last_stage_layers=2), 20, 0)


def test_uneven_split_counts():
    lay = Layout(world_size=8, pp=4, vpp=2, first_stage_layers=4, last_stage_layers=2)
    grid = pipeline_chunks(lay, 22, 0)
    counts = [[len(c.layers) for c in row] for row in grid]
    assert counts == [[2, 2], [4, 4], [4, 4], [1, 1]]
    # chunk-major layer ids: vpp row 0 holds layers 0..10, row 1 holds 11..21
    assert grid[0][1].layers == (11, 12) and grid[3][0].layers == (10,)


@pytest.mark.parametrize(("text", "needle"), [
    ("Et*4|x|tL", "unknown symbols"),
    ("Et*3|t*3L", "places 6 decoder layers"),
    ("t*4|t*4EL", "must start with one E"),
    ("(Et*4|t*4L", "unbalanced parentheses"),
    ("Et*99999999999|t*4L", "expands to more than 100,000 symbols"),
])
def test_bad_pipeline_layouts(text, needle):
    with pytest.raises(MoetuneError, match=needle):
        pipeline_chunks(Layout(world_size=2, pp=2, pipeline_layout=text), 8, 0)


def test_layout_stage_count_is_the_parsers():
    """The one count of a string's virtual stages that Layout, the planner and the rules (derived.layout_stages)
    read: the parser's pieces; the rules' reading is None where Megatron-Core would refuse the string."""
    text = "Et*4|(t*4|)*14tmL"
    assert layout_stages(text) == len(parse_pipeline_layout(text)) == layout_stages_or_none(text)
    assert layout_stages(text) == Layout(world_size=4, pp=4, pipeline_layout=text).vpp * 4
    for bad in ("(Et*4|t*4L", "Et*4|x|tL", None, 8):
        assert layout_stages_or_none(bad) is None
    with pytest.raises(MoetuneError, match="unbalanced"):
        layout_stages("(Et*4|t*4L")


def test_groups_leaving_the_nvlink_domain_follow_megatron_rank_order():
    from moetune.layout.ranks import groups_leaving_domain

    # TP2 (stride 1) stays in an 8-GPU node; EP16 with ETP1 spans 16 consecutive ranks: 8 of its 15 peers are
    # in the other node; DP (stride TP*CP = 2) spans 64 ranks: 60 of 63 peers are elsewhere.
    lay = Layout(world_size=128, tp=2, pp=1, ep=16)
    leaving = groups_leaving_domain(lay, 8)
    assert leaving["tp"] == 0
    assert leaving["ep"] == pytest.approx(8 / 15)
    assert leaving["dp"] == pytest.approx(60 / 63)
    # 72 consecutive ranks a domain: the EP group of ranks 64-79 straddles two (8 of its 15 peers elsewhere); in
    # the 64-rank domains a 128-GPU job gets on NVL72 racks (below) every EP group shares one
    assert groups_leaving_domain(lay, 72)["ep"] == pytest.approx(8 / 15)
    assert groups_leaving_domain(lay, 64)["ep"] == 0


@pytest.mark.parametrize(("world", "gpus_per_node", "domain", "expected"), [
    (64, 4, 72, 64),  # 16 nodes fit one rack: one domain
    (72, 4, 72, 72),
    (128, 4, 72, 64),  # 32 nodes: segments of 16 (the largest divisor of 32 up to 18)
    (256, 4, 72, 64),
    (240, 4, 72, 60),  # 60 nodes: segments of 15
    (144, 4, 72, 72),
    (8, 4, 72, 8),
    (1024, 8, 8, 8),  # HGX: one node a domain
    (4, 8, 8, 4),
    (64, 8, 4, 4),  # a cluster file with two 4-GPU NVLink islands a node
])
def test_job_nvlink_domain_follows_slurm_segments(world, gpus_per_node, domain, expected):
    """Megatron Bridge's launcher splits a GB200 job into Slurm segments of the most nodes (<= 18) that divide it
    (scripts/performance/utils/executors.py); ranks are consecutive within a segment."""
    from moetune.layout.ranks import job_nvlink_domain

    assert job_nvlink_domain(world, gpus_per_node, domain) == expected


def test_a_straddling_group_counts_its_worst_placed_member():
    """EP40 in 60-rank domains: the group of ranks 40-79 has 20 members in each domain, so its members see 20
    peers (themselves included) over NVLink; in 72-rank domains the split is 32 + 8, and the 8 see only 8."""
    import numpy as np

    from moetune.layout.ranks import members_in_domain

    assert members_in_domain(40, 1, 60) == 20
    assert members_in_domain(40, 1, 72) == 8
    assert members_in_domain(40, 1, 120) == 40  # aligned: every group inside
    assert list(members_in_domain(np.array([8, 16, 64]), np.array([1, 1, 1]), 72)) == [8, 8, 8]


def test_split_text_names_what_must_be_passed_again():
    """Results print how layers split over stages when not evenly (plan's layout column, estimate, explain)."""
    assert Layout(world_size=64, pp=4, ep=8).split_text() == ""
    assert Layout(world_size=64, pp=4, ep=8, first_stage_layers=13, last_stage_layers=16).split_text() == (
        "first stage 13 layers, last stage 16 layers")
    assert Layout(world_size=256, tp=4, pp=8, vpp=4, ep=8, account_for_embedding=True,
                  account_for_loss=True).split_text() == "embedding and loss counted as layers"
    assert Layout(world_size=64, pp=4, vpp=4, ep=8, pipeline_layout="Et*4|(t*4|)*14tL").split_text() == (
        "pipeline layout Et*4|(t*4|)*14tL")


def test_written_layout_is_megatrons_grammar_and_round_trips():
    text = write_pipeline_layout([4, 5, 5, 3, 4, 4, 4, 2], mtp=3)
    assert text == "Et*4|(t*5|)*2t*3|(t*4|)*3ttmmmL"
    stages = parse_pipeline_layout(text)
    assert [s.count("t") for s in stages] == [4, 5, 5, 3, 4, 4, 4, 2]
    assert stages[0].startswith("E") and stages[-1].endswith("mmmL") and len(stages) == 8


@pytest.mark.parametrize("model, layout, knobs, needle", [
    ("qwen3-30b-a3b", dict(world_size=8, ep=8), dict(cp_comm_type="a2a+p2p", hcp_a2a_size=2), "need CP > 1"),
    ("qwen3-30b-a3b", dict(world_size=8, ep=8),
     dict(recompute="selective", recompute_modules=frozenset({"mla_up_proj"})),
     "needs multi-latent attention"),
    ("qwen3-30b-a3b", dict(world_size=8, ep=4), dict(token_imbalance=5.0), "cannot exceed EP (4)"),
])
def test_knobs_megatron_refuses_for_the_model_and_layout(model, layout, knobs, needle):
    with pytest.raises(MoetuneError, match=re.escape(needle)):
        validate_knobs(load_model(model), Layout(**layout), Knobs(**knobs))


def test_knobs_megatron_accepts_pass():
    validate_knobs(load_model("deepseek-v3"), Layout(world_size=16, ep=8, cp=2),
                   Knobs(recompute="selective", recompute_modules=frozenset({"mla_up_proj"}), token_imbalance=8.0,
                         cp_comm_type="a2a+p2p", hcp_a2a_size=2))


@pytest.mark.parametrize("seq, tp, pp, world, expected", [
    (131072, 1, 8, 256, 32),  # seeds/002 DSV3 128K: CP32 at TP1
    (131072, 4, 4, 256, 8),  # TP4 shards the same tokens: 131072 / (4096 x 4)
    (131072, 4, 4, 64, 4),  # the world holds no more than TP4 x CP4 x PP4
    (65536, 1, 1, None, 16),
    (4096, 1, 1, 8, 1),
    (24576, 1, 1, 8, 8),  # 6 is nearer 8 than 4 on a log scale
    # 1,000,000 = 2^6 x 15625 at TP4: 2 x CP32 divides it, but sequence parallelism splits each CP rank's 31,250
    # tokens over TP4, which does not divide them; CP16's 62,500 it does
    (1_000_000, 4, 1, None, 16),
    (65537, 1, 1, None, 1),  # odd: no CP > 1 at all
])
def test_shard_cp_is_the_nearest_legal_power_of_two_to_a_4k_shard(seq, tp, pp, world, expected):
    cp = shard_cp(seq, tp, pp, world)
    assert cp == expected
    assert sequence_refusal(seq, tp, cp, tp > 1) is None and (world is None or world % (tp * cp * pp) == 0)


def test_shard_cp_names_only_a_cp_the_callers_check_runs():
    """A caller that knows the model (walls/cp_legal.cp_runs) narrows the CPs: gpt-oss's a2a-only CP stops at
    its 8 KV groups, so the 4K-shard guess at 128k is CP8, not CP32."""
    assert shard_cp(131072, 1, 1, 256) == 32
    assert shard_cp(131072, 1, 1, 256, runs=lambda cp: cp <= 8) == 8
    assert shard_cp(1_000_000, 4, 1, None, sp=False) == 32  # without sequence parallelism only 2 x CP must divide


@pytest.mark.parametrize("seq, tp, cp, sp, needle", [
    (65537, 1, 2, False, "divisible by 2 x CP"),
    (65538, 4, 1, True, "sequence length (65538) must be divisible by TP (sequence parallel) (4)"),
    (1_000_000, 4, 32, True, "tokens per CP rank (seq/CP) (31250) must be divisible by TP"),
])
def test_sequence_rules_refuse_in_one_line_as_validate_does(seq, tp, cp, sp, needle):
    why = sequence_refusal(seq, tp, cp, sp)
    assert needle in why
    with pytest.raises(MoetuneError, match=re.escape(why)):
        validate_workload(Layout(world_size=tp * cp, tp=tp, cp=cp, sequence_parallel=sp),
                          Workload(seq_length=seq, micro_batch_size=1))


@pytest.mark.parametrize(("kwargs", "layers", "mtp", "needle"), [
    # Megatron-Core pipeline_parallel_layer_layout.py: MTP in its rank's last virtual stage, all in one stage
    (dict(world_size=2, pp=2, pipeline_layout="Et*4|t*4m|L|"), 8, 1, "that rank's last virtual stage"),
    (dict(world_size=2, pp=2, pipeline_layout="Et*4|t*4m|m|L"), 8, 2, "splits the MTP layers"),
    # transformer_config.py: "0 middle layers remaining but 1 middle PP stages"
    (dict(world_size=3, pp=3, first_stage_layers=4, last_stage_layers=4), 8, 0,
     "--first-stage-layers (4) and --last-stage-layers (4) leave no layers for the 1 middle stage of PP3"),
    # with one size given, the stage at the other end shares what is left, and is the one named
    (dict(world_size=2, pp=2, last_stage_layers=8), 8, 0, "--last-stage-layers (8) leaves no layers for the first "
     "stage of PP2"),
    (dict(world_size=4, pp=4, first_stage_layers=8), 8, 0, "leaves no layers for the 2 middle stages and the last "
     "stage of PP4"),
    (dict(world_size=4, pp=4, last_stage_layers=3), 8, 0, "the 5 layers left after --last-stage-layers (3) must "
     "split evenly over the first stage and the 2 middle stages of PP4 x vpp 1"),
    # transformer_layer.py get_transformer_layer_offset divides by the middle stages
    (dict(world_size=2, pp=2, vpp=2, first_stage_layers=4, last_stage_layers=4), 8, 0, "leave no middle stage"),
])
def test_pipelines_megatron_core_cannot_build(kwargs, layers, mtp, needle):
    with pytest.raises(MoetuneError, match=re.escape(needle)):
        pipeline_chunks(Layout(**kwargs), layers, mtp)


@pytest.mark.parametrize(("kwargs", "needle"), [
    (dict(world_size=1, pp=1, pipeline_layout="Et*4|t*4L"), "--pipeline-layout's stages need pp > 1"),
    (dict(world_size=2, pp=2, first_stage_layers=3, account_for_loss=True),
     "cannot go with --first-stage-layers/--last-stage"),
    (dict(world_size=2, pp=2, pipeline_layout="Et*4|t*4L", account_for_embedding=True), "cannot go with --pipeline"),
])
def test_layouts_megatron_core_refuses(kwargs, needle):
    with pytest.raises(MoetuneError, match=re.escape(needle)):
        Layout(**kwargs)


def test_embedding_and_output_sit_on_the_first_and_last_stage_whatever_the_string_says():
    grid = pipeline_chunks(Layout(world_size=2, pp=2, pipeline_layout="|Et*4|t*4L|"), 8, 0)
    assert grid[0][0].embedding and not grid[1][0].embedding  # stage 0 is rank 0's first chunk (empty here)
    assert grid[1][1].loss and not grid[0][1].loss  # the last stage is rank 1's last chunk


@pytest.mark.parametrize("experts, ep, etp, expected", [
    (8, 2, 8, (8, 2)),  # Mixtral: 16 expert ranks, 8 experts: EP8 x ETP2
    (64, 8, 2, (16, 1)),
    (8, 8, 2, (8, 2)),  # already the most EP the experts allow
    (60, 4, 8, (4, 8)),  # 60 experts: 8 and 16 do not divide them; 4 is the largest common divisor of 60 and 32
])
def test_ep_first_takes_the_largest_ep_the_experts_allow(experts, ep, etp, expected):
    from moetune.layout.validate import ep_first_sizes
    assert ep_first_sizes(experts, ep, etp) == expected


@pytest.mark.parametrize(("gpu", "world", "domain", "node"), [
    ("h100", 6, 6, 6),  # 6 of an HGX node's 8: one node of 6
    ("gb200", 6, 6, 2),  # 4 + 2 GB200s in one rack: a domain of whole part-nodes
    ("gb200", 256, 64, 4), ("h100", 100, 8, 8),
])
def test_a_job_smaller_than_its_nodes_is_a_valid_gpu(gpu, world, domain, node):
    """Sub-node jobs had failed GpuSpec's check that a domain is whole nodes ("nvlink_domain (6) and gpus_per_node
    (8) must divide one another"), an error about a GPU spec the user never wrote."""
    from moetune.layout.ranks import job_gpu
    from moetune.specs.hardware import load_gpu
    seen = job_gpu(load_gpu(gpu), world)
    assert (seen.nvlink_domain, seen.gpus_per_node) == (domain, node)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_olmoe_trains_at_tp_1_only(tp):
    """Megatron Bridge builds OLMoE's q/k norms over all 16 heads on every TP rank and applies them to the rank's
    16/TP heads (olmoe_provider.py), which fails at the first forward: estimate and plan had accepted TP > 1 and
    counted a norm split over TP that nothing builds (model audit)."""
    spec = load_model("olmoe-1b-7b")
    needle = rf"^TP \({tp}\) > 1 on olmoe-1b-7b: its q/k norms span every head.*use --tp 1$"
    with pytest.raises(MoetuneError, match=needle):
        validate_shapes(spec, Layout(world_size=tp * 8, tp=tp, ep=8))
    validate_shapes(spec, Layout(world_size=8, ep=8))


@pytest.mark.parametrize("first, last, needle", [
    (30, None, r"^--first-stage-layers \(30\) exceeds the model's 24 layers"),
    (10, 20, r"^--first-stage-layers \(10\) \+ --last-stage-layers \(20\) exceed the model's 24 layers"),
])
def test_stages_larger_than_the_model_say_so(first, last, needle):
    """They had read 'the -6 layers left after first/last stages must split evenly' (model audit)."""
    with pytest.raises(MoetuneError, match=needle):
        lay = Layout(world_size=12, pp=3, ep=4, first_stage_layers=first, last_stage_layers=last)
        validate_model_layout(load_model("qwen1.5-moe-a2.7b"), lay)


@pytest.mark.parametrize(("accounted", "drop"), [
    ({"account_for_embedding": True, "account_for_loss": True}, "drop --account-for-embedding and --account-for-loss"),
    ({"account_for_loss": True}, "drop --account-for-loss"),
    ({}, "set --first-stage-layers/--last-stage-layers, --pipeline-layout or --account-for-embedding"),
])
def test_an_uneven_split_s_fix_is_not_the_flags_already_given(accounted, drop):
    """GLM-4.5's 92 layers + the embedding and loss at PP 4: the fix had been to set the account flags just given
    (audit: estimate glm-4.5 --pp 4 --account-for-embedding --account-for-loss)."""
    with pytest.raises(MoetuneError) as err:
        pipeline_chunks(Layout(world_size=4, pp=4, **accounted), 92 + int(not accounted), 0)
    assert drop in str(err.value)


def test_the_4k_shard_is_weighed_by_the_attention_share():
    """A stack with a quarter of its mixers attention (Qwen3-Next: 12 of 48) holds at 128k over CP8 the attention
    memory an all-attention one holds at 4K tokens a shard: its guess is CP8, not CP32, and at CP2 (16K weighed) it
    is undersharded where at CP4 (8K weighed, twice the target at most) it is not. A share of 1 changes neither."""
    assert attention_share((12, 48)) == 0.25 and attention_share(None) == 1.0 and attention_share((61, 61)) == 1.0
    assert shard_cp(131072, 1, 1, 256, share=0.25) == 8
    assert undersharded_cp(131072, 1, 2, 8, share=0.25) and not undersharded_cp(131072, 1, 4, 8, share=0.25)
    assert shard_cp(131072, 1, 1, 256, share=1.0) == shard_cp(131072, 1, 1, 256) == 32
    assert undersharded_cp(131072, 1, 8, 32) and undersharded_cp(131072, 1, 8, 32, share=1.0)
    assert shard_cp(131072, 1, 1, 256, share=0.0) == 1  # no attention at all: CP 1


def test_a_layouts_kept_hash_is_the_dataclass_one():
    """Layout keeps its hash after the first lookup; it is the value a plain frozen dataclass gives (its compared
    fields in order), so sets and dicts of layouts iterate as they did, and a replaced layout hashes its own fields
    (its VPP derived from the string: 8 stages over PP 4)."""
    lay = Layout(world_size=64, pp=4, ep=8, pipeline_layout="Et*7|(t*8|)*6t*6mL")
    fields = (64, 1, 1, 4, 2, 8, 1, None, None, None, "Et*7|(t*8|)*6t*6mL", False, False)
    first = hash(lay)
    assert first == hash(fields) and hash(lay) == first  # worked out, then kept
    moved = replace(lay, pipeline_layout="Et*6|(t*8|)*6t*7mL")
    assert hash(moved) == hash((*fields[:10], "Et*6|(t*8|)*6t*7mL", False, False)) != hash(lay)
    assert moved != lay and replace(lay) == lay and len({lay, replace(lay), moved}) == 2
