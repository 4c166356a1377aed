"""Rule longctx.cp_sizing on hybrids: the 4K shard of seeds/002 ("CP ~= seq_len / 4096") is sized by attention memory
(seeds/000 Phase 2: "Add CP for long context once sequence length makes attention memory dominant"); a Mamba-2 or
gated delta-net mixer keeps a fixed-size state, no keys and values per token, so the shard is weighed by the
attention share of the token mixers (layout/validate.py attention_share). Counted alike from a config (check) and
from the model (estimate, plan); transformers keep the rule as it was."""

import json
import math
from pathlib import Path

from moetune.configio import load_config
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.estimate import estimate
from moetune.planner.rule_findings import findings
from moetune.planner.search import plan
from moetune.rules import evaluate
from moetune.rules.derive import derive
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model

MODELS = Path(__file__).resolve().parents[2] / "src" / "moetune" / "data" / "models"
SEQ = 131072


def _hf(name: str) -> dict:
    return json.loads((MODELS / f"{name}.config.json").read_text())


def _nemotron_counts() -> tuple[int, int]:
    """Attention and token-mixer layers of Nemotron-3 Nano, from its config.json's pattern (* attention, M Mamba-2,
    E MoE: Megatron-Core mamba_hybrid_layer_allocation.py Symbols)."""
    pattern = _hf("nemotron3-nano-30b-a3b")["hybrid_override_pattern"]
    return pattern.count("*"), pattern.count("*") + pattern.count("M")


def _pow2_nearest(x: float) -> int:
    return 2 ** round(math.log2(x))


