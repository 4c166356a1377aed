"""megatron_releases.csv (tools/megatron_releases.py) against megatron_names.csv, and the Megatron-LM reader under
--megatron-core: a flag main dropped is read as the named release's, and without one the error names the release."""

import sys
from pathlib import Path

import pytest

from moetune.configio.mlm import parse_mlm
from moetune.configio.names import names
from moetune.configio.release_context import reading
from moetune.configio.releases import (
    has,
    known_release,
    newest_having,
    refused,
    release_number,
    releases,
    span,
    values_lacking,
)
from moetune.errors import MoetuneError

BASE = "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --micro-batch-size 1"


def test_the_releases_are_the_columns_and_main_agrees_with_the_name_table():
    """The table was dumped from main's real parser; the releases file's main column must say the same of every flag
    it lists (a flag main has is in megatron_names.csv, one main lacks is not, extra_args aside)."""
    data = releases()
    assert data.order == ("0.13", "0.13.1", "0.14", "0.15", "0.15.1", "0.15.2", "0.15.3", "0.16", "0.16.1", "0.17",
                          "0.17.1", "0.18", "0.18.2", "0.19", "main")
    table = {f for f, r in names().by_flag.items() if r.role != "extra_args"}
    for name, got in data.have.items():
        assert got and got != set(data.order), name  # only names some release lacks are listed
        if data.kind[name] == "flag":
            assert (name in table) == ("main" in got), name
        elif data.kind[name] == "value":  # a value a field takes (tools/megatron_values.py): a field main has
            assert names().get(name.split("=")[0]) is not None, name
        elif data.kind[name] == "script":  # a pretrain_*.py entry point at the tree's top
            assert name.startswith("pretrain_") and name.endswith(".py"), name
        else:
            assert name.split(".")[0] in ("model", "ddp", "optimizer"), name
            assert ("main" in got) == (names().get(name) is not None), name


def test_a_flag_from_core_v0_17_0():
    """--hybrid-layer-pattern: megatron/training/arguments.py:3218 @core_v0.17.0 (_add_experimental_args); core_v0.16.0
    has only --hybrid-override-pattern (arguments.py:2828 there). --cuda-graph-modules came in core_v0.18.0."""
    assert not has("0.16", "--hybrid-layer-pattern") and has("0.17", "--hybrid-layer-pattern")
    assert span("--hybrid-layer-pattern") == "from 0.17 on" and newest_having("--hybrid-layer-pattern") == "0.17"
    assert has("0.16", "--hybrid-override-pattern") and has("main", "--hybrid-override-pattern")  # never dropped
    assert span("--cuda-graph-modules") == "from 0.18 on"
    assert span("--hybrid-attention-ratio") == "in 0.13 to 0.16.1" and newest_having("--hybrid-attention-ratio") is None
    assert has("0.16", "--tensor-model-parallel-size")  # in every release: not listed


def test_an_unknown_release_is_one_line():
    with pytest.raises(MoetuneError, match=r"--megatron-core 0\.12: .*use one of 0\.13, 0\.13\.1, 0\.14, 0\.15, "):
        known_release("0.12")
    assert known_release("0.16.0") == "0.16" and known_release("0.16.1") == "0.16.1"


def test_a_patch_release_s_own_names():
    """core_v0.17.1 added HybridEP's permute fusion and block counts (TransformerConfig
    .moe_permute_fusion_into_hybridep, moe_hybridep_num_blocks_permute: transformer_config.py @core_v0.17.1, absent
    @core_v0.17.0) and
    DistributedDataParallelConfig.fp4_param_gather; the other patch tags (0.13.1, 0.15.1-0.15.3, 0.16.1, 0.18.2) have
    exactly their X.Y.0's names."""
    for name in ("model.moe_permute_fusion_into_hybridep", "model.moe_hybridep_num_blocks_permute",
                 "ddp.fp4_param_gather", "--moe-permute-fusion-into-hybridep"):
        assert not has("0.17", name) and has("0.17.1", name) and span(name) == "from 0.17.1 on", name
    data = releases()
    for patch, base in (("0.13.1", "0.13"), ("0.15.3", "0.15"), ("0.16.1", "0.16"), ("0.18.2", "0.18")):
        assert all((patch in got) == (base in got) for got in data.have.values()), patch


