"""derived.attention_mixers (rules/derive_layers.py attention_mixers) and ModelSpec.attention_mixers are one count
(specs/model.py count_attention_mixers): the same plain transformer gives the same [softmax-attention mixers, all
mixers] whether it is read from a Megatron Bridge YAML, from Megatron-LM arguments, or from the built-in model (the
fact estimate, explain and plan hand the rules, and the config a plan writes, read back). A config had given None
for a transformer, the model (layers, layers)."""

from pathlib import Path

import pytest

from modelzoo_launch import H100_ENV, MODELZOO
from moetune.configio import load_config
from moetune.layout.layout import Layout
from moetune.layout.validate import Workload
from moetune.planner.config_map import to_config
from moetune.planner.estimate import estimate
from moetune.rules.derive import derive
from moetune.rules.derive_layers import attention_facts
from moetune.specs.hardware import load_gpu
from moetune.specs.registry import load_model

BRIDGE = Path(__file__).resolve().parents[1] / "fixtures" / "bridge"
# Qwen3-30B-A3B as Megatron-LM arguments (its config.json: 48 layers, hidden 2,048, 32 heads in 4 query groups)
QWEN_MLM = ("--num-layers 48 --hidden-size 2048 --num-attention-heads 32 --group-query-attention "
            "--num-query-groups 4 --kv-channels 128 --ffn-hidden-size 6144 --num-experts 128 --moe-router-topk 8 "
            "--moe-ffn-hidden-size 768 --seq-length 4096 --micro-batch-size 1")

# By hand, from each model's config.json (src/moetune/data/models): every decoder layer is softmax attention (no
# hybrid_override_pattern, no linear attention), so both counts are num_hidden_layers. DeepSeek-V3: 61, all MLA;
# its one MTP layer (num_nextn_predict_layers 1) is no decoder layer (Megatron's num_layers leaves it out: the
# Bridge YAML's num_layers 61 beside mtp_num_layers 1). Qwen3-30B-A3B: 48, all GQA.
HAND = {"deepseek-v3": [61, 61], "qwen3-30b-a3b": [48, 48]}


def _bridge_yaml(name):
    file = {"deepseek-v3": "deepseek_v3_pretrain_256gpu_gb200_bf16.yaml",
            "qwen3-30b-a3b": "qwen3_30b_a3b_pretrain_16gpu_h100_bf16.yaml"}[name]
    return derive(load_config([BRIDGE / file]))["attention_mixers"]


def _megatron_lm(name, monkeypatch):
    if name == "qwen3-30b-a3b":
        return derive(load_config(mlm_args=QWEN_MLM))["attention_mixers"]
    for k, v in H100_ENV.items():  # the ModelZoo YAML's ${TP}-style placeholders, as its launcher fills them
        monkeypatch.setenv(k, v)
    return derive(load_config([MODELZOO]))["attention_mixers"]


def _preset_fact(name):
    """What estimate, explain and plan hand the rules (planner/rule_findings.py cp_sizing_facts)."""
    return attention_facts(load_model(name).attention_mixers)["attention_mixers"]


def _preset_config(name):
    """The config a plan of the built-in model writes, read back as check reads it."""
    e = estimate(load_model(name), load_gpu("h100"), Layout(world_size=64, ep=16),
                 Workload(seq_length=4096, global_batch_size=256))
    return derive(to_config(e))["attention_mixers"]


@pytest.mark.parametrize("name", sorted(HAND))
def test_a_transformer_counts_its_attention_mixers_alike_from_every_source(name, monkeypatch):
    got = {"bridge_yaml": _bridge_yaml(name), "megatron_lm": _megatron_lm(name, monkeypatch),
           "preset_fact": _preset_fact(name), "preset_config": _preset_config(name)}
    assert got == dict.fromkeys(got, HAND[name])


def test_a_config_that_does_not_say_its_layers_counts_none():
    """No num_layers and no pattern: nothing to count (the share stays 1, as for any transformer)."""
    facts = derive(load_config(sets=("model.num_moe_experts=64",)))
    assert facts["attention_mixers"] is None and facts["attention_share"] == 1


@pytest.mark.parametrize(("pattern", "want"), [
    ("M*M*|MEME/*E", [2, 6]),  # stage cut '|' and the MTP part after '/' left out: 2 '*' among 6 mixers
    ("*E*E-*", [3, 3]),  # a hybrid with no Mamba layer: every mixer attention, E and - none
    ("MGM*", [1, 4]),  # core_v0.19.0's G (gated delta-net) is a mixer, not attention
    ("M*X", None),  # a symbol Megatron-Core does not have
])
def test_a_hybrid_pattern_counts_its_mixers_symbol_by_symbol(pattern, want):
    assert derive(load_config(sets=(f"model.hybrid_layer_pattern={pattern}",)))["attention_mixers"] == want
