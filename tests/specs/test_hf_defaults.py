"""A config.json field left out reads as transformers' config class builds it (data/hf_defaults.toml), where moetune
had read its own default: the real configs of ../shared/data/models with a field dropped, against the same config
with the field set to the class's default."""

import json

import pytest

from moetune.errors import MoetuneError
from moetune.specs.hf_config import spec_from_hf
from moetune.specs.registry import load_model

# (model, field dropped, transformers' class default, read off transformers 5.24.0's config classes by hand: the
# table's own values are not what the test compares against)
DROPPED = [("deepseek-v3", "q_lora_rank", 1536), ("deepseek-v3", "first_k_dense_replace", 3),
           ("deepseek-v3", "n_shared_experts", 1), ("deepseek-v3", "n_group", 8), ("deepseek-v3", "scoring_func",
                                                                                    "sigmoid"),
           ("qwen1.5-moe-a2.7b", "shared_expert_intermediate_size", 5632), ("qwen3-30b-a3b", "num_key_value_heads", 4),
           ("mixtral-8x7b", "num_key_value_heads", 8), ("ernie-4.5-21b-a3b", "tie_word_embeddings", True),
           ("ernie-4.5-21b-a3b", "moe_layer_start_index", 1), ("ernie-4.5-21b-a3b", "moe_num_shared_experts", 2),
           ("gpt-oss-20b", "sliding_window", 128)]


def _config(shared_data, model: str) -> dict:
    return json.loads((shared_data / "models" / f"{model}.config.json").read_text())


def _spec(data: dict, name: str = "x"):
    return spec_from_hf(data, name=name, origin=f"{name}.json")


def _same(a, b) -> bool:
    return (a.layers, a.num_query_groups, a.mla, a.num_shared_experts, a.moe_shared_expert_intermediate_size,
            a.moe_router_score_function, a.moe_router_score_correction_bias, a.moe_router_num_groups,
            a.untie_embeddings_and_output_weights) == \
        (b.layers, b.num_query_groups, b.mla, b.num_shared_experts, b.moe_shared_expert_intermediate_size,
         b.moe_router_score_function, b.moe_router_score_correction_bias, b.moe_router_num_groups,
         b.untie_embeddings_and_output_weights)


@pytest.mark.parametrize(("model", "field", "default"), DROPPED)
def test_a_field_left_out_reads_as_its_class_default(model, field, default, shared_data):
    data = _config(shared_data, model)
    dropped = {k: v for k, v in data.items() if k != field}
    given = {**dropped, field: default}
    spec = _spec(dropped)
    assert _same(spec, _spec(given)) and any(field in note for note in spec.notes)


def test_deepseek_v3_without_q_lora_rank_is_transformers_671b(shared_data):
    """DeepseekV3Config's q_lora_rank 1536 is DeepSeek-V3's own: dropping it leaves the published 671.0B (it had read
    678.8B, a plain q projection)."""
    data = {k: v for k, v in _config(shared_data, "deepseek-v3").items() if k != "q_lora_rank"}
    assert _spec(data).mla == load_model("deepseek-v3").mla


def test_a_null_field_is_a_value_not_a_missing_one(shared_data):
    """Moonlight writes q_lora_rank null: a plain q projection, as transformers builds it; no default is filled."""
    spec = load_model("moonlight-16b-a3b")
    assert spec.mla.q_lora_rank is None and spec.notes == ()


def test_gpt_oss_without_layer_types_alternates_sliding_windows(shared_data):
    """GptOssConfig derives layer_types: sliding on even layers (configuration_gpt_oss.py :84-87)."""
    data = {k: v for k, v in _config(shared_data, "gpt-oss-20b").items() if k != "layer_types"}
    assert [k.window for k in _spec(data).layers] == [128 if i % 2 == 0 else None for i in range(24)]


def test_ernie_moe_layers_follow_transformers_rule(shared_data):
    """(i + 1) % interval == 0 within start..end (modeling_ernie4_5_moe.py :397-404): interval 3 from 0 to 27 is
    layers 2, 5, ..., 26 (it had read 0, 3, ..., 27); end -1 is the last layer (__post_init__ :119-121)."""
    data = {**_config(shared_data, "ernie-4.5-21b-a3b"), "moe_layer_interval": 3, "moe_layer_start_index": 0,
            "moe_layer_end_index": 27}
    assert [i for i, k in enumerate(_spec(data).layers) if k.mlp == "moe"] == list(range(2, 28, 3))
    last = {**data, "moe_layer_end_index": -1}
    assert [i for i, k in enumerate(_spec(last).layers) if k.mlp == "moe"] == list(range(2, 28, 3))


def test_ernie_use_bias_is_refused(shared_data):
    """use_bias biases q/k/v/o, the MLPs and the LM head in HF's ERNIE: Megatron's output layer holds no bias."""
    with pytest.raises(MoetuneError, match="use_bias true: ernie4_5_moe's HF model would bias"):
        _spec({**_config(shared_data, "ernie-4.5-21b-a3b"), "use_bias": True})


def test_llama4_moe_layers_list_is_read(shared_data):
    """Llama4TextConfig's moe_layers: HF builds MoE exactly there (modeling_llama4.py :400); it had been ignored."""
    data = _config(shared_data, "llama4-maverick")
    data["text_config"] = {**data["text_config"], "moe_layers": list(range(0, 48, 4))}
    moe = [i for i, k in enumerate(_spec(data).layers) if k.mlp == "moe"]
    assert moe == list(range(0, 48, 4)) and load_model("llama4-maverick").num_moe_layers == 24
    data["text_config"]["moe_layers"] = [0, 99]
    with pytest.raises(MoetuneError, match="'moe_layers'.*must be a list of layer indices from 0 to 47"):
        _spec(data)



def test_kimi_k2_and_llama4_take_their_classes_defaults(shared_data):
    """Kimi-K2 builds a DeepseekV3Config: without q_lora_rank it is its own 1.026T (it had read a plain q projection);
    Llama4TextConfig's attention_chunk_size 8192 chunks Scout's RoPE layers where the config leaves it out (it had
    planned full attention, 24% slower at 32k)."""
    kimi = {k: v for k, v in _config(shared_data, "kimi-k2").items() if k != "q_lora_rank"}
    assert _spec(kimi).mla == load_model("kimi-k2").mla
    scout = _config(shared_data, "llama4-scout")
    scout["text_config"] = {k: v for k, v in scout["text_config"].items() if k != "attention_chunk_size"}
    assert _spec(scout).attention_chunk == 8192 == load_model("llama4-scout").attention_chunk


def test_two_mtp_depths_are_refused_and_a_bad_one_names_its_field(shared_data):
    data = _config(shared_data, "deepseek-v3")
    with pytest.raises(MoetuneError, match=r"num_nextn_predict_layers \(1\) and mtp_num_hidden_layers \(2\)"):
        _spec({**data, "mtp_num_hidden_layers": 2})
    qwen = _config(shared_data, "qwen3-30b-a3b")
    with pytest.raises(MoetuneError, match="field 'mtp_num_hidden_layers'"):
        _spec({**qwen, "mtp_num_hidden_layers": -1})