def test_the_moe_flags_of_the_older_releases():
    """The flex dispatcher's backend flag came in core_v0.16.0 (TransformerConfig.moe_flex_dispatcher_backend, a field
    there and in no earlier tag's transformer_config.py, whose dataclass-made flag it is); 0.13-0.15 turn
    DeepEP on with --moe-enable-deepep (arguments.py:2794 @core_v0.13.0), which every release since keeps. EP overlap's
    --overlap-moe-expert-parallel-comm came in core_v0.14.0."""
    assert span("--moe-flex-dispatcher-backend") == "from 0.16 on" and not has("0.15", "--moe-flex-dispatcher-backend")
    assert has("0.13", "--moe-enable-deepep") and has("main", "--moe-enable-deepep")
    assert span("--overlap-moe-expert-parallel-comm") == "from 0.14 on"


def test_a_flag_main_dropped_is_read_as_the_named_release_s():
    """--hybrid-attention-ratio: arguments.py:2822 @core_v0.16.0 (2900 @core_v0.13.0), gone from core_v0.17.0 on.
    Without a release it is unknown, the error naming the releases that had it; with --megatron-core 0.16 it is read
    (and ignored)."""
    args = f"{BASE} --hybrid-attention-ratio 0.25"
    with pytest.raises(MoetuneError, match=r"unknown Megatron-LM argument --hybrid-attention-ratio; Megatron-Core "
                                           r"had it in 0\.13 to 0\.16\.1 .*pass --megatron-core 0\.16\.1"):
        parse_mlm(args, "--mlm-args")
    with reading("0.16") as seen:
        read = {a.key: a.value for a in parse_mlm(args, "--mlm-args")}
    assert read["model.num_layers"] == 4 and seen.lacking() == []
    with reading("0.17"), pytest.raises(MoetuneError, match="unknown Megatron-LM argument --hybrid-attention-ratio"):
        parse_mlm(args, "--mlm-args")


def test_the_reader_notes_the_launch_s_flags():
    with reading("0.16") as seen:
        parse_mlm(f"{BASE} --hybrid-layer-pattern M*M*", "--mlm-args")
    assert seen.lacking() == ["--hybrid-layer-pattern"]
    with reading(None) as seen:  # no release: nothing lacks
        parse_mlm(f"{BASE} --hybrid-layer-pattern M*M*", "--mlm-args")
    assert seen.lacking() == []


def test_the_values_a_release_takes():
    """cuda_graph_scope: one string before core_v0.16.0 ("full", "attn" or "full_iteration": transformer_config.py:646-
    652 @core_v0.15.0), CudaGraphScope's members as a list from 0.16 (enums.py @core_v0.16.0: moe_router,
    moe_preprocess, ...); cuda_graph_impl full_iteration from 0.18 (its Literal @core_v0.18.0:927);
    recompute_modules shared_experts from 0.14 (allowed_modules, transformer_config.py:869 @core_v0.14.0, absent at
    :818 @core_v0.13.0)."""
    assert span("model.cuda_graph_scope=moe_router") == "from 0.16 on"
    assert span("model.cuda_graph_impl=full_iteration") == "from 0.18 on"
    assert span("model.recompute_modules=shared_experts") == "from 0.14 on"
    assert has("0.13", "model.cuda_graph_scope=attn")  # every release: not listed
    assert values_lacking({"model.cuda_graph_scope": ["attn", "moe_router"], "model.num_layers": 4}, "0.15") == \
        ["model.cuda_graph_scope=moe_router"]
    assert values_lacking({"model.cuda_graph_scope": ["attn", "moe_router"]}, "0.16") == []


def test_what_a_fix_sets_that_the_release_refuses():
    """vet_fixes' release check (rules/engine.py): a name the release lacks (moe_paged_stash: a TransformerConfig field
    from core_v0.18.0) and a value it refuses (moe_preprocess among 0.15's one-string scopes); a None sets nothing, and
    Bridge 0.5.0 takes the data's length as dataset.sequence_length, which check tells the user to write."""
    assert refused({"model.moe_paged_stash": True, "model.num_layers": 4}, "0.17") == ["model.moe_paged_stash"]
    assert refused({"model.cuda_graph_scope": ["attn", "moe_preprocess"]}, "0.15") == \
        ["model.cuda_graph_scope=moe_preprocess"]
    assert refused({"model.moe_paged_stash": None, "dataset.seq_length": 4096}, "0.5.0") == []
    assert refused({"model.moe_paged_stash": True}, "0.18") == []


