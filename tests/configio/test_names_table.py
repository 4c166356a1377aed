"""megatron_names.csv: every name moetune uses is recorded with where it was verified, and the Megatron-Core
fields it lists exist in the installed megatron-core."""

import csv
import dataclasses
import json

import pytest

from moetune.configio.names import NO_DEFAULT, _records, data_csv, names
from moetune.files import shipped_text

# Fields Megatron-LM main has that megatron-core 0.16 does not (the table is verified against main).
NEWER_THAN_INSTALLED = {"model.cuda_graph_modules", "model.moe_flex_dispatcher_num_sms", "model.fp8_output_proj",
                        "model.moe_expert_rank_capacity_factor", "model.moe_paged_stash",
                        "model.moe_paged_stash_buffer_size_factor_cuda", "model.moe_use_grouped_tensor",
                        # DSA's kernel backend and index sharing: from core_v0.19.0 (megatron_releases.csv)
                        "model.dsa_kernel_backend", "model.dsa_indexer_topk_freq", "model.dsa_indexer_skip_topk_offset"}


def test_used_rows_are_verified():
    rows = [r for r in names().by_bridge.values() if r.role == "used"]
    assert len(rows) >= 60
    for r in rows:
        assert r.verified_in.startswith(("Megatron-Bridge:", "Megatron-LM:", "moetune")), r.bridge_name
        assert r.type, r.bridge_name
        if r.bridge_name.startswith("cluster."):
            assert "moetune" in r.notes  # moetune's own names say so


def test_flags_map_one_way():
    table = names()
    for flag, row in table.by_flag.items():
        assert flag.startswith("--")
        assert flag in row.mlm_flags
        if row.bridge_name:
            assert not row.canonical, f"{flag} maps to alias {row.bridge_name}"


def test_key_megatron_spellings():
    """The vocabulary the issue and the seeds use, exactly as Bridge and Megatron-LM spell it."""
    table = names()
    expected = {
        "model.expert_model_parallel_size": "--expert-model-parallel-size",
        "model.expert_tensor_parallel_size": "--expert-tensor-parallel-size",
        "model.moe_token_dispatcher_type": "--moe-token-dispatcher-type",
        "model.moe_flex_dispatcher_backend": "--moe-flex-dispatcher-backend",
        "model.recompute_modules": "--recompute-modules",
        "model.num_moe_experts": "--num-experts",
        "model.virtual_pipeline_model_parallel_size": "--num-virtual-stages-per-pipeline-rank",
        "comm_overlap.overlap_moe_expert_parallel_comm": "--overlap-moe-expert-parallel-comm",
        "comm_overlap.delay_wgrad_compute": "--delay-wgrad-compute",
        "comm_overlap.tp_comm_overlap": "--tp-comm-overlap",
        "ddp.overlap_grad_reduce": "--overlap-grad-reduce",
        "model.moe_deepep_num_sms": "--moe-deepep-num-sms",
        "model.moe_hybridep_num_sms": "--moe-hybridep-num-sms",
        "model.moe_router_dtype": "--moe-router-dtype",
        "mixed_precision.fp8_recipe": "--fp8-recipe",
    }
    assert {k: table.get(k).mlm_flag for k in expected} == expected


def test_model_rows_exist_in_installed_megatron_core():
    tc = pytest.importorskip("megatron.core.transformer.transformer_config")
    fields = {f.name for f in dataclasses.fields(tc.MLATransformerConfig)}
    for row in names().by_bridge.values():
        core = row.verified_in.startswith("Megatron-LM:megatron/core/")
        if core and row.role == "used" and row.bridge_name.startswith("model."):
            if row.bridge_name in NEWER_THAN_INSTALLED:
                continue
            assert row.bridge_name.split(".", 1)[1] in fields, row.bridge_name


def test_defaults_match_installed_megatron_core_where_unchanged():
    tc = pytest.importorskip("megatron.core.transformer.transformer_config")
    defaults = {f.name: f.default for f in dataclasses.fields(tc.TransformerConfig)
                if f.default is not dataclasses.MISSING}
    for name in ("tensor_model_parallel_size", "expert_model_parallel_size", "moe_token_dispatcher_type",
                 "recompute_granularity", "moe_router_dtype", "moe_grouped_gemm", "moe_shared_expert_overlap",
                 "cuda_graph_impl", "sequence_parallel"):
        row = names().get(f"model.{name}")
        assert row.default is not NO_DEFAULT and row.default == defaults[name], name


def test_names_in_moetune_code_are_recorded_as_used():
    import re
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "src" / "moetune"
    sections = "model|train|ddp|optimizer|comm_overlap|mixed_precision|cluster"
    pattern = re.compile(r"""["']((?:""" + sections + r""")\.[a-z_0-9]+)["']""")
    for sub in ("rules", "configio", "emit", "cli"):
        for path in (src / sub).glob("*.py"):
            for name in pattern.findall(path.read_text()):
                row = names().get(name)
                assert row is not None and row.role == "used", f"{path.name}: {name}"


def test_extra_args_rows_name_the_file_that_adds_them():
    from moetune.configio.extra_args import MAPPED, PROVIDERS, REFUSED, provider

    rows = [r for r in names().by_flag.values() if r.role == "extra_args"]
    assert len(rows) >= 120
    for r in rows:
        assert provider(r) in PROVIDERS and not r.bridge_name, r.mlm_flags
        assert r.mlm_action in ("store_true", "store_false", "value", "list"), r.mlm_flags
    # every refused or mapped flag has its row, and its note says what becomes of it
    for flag in (*REFUSED, *MAPPED):
        row = names().by_flag[flag]
        assert provider(row) and ("refused" if flag in REFUSED else "sets model.") in row.notes, flag


def test_records_are_what_csv_reader_reads():
    """names() splits a line without a quote at its commas and leaves the rest to csv's reader (_records): the same
    records as the reader's, a quoted field's commas, doubled quotes and line breaks kept."""
    text = 'a,b,c\nx,"y, z",w\n"two\nlines, one field",2,"3"\n\n"q""uote",,\nplain,, \n,\n"a\n\n","b"\nlast'
    assert list(_records(text.splitlines())) == list(csv.reader(text.splitlines()))
    for shipped in ("megatron_names.csv", "megatron_releases.csv", "bridge_releases.csv"):
        lines = [line for line in shipped_text(shipped).splitlines() if not line.startswith("#")]
        assert list(_records(lines)) == list(csv.reader(lines))


def test_rows_are_the_csv_rows():
    """Every row of megatron_names.csv as csv's DictReader reads it, its defaults as JSON (the way names() read it)."""
    table = names()
    for r in data_csv("megatron_names.csv"):
        flags = tuple(f for f in r["mlm_flag"].split("|") if f)
        row = table.by_bridge[r["bridge_name"]] if r["bridge_name"] else table.by_flag[flags[0]]
        assert (row.mlm_flags, row.mlm_action, row.type, row.role, row.canonical, row.verified_in, row.notes) == (
            flags, r["mlm_action"], r["type"], r["role"], r["canonical"], r["verified_in"], r["notes"])
        for got, text in ((row.default, r["default"]), (row.mlm_default, r["mlm_default"])):
            assert got is NO_DEFAULT if text in ("n/a", "required", "") else got == json.loads(text), row.bridge_name
    lists = [row.default for row in table.by_bridge.values() if row.default == []]
    assert len(lists) > 1 and len({id(x) for x in lists}) == len(lists)  # each row its own list
