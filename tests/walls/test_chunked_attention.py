"""Llama 4's chunked attention (walls/compute.py attention_span): Megatron Bridge folds a sequence longer than
attention_chunk_size into chunks (llama4_utils.py chunkify), so attention time stops growing with the sequence past
the chunk, while Megatron's FLOP counters still count whole-sequence attention (step time's counted_not_run)."""

import json
from dataclasses import replace

import pytest

from moetune.errors import MoetuneError
from moetune.layout.chunked_attention import chunk_refusal
from moetune.layout.knobs import Knobs
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload, validate
from moetune.planner.estimate import estimate
from moetune.specs.hardware import load_gpu
from moetune.specs.hf_config import load_hf_config
from moetune.specs.registry import load_model
from moetune.walls.attention_rate import chunked_attention_flops
from moetune.walls.flops import causal_context

SCOUT = load_model("llama4-scout")
GB200 = load_gpu("gb200")
LAYOUT = Layout(world_size=64, tp=4, ep=2, etp=8)  # CP 1: the CP ring slowdown is the whole sequence's
KNOBS = Knobs(precision="bf16", dispatcher="alltoall", cuda_graph_scope=())


def _time(spec, seq):
    return estimate(spec, GB200, LAYOUT, Workload(seq_length=seq, micro_batch_size=1, global_batch_size=64),
                    KNOBS).time


def test_the_config_gives_the_chunk():
    assert SCOUT.attention_chunk == 8192


@pytest.mark.parametrize("seq", [32768, 131072])
def test_attention_time_is_the_chunks(seq):
    """Past the chunk, each token's attention costs what it costs at the chunk: core attention seconds per token at
    `seq` equal those at 8,192 (same layout), where the whole-sequence model grows with the causal context."""
    chunked, whole = _time(SCOUT, seq), _time(replace(SCOUT, attention_chunk=None), seq)
    at_chunk = _time(SCOUT, 8192)
    per_token = chunked["compute_by_class"]["core_attn"] / seq
    assert per_token == pytest.approx(at_chunk["compute_by_class"]["core_attn"] / 8192, rel=1e-6)
    assert whole["compute_by_class"]["core_attn"] / chunked["compute_by_class"]["core_attn"] > \
        causal_context(seq) / causal_context(8192) * 0.85  # the whole-sequence rate is higher (1.12x at 64k keys
    # against 4k, L / (L + 540)), the FLOPs far more
    assert chunked["tflops_per_gpu"] > whole["tflops_per_gpu"]  # the same counted FLOPs in less time
    assert 0 < chunked["counted_not_run"] < 1 and whole["counted_not_run"] == 0


def test_no_rope_layers_are_chunked_too():
    """Bridge's Llama4SelfAttention chunks every layer, its no-RoPE ones (every 4th) included (llama4_utils.py
    @v0.3.1: chunkify runs whatever is_nope_layer says): the unrun FLOPs are the same per layer on all 48."""
    assert SCOUT.no_rope_freq == 4
    one = chunked_attention_flops(replace(SCOUT, layers=SCOUT.layers[:1]), 131072, 131072)
    assert chunked_attention_flops(SCOUT, 131072, 131072) == pytest.approx(48 * one)


def test_nothing_is_chunked_up_to_the_chunk():
    t = _time(SCOUT, 8192)
    assert t["counted_not_run"] == 0
    assert t["step_seconds"] == _time(replace(SCOUT, attention_chunk=None), 8192)["step_seconds"]


@pytest.mark.parametrize(("seq", "cp", "needle"), [
    # the query holds the CP rank's seq / CP tokens (Bridge's gpt_step.py slices the batch before the model), and
    # llama4_utils.py asserts that over 2 x CP is whole chunks: 131072 / 16 / 32 = 256
    (131072, 16, r"at CP 16 each CP rank's 8192 tokens are not past the chunk, so Megatron Bridge .* chunks nothing "
                 r"and attention would span all 131072 tokens; use a CP among 2 at this --seq"),
    (131072, 4, r"at CP 4 each CP rank's 32768 tokens over 2 x CP \(4096\) must be whole chunks .*use a CP among 2 "
                r"at this --seq"),
    (65536, 32, r"use a CP among 2 at this --seq"),
    (32768, 2, r"at CP 2 each CP rank's 16384 tokens over 2 x CP \(4096\) .* use no CP at this --seq"),
])
def test_cp_chunks_must_be_whole_attention_chunks(seq, cp, needle):
    with pytest.raises(MoetuneError, match=needle):
        validate(SCOUT, Layout(world_size=cp * 2, tp=2, cp=cp), Workload(seq_length=seq, micro_batch_size=1))
    assert chunk_refusal(SCOUT, seq, 2) is None or seq == 32768
    assert chunk_refusal(SCOUT, 8192, 16) is None  # no chunking at the chunk, with or without CP
    assert chunk_refusal(SCOUT, 2 * 8 * 8 * 8192, 8) is None  # seq a multiple of 2 x CP^2 x chunk


def test_plan_picks_no_cp_bridge_refuses(shared_data, capsys):
    """Llama-4-Scout's real config.json at 128k on 96 GB200: every result's CP leaves each rank's seq / CP tokens over
    2 x CP whole 8192-token chunks (the pick had been CP 8: 131072 / 8 / 16 = 1024 tokens, which Bridge asserts on)."""
    from moetune.cli.main import main

    config = str(shared_data / "models" / "llama4-scout.config.json")
    assert main(["plan", config, "--gpu", "gb200", "--gpus", "96", "--gbs", "96", "--seq", "131072", "--top", "3",
                 "--json"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert results and all(r["layout"]["cp"] in (1, 2) for r in results)


@pytest.mark.parametrize("value", [0, "8192", 8192.5, True])
def test_a_chunk_that_is_no_whole_number_is_one_line(value, tmp_path, shared_data):
    config = json.loads((shared_data / "models" / "llama4-scout.config.json").read_text())
    config["text_config"]["attention_chunk_size"] = value
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    with pytest.raises(MoetuneError, match="attention_chunk_size"):
        load_hf_config(path)