def test_muon_is_a_value_from_0_16():
    """--optimizer takes adam and sgd alone before core_v0.16.0 (arguments.py core_v0.15.0:2197-2199) and adds muon and
    dist_muon there (core_v0.16.0:2056-2058): the refusal plan, estimate, emit and check share (values_lacking)."""
    assert span("optimizer.optimizer=muon") == span("optimizer.optimizer=dist_muon") == "from 0.16 on"
    assert values_lacking({"optimizer.optimizer": "dist_muon"}, "0.15.3") == ["optimizer.optimizer=dist_muon"]
    assert values_lacking({"optimizer.optimizer": "adam"}, "0.13") == []  # in every release: not listed


def test_the_hybrid_pattern_s_older_spelling_is_read_as_main_reads_it():
    """--hybrid-override-pattern: deprecated in Megatron-LM main, which sets hybrid_layer_pattern from it (arguments.py
    validate_args @d98e8a6); the only spelling before core_v0.17.0. It had been read and ignored, losing the
    pattern. pretrain_hybrid.py came in core_v0.18.0 (pretrain_mamba.py before)."""
    read = {a.key: a.value for a in parse_mlm(f"{BASE} --hybrid-override-pattern M*M-", "--mlm-args")}
    assert read["model.hybrid_layer_pattern"] == "M*M-"
    assert has("0.16", "--hybrid-override-pattern") and not has("0.16", "--hybrid-layer-pattern")
    assert span("pretrain_hybrid.py") == "from 0.18 on"


def test_a_name_held_at_none_beside_its_other_name_is_no_value():
    """Bridge's hybrid provider holds hybrid_override_pattern None beside hybrid_layer_pattern (hybrid_provider.py:128
    @v0.6.0), as Megatron-Core holds cuda_graph_scope None beside cuda_graph_modules: the None is no value, not a
    contradiction; the older name alone reads as the field."""
    from moetune.configio.normalize import Assignment, resolve
    both = resolve([Assignment(key="model.hybrid_override_pattern", value=None, origin="y"),
                    Assignment(key="model.hybrid_layer_pattern", value="M*M-", origin="y")])
    assert both["model.hybrid_layer_pattern"] == "M*M-"
    alone = resolve([Assignment(key="model.hybrid_override_pattern", value="M*", origin="y")])
    assert alone["model.hybrid_layer_pattern"] == "M*"


MLM_MIRROR = Path("/work/.mirror/NVIDIA+Megatron-LM/repo")


@pytest.mark.skipif(not MLM_MIRROR.is_dir(), reason="no Megatron-LM mirror here")
@pytest.mark.parametrize(("release", "tag"), [("0.15", "core_v0.15.0"), ("0.16", "core_v0.16.0"),
                                              ("main", "d98e8a64ddf3")])
def test_the_value_rows_are_what_the_sources_say(tmp_path, release, tag):
    """tools/megatron_values.py over the tag's sources gives exactly the values the table says the release takes."""
    import subprocess

    sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))
    from megatron_values import values
    for path in ("megatron/core/transformer/transformer_config.py", "megatron/core/transformer/enums.py",
                 "megatron/training/arguments.py"):
        text = subprocess.run(["git", "-C", str(MLM_MIRROR), "show", f"{tag}:{path}"], capture_output=True,
                              text=True, check=True).stdout
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    found = {n for n in values(str(tmp_path)) if not n.endswith("=*")}
    table = {n for n, kind in releases().kind.items() if kind == "value" and release in releases().have[n]}
    fields = {n.split("=")[0] for n in found}
    assert {n for n in table if n.split("=")[0] in fields} <= found  # each listed value the release has is found
    listed = {n for n, kind in releases().kind.items() if kind == "value"}
    assert {n for n in found if n in listed} == {n for n in table if n.split("=")[0] in fields}


def test_a_release_s_number():
    """One reading of a release's number for walls' FLOP counters and emit's Bridge-on-core note: Bridge tags (v0.4.2),
    core columns (0.16, 0.16.1), a pin's rc (bridge_pins.csv 0.16.0rc0, counted as its release as core_at_least
    does); main has none."""
    assert [release_number(r) for r in ("0.4.2", "0.16", "0.16.1", "0.16.0rc0", "main")] == \
        [(0, 4, 2), (0, 16), (0, 16, 1), (0, 16, 0), None]