def test_the_model_and_its_config_count_the_same_attention_mixers():
    """Nemotron-3 Nano: 6 attention layers among 29 mixers (its pattern); Qwen3-Next: every 4th of 48 layers
    (full_attention_interval), 12; a transformer: every mixer."""
    hf = _hf("qwen3-next-80b-a3b")
    qwen = (hf["num_hidden_layers"] // hf["full_attention_interval"], hf["num_hidden_layers"])
    assert _nemotron_counts() == (6, 29) and qwen == (12, 48)
    assert load_model("nemotron3-nano-30b-a3b").attention_mixers == _nemotron_counts()
    assert load_model("qwen3-next-80b-a3b").attention_mixers == qwen
    assert load_model("deepseek-v3").attention_mixers == (61, 61)
    pattern = _hf("nemotron3-nano-30b-a3b")["hybrid_override_pattern"]
    assert derive(load_config(sets=(f"model.hybrid_layer_pattern={pattern}",)))["attention_mixers"] == [6, 29]
    gdn = derive(load_config(sets=("model.experimental_attention_variant=gated_delta_net",
                                   "model.linear_attention_freq=4", "model.num_layers=48")))
    assert gdn["attention_mixers"] == [12, 48] and gdn["attention_share"] == 0.25
    listed = derive(load_config(sets=("model.experimental_attention_variant=gated_delta_net",
                                      "model.linear_attention_freq=[1,1,1,0,1,1,1,0]")))  # 0: softmax attention
    assert listed["attention_mixers"] == [2, 8]
    plain = derive(load_config(sets=("model.num_moe_experts=64",)))
    assert plain["attention_share"] == 1 and plain["cp_shard_weighing"] == ""


def _nemotron(tp: int, cp: int, ep: int = 4):
    return estimate(load_model("nemotron3-nano-30b-a3b"), load_gpu("b200"), Layout(world_size=32, tp=tp, cp=cp, ep=ep),
                    Workload(seq_length=SEQ, global_batch_size=64))


def test_a_hybrid_whose_attention_shard_is_near_4k_is_not_told_to_add_cp():
    """Nemotron-3 Nano at 128k on 32 B200, TP2 x CP2: 32,768 tokens a shard, of which the 6-in-29 attention share
    weighs 6,780, under twice the 4K target. The rule had asked for CP16, which predicts -53% (plan's own line:
    its fix 11,500 tokens/s/GPU against the pick's 24,289); now it is silent, in estimate and in check alike."""
    a, n = _nemotron_counts()
    assert a / n * SEQ / (2 * 2) < 2 * 4096
    e = _nemotron(2, 2)
    assert "longctx.cp_sizing" not in {f.rule for f in findings(e)}
    pattern = _hf("nemotron3-nano-30b-a3b")["hybrid_override_pattern"]
    config = load_config(sets=(f"model.hybrid_layer_pattern={pattern}", "model.num_moe_experts=128",
                               f"model.seq_length={SEQ}", "model.tensor_model_parallel_size=2",
                               "model.sequence_parallel=true", "model.context_parallel_size=2"), gpu="b200", gpus=32)
    assert "longctx.cp_sizing" not in {f.rule for f in evaluate(config)}


def test_a_hybrid_still_hears_the_rule_where_its_attention_shard_is_large():
    """TP1 x CP1 at 128k: 131,072 tokens, 27,118 of them weighed as attention, past twice 4K: the rule fires and
    aims at the power of two nearest 6/29 x 131072 / 4096 = 6.6, CP8 (not the unweighted CP32), saying why."""
    a, n = _nemotron_counts()
    target = _pow2_nearest(a / n * SEQ / 4096)
    assert target == 8
    fired = {f.rule: f for f in findings(_nemotron(1, 1, ep=8))}["longctx.cp_sizing"]
    assert fired.fix == {"model.context_parallel_size": target}
    assert f"{a} of its {n} token mixers are attention" in fired.message
    assert f"power of two Megatron runs here is CP={target}." in fired.message


def test_a_transformer_hears_the_rule_as_before():
    """DeepSeek-V3 at 128k on 256 H100, TP1 x CP8: 16K-token shards, the 4K guess CP32 (131072 / 4096), and the
    message without any weighing, word for word as the rule table had it."""
    e = estimate(load_model("deepseek-v3"), load_gpu("h100"),
                 Layout(world_size=256, tp=1, cp=8, pp=4, ep=32, first_stage_layers=16),
                 Workload(seq_length=SEQ, global_batch_size=256))
    fired = {f.rule: f for f in findings(e)}["longctx.cp_sizing"]
    assert fired.fix == {"model.context_parallel_size": SEQ // 4096}
    assert fired.message.endswith("so the shard is TP x CP and the guess CP ~= seq_len / (4096 x TP); the nearest "
                                  "power of two Megatron runs here is CP=32.")


def test_plan_of_the_hybrid_at_128k_warns_no_more():
    """`plan nemotron3-nano-30b-a3b --gpu b200 --gpus 32 --seq 131072 --gbs 64`: the pick (TP2 x CP2) had carried the
    warning with its fix at -53%."""
    result = plan(load_model("nemotron3-nano-30b-a3b"), load_gpu("b200"), 32,
                  Workload(seq_length=SEQ, global_batch_size=64), top=1)
    pick = result.results[0]
    assert (pick.layout.tp, pick.layout.cp) == (2, 2)
    assert "longctx.cp_sizing" not in {f.rule for f in findings(pick)}


def test_a_stack_without_softmax_attention_weighs_its_shard_at_none():
    """A Mamba hybrid whose pattern holds no '*' (Nemotron-3 Nano's 6 attention layers made Mamba-2 here) has an
    attention share of 0: explain's Scale note on a CP 2 run at 8k says its shard holds no attention tokens, where it
    had divided by them (ZeroDivisionError, a traceback)."""
    from dataclasses import replace

    from moetune.planner.explain_scale import scale

    spec = load_model("nemotron3-nano-30b-a3b")
    spec = replace(spec, layers=tuple(replace(k, mixer="mamba") if k.mixer == "gqa" else k for k in spec.layers))
    assert spec.attention_mixers == (0, 29)
    e = estimate(spec, load_gpu("b200"), Layout(world_size=16, cp=2, ep=8),
                 Workload(seq_length=8192, micro_batch_size=1, global_batch_size=64))
    [note] = [n for n in scale(e)["notes"] if "TP x CP shard" in n]
    assert note.startswith("CP: 4,096 tokens per TP x CP shard (0 weighed), no attention tokens against the seeds' 4K")
    assert "0 of its 29 token mixers are attention" in note and "this run's CP2 shards finer" in note
