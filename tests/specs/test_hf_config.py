"""Reading Hugging Face configs: every built-in parses, layer patterns follow each family's convention,
bad configs fail with one line naming the field."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from moetune.errors import MoetuneError
from moetune.specs.hf_config import load_hf_config, spec_from_hf
from moetune.specs.registry import builtin_names, load_model
from moetune.specs.spec_checks import SpecError


def test_every_shared_config_is_a_builtin_and_parses(shared_data):
    shipped = {p.name.removesuffix(".config.json") for p in (shared_data / "models").glob("*.config.json")}
    assert shipped == set(builtin_names())
    for name in shipped:
        spec = load_hf_config(shared_data / "models" / f"{name}.config.json")
        assert spec.num_layers > 0 and spec.num_moe_layers > 0


def test_deepseek_v3_first_k_dense_mla_and_mtp():
    s = load_model("deepseek-v3")
    assert [k.mlp for k in s.layers[:4]] == ["dense", "dense", "dense", "moe"]  # first_k_dense_replace = 3
    assert s.attention == "mla" and s.mla.q_lora_rank == 1536 and s.mla.kv_lora_rank == 512
    assert s.mtp_num_layers == 1 and s.moe_shared_expert_intermediate_size == 2048
    assert s.moe_router_score_function == "sigmoid"


def test_llama4_interleaves_moe_layers():
    s = load_model("llama4-maverick")  # interleave_moe_layer_step = 2: layers 1, 3, 5, ... are MoE
    assert [k.mlp for k in s.layers[:4]] == ["dense", "moe", "dense", "moe"] and s.num_moe_layers == 24
    assert load_model("llama4-scout").num_moe_layers == 48


def test_qwen3_next_hybrid_attention():
    s = load_model("qwen3-next-80b-a3b")  # full_attention_interval = 4
    assert [k.mixer for k in s.layers[:4]] == ["gdn", "gdn", "gdn", "gqa"]
    assert sum(k.mixer == "gqa" for k in s.layers) == 12 and s.attention_output_gate and s.moe_shared_expert_gate


def test_nemotron_pattern_symbols():
    s = load_model("nemotron3-nano-30b-a3b")  # "MEMEM*E...": 23 Mamba, 23 MoE, 6 attention layers
    assert sum(k.mixer == "mamba" for k in s.layers) == 23 and s.num_moe_layers == 23
    assert sum(k.mixer == "gqa" for k in s.layers) == 6 and not s.gated_linear_unit


def test_ernie_moe_layer_range_and_grok_alias():
    s = load_model("ernie-4.5-300b-a47b")  # moe_layer_start_index = 3, end 53
    assert [k.mlp for k in s.layers[:4]] == ["dense", "dense", "dense", "moe"] and s.num_moe_layers == 51
    assert load_model("grok-1").model_type == "grok-1"  # no model_type in the port: found by architecture


@pytest.mark.parametrize(("data", "needle"), [
    ({"model_type": "bert"}, "model_type 'bert' is not supported"),
    ({"model_type": "qwen3_moe", "hidden_size": 2048}, "missing field 'vocab_size'"),
    ({"model_type": "nemotron_h", "hybrid_override_pattern": "MX", "hidden_size": 8, "vocab_size": 8,
      "num_attention_heads": 1}, "unknown layer symbols ['X']"),
])
def test_bad_configs(data, needle):
    with pytest.raises(MoetuneError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        spec_from_hf(data, name="x", origin="x.json")


def test_inconsistent_config_is_one_line_error():
    data = json.loads(json.dumps({"model_type": "mixtral", "hidden_size": 60, "vocab_size": 10, "num_hidden_layers": 2,
                                  "num_attention_heads": 6, "num_key_value_heads": 4, "intermediate_size": 8,
                                  "num_local_experts": 4, "num_experts_per_tok": 2}))
    with pytest.raises(MoetuneError, match=r"^x.json: num_attention_heads \(6\) must be a multiple of "
                                           r"num_key_value_heads \(4\); fix the config.json$"):
        spec_from_hf(data, name="x", origin="x.json")


def test_group_limited_routing_is_read_and_checked(shared_data):
    """DeepSeek-V3 routes inside its best 4 of 8 expert groups (config n_group / topk_group); a group count that
    does not divide the experts is a one-line error."""
    spec = load_model("deepseek-v3")
    assert (spec.moe_router_num_groups, spec.moe_router_group_topk) == (8, 4)
    assert load_model("kimi-k2").moe_router_num_groups == 1
    data = json.loads((shared_data / "models" / "deepseek-v3.config.json").read_text())
    data["n_group"] = 7
    with pytest.raises(MoetuneError, match=r"n_group \(7\) must divide n_routed_experts \(256\) and topk_group"):
        spec_from_hf(data, name="x", origin="x.json")


def _shared(shared_data, name: str) -> dict:
    return json.loads((shared_data / "models" / f"{name}.config.json").read_text())


@pytest.mark.parametrize("name, edit, needle", [
    ("deepseek-v3", {"num_hidden_layers": 0}, "'num_hidden_layers' (0) must be a whole number from 1 to 10,000"),
    ("deepseek-v3", {"num_hidden_layers": -1}, "'num_hidden_layers' (-1) must be a whole number from 1 to 10,000"),
    ("deepseek-v3", {"num_nextn_predict_layers": -1}, "'num_nextn_predict_layers' (-1) must be a whole number from 0"),
    # each of these had run: a NaN step time, every layer silently dense, a negative MLA rank, a list ignored, a
    # billion layers looping for minutes, a head size rounded down
    ("deepseek-v3", {"moe_intermediate_size": 0}, "moe_intermediate_size (0) must be positive"),
    ("deepseek-v3", {"first_k_dense_replace": 100}, "256 experts but no MoE layer among the 61"),
    ("deepseek-v3", {"kv_lora_rank": -1}, "kv_lora_rank (-1) must be positive"),
    ("qwen3-30b-a3b", {"mlp_only_layers": "all"}, "'mlp_only_layers' ('all') must be a list of layer indices"),
    ("qwen3-30b-a3b", {"mlp_only_layers": [100]}, "must be a list of layer indices from 0 to 47"),
    ("qwen3-30b-a3b", {"decoder_sparse_step": 0}, "'decoder_sparse_step' (0) must be a whole number from 1"),
    ("qwen3-30b-a3b", {"num_hidden_layers": 10 ** 9}, "must be a whole number from 1 to 10,000"),
    ("qwen3-30b-a3b", {"hidden_size": 2050, "head_dim": None},
     "hidden_size (2050) is not a multiple of num_attention_heads (32) and no head_dim is given"),
    ("gpt-oss-120b", {"num_hidden_layers": 24}, "layer_types has 36 entries for num_hidden_layers 24"),
    ("gpt-oss-120b", {"layer_types": ["foo"] * 36}, "layer_types has unknown value(s) ['foo']"),
    ("nemotron3-nano-30b-a3b", {"num_hidden_layers": 40}, "hybrid_override_pattern has 52 layers but"),
])
def test_counts_that_cannot_be_are_one_line(shared_data, name, edit, needle):
    with pytest.raises(MoetuneError) as err:
        spec_from_hf({**_shared(shared_data, name), **edit}, name="x", origin="x.json")
    assert needle in str(err.value)



def _edited(shared_data, name: str, edit: dict) -> dict:
    """A built-in's config.json with `edit` applied; a dotted key edits a nested object (text_config.x)."""
    data = _shared(shared_data, name)
    for key, value in edit.items():
        node, *path, last = [data, *key.split(".")]
        for part in path:
            node = node[part]
        node[last] = value
    return data


@pytest.mark.parametrize("name, edit, needle", [
    # each had been a traceback, a silent wrong count or a message naming no field
    ("llama4-scout", {"text_config": [1, 2]}, "field 'text_config' ([1, 2]) must be an object"),
    ("llama4-scout", {"text_config.interleave_moe_layer_step": 0},
     "field 'interleave_moe_layer_step' (0) must be a whole number from 1"),
    ("llama4-scout", {"text_config.interleave_moe_layer_step": "2"},
     "field 'interleave_moe_layer_step' ('2') must be a whole number from 1"),
    ("ernie-4.5-21b-a3b", {"moe_layer_interval": 0}, "field 'moe_layer_interval' (0) must be a whole number from 1"),
    ("ernie-4.5-21b-a3b", {"moe_layer_start_index": "1"}, "field 'moe_layer_start_index' ('1') must be a whole number"),
    ("dbrx", {"n_heads": 0}, "field 'n_heads' (0) must be a whole number of at least 1"),
    ("dbrx", {"attn_config.kv_n_heads": "8"}, "field 'attn_config.kv_n_heads' ('8') must be a whole number"),
    ("qwen3-next-80b-a3b", {"full_attention_interval": 0},
     "field 'full_attention_interval' (0) must be a whole number"),
    ("nemotron3-nano-30b-a3b", {"hybrid_override_pattern": 123},
     "field 'hybrid_override_pattern' (123) must be a string of layer symbols"),
    ("nemotron3-nano-30b-a3b", {"mamba_num_heads": "128"}, "field 'mamba_num_heads' ('128') must be a whole number"),
    ("nemotron3-nano-30b-a3b", {"n_groups": "8"}, "field 'n_groups' ('8') must be a whole number"),
    ("nemotron3-nano-30b-a3b", {"ssm_state_size": "128"}, "field 'ssm_state_size' ('128') must be a whole number"),
    ("nemotron3-nano-30b-a3b", {"mamba_head_dim": 0}, "field 'mamba_head_dim' (0) must be a whole number of at least"),
    ("nemotron3-nano-30b-a3b", {"mamba_head_dim": -64}, "field 'mamba_head_dim' (-64) must be a whole number of at"),
    ("gpt-oss-20b", {"layer_types": "sliding_attention"}, "field 'layer_types' ('sliding_attention') must be a list"),
    ("deepseek-v3", {"scoring_func": 5}, "field 'scoring_func' (5) must be one of softmax, sigmoid"),
    ("deepseek-v3", {"topk_method": 7}, "field 'topk_method' (7) must be one of greedy, group_limited_greedy"),
])
def test_a_bad_field_is_named_in_one_line(shared_data, name, edit, needle):
    with pytest.raises(MoetuneError) as err:
        spec_from_hf(_edited(shared_data, name, edit), name="x", origin="x.json")
    assert needle in str(err.value) and "\n" not in str(err.value)


FIXTURES = Path(__file__).parent / "fixtures"  # real config.json files, sources in fixtures/SOURCES.md


def _fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.config.json").read_text())


def test_an_unsupported_family_is_named_before_its_fields_are_read():
    """Hunyuan-A13B lists a width per layer (moe_intermediate_size [3072, ...]): the family is the problem, not the
    field."""
    with pytest.raises(MoetuneError) as err:
        spec_from_hf(_fixture("tencent--Hunyuan-A13B"), name="x", origin="x.json")
    assert "model_type 'hunyuan' (architectures ['HunYuanMoEV1ForCausalLM']) is not supported" in str(err.value)


def test_a_config_without_model_type_names_its_architectures():
    data = _fixture("Qwen--Qwen3-Coder-480B-A35B-Instruct")
    del data["model_type"]
    with pytest.raises(MoetuneError, match=r"no model_type \(architectures \['Qwen3MoeForCausalLM'\]\); add the "):
        spec_from_hf(data, name="x", origin="x.json")
    del data["architectures"]
    with pytest.raises(MoetuneError, match=r"no model_type \(no architectures\)"):
        spec_from_hf(data, name="x", origin="x.json")


@pytest.mark.parametrize("name, edit, needle", [
    # ModelSpec's checks, in the keys of the config they were read from (they had named Megatron's fields, after the
    # file's own stem: ".../m01.json: m01: moe_router_topk (8) must be in 1..num_moe_experts (0)")
    ("qwen3-30b-a3b", {"num_experts": 0}, "x.json: num_experts_per_tok (8) must be in 1..num_experts (0)"),
    ("qwen3-30b-a3b", {"num_key_value_heads": 3},
     "x.json: num_attention_heads (32) must be a multiple of num_key_value_heads (3)"),
    ("mixtral-8x7b", {"num_experts_per_tok": 9}, "x.json: num_experts_per_tok (9) must be in 1..num_local_experts (8)"),
    ("mixtral-8x7b", {"intermediate_size": 0}, "x.json: intermediate_size (0) must be positive"),
    ("ernie-4.5-21b-a3b", {"moe_k": 65}, "x.json: moe_k (65) must be in 1..moe_num_experts (64)"),
    ("dbrx", {"n_heads": 47}, "x.json: n_heads (47) must be a multiple of attn_config.kv_n_heads (8)"),
    ("deepseek-v3", {"qk_nope_head_dim": 0}, "x.json: qk_nope_head_dim (0) must be positive"),
    # a negative width that heads do not divide had been told to add head_dim, not that it is negative
    ("qwen3-30b-a3b", {"hidden_size": -4, "head_dim": None}, "x.json: hidden_size (-4) must be positive"),
    ("llama4-scout", {"text_config.intermediate_size_mlp": "16384"}, "field 'intermediate_size_mlp' ('16384') must"),
])
def test_spec_errors_name_the_config_keys(shared_data, name, edit, needle):
    with pytest.raises(MoetuneError) as err:
        spec_from_hf(_edited(shared_data, name, edit), name="x", origin="x.json")
    assert str(err.value).startswith(needle) or needle in str(err.value)
    assert "x.json: x:" not in str(err.value)


def test_a_spec_error_names_modelspec_fields_outside_a_config_json():
    """A launch config's model (planner/from_config) has Megatron's names: the same error reads in those."""
    err = SpecError("m", "{num_query_groups} (0) must be positive")
    assert str(err) == "m: num_query_groups (0) must be positive"
    assert err.render({"num_query_groups": "num_key_value_heads"}) == "num_key_value_heads (0) must be positive"


@pytest.mark.parametrize("edit, needle", [
    ({"hidden_size": 10**12}, "field 'hidden_size' (1,000,000,000,000) is past 262,144"),
    ({"vocab_size": 10**15}, "field 'vocab_size' (1,000,000,000,000,000) is past 16,777,216"),
    ({"num_experts": 10**9}, "field 'num_experts' (1,000,000,000) is past 65,536"),
    ({"mamba_num_heads": 10**6}, "field 'mamba_num_heads' (1,000,000) is past 16,384"),
    # each size below its bound, their product no model: 60,000 experts of width 200,000 x 48 layers
    ({"num_experts": 60_000, "moe_intermediate_size": 200_000},
     "its sizes allow up to 3.5e+15 parameters, past 1e+15 (a thousand times the largest model trained); check "
     "hidden_size, intermediate_size, moe_intermediate_size, num_experts and the layer count"),
])
def test_sizes_past_any_model_are_refused(shared_data, edit, needle):
    """A size (or a product of sizes) no model has would overflow the planner's 64-bit counts: one line, the key."""
    with pytest.raises(MoetuneError) as err:
        spec_from_hf({**_shared(shared_data, "qwen3-30b-a3b"), **edit}, name="x", origin="x.json")
    assert needle in str(err.value)



def test_latent_moe_is_refused_not_read_as_458b():
    """Nemotron-3-Super's routed experts work in a 1,024-wide latent (moe_latent_size; Megatron-Core moe_layer.py's
    fc1/fc2_latent_proj): read as hidden-wide experts it had been 458.6B parameters, not ~120B."""
    for name, latent in (("nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8", 1024),
                         ("nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16", 2048)):
        with pytest.raises(MoetuneError, match=rf"^x.json: moe_latent_size \({latent}\): latent MoE is not modelled"):
            spec_from_hf(_fixture(name), name="x", origin="x.json")
    # 0 or null is no latent projection (Megatron's `if config.moe_latent_size`)
    data = {**_fixture("nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8"), "moe_latent_size": 0,
            "num_nextn_predict_layers": 0}
    assert spec_from_hf(data, name="x", origin="x.json").num_moe_layers == 40


def test_nemotron_mtp_is_refused():
    data = {**_fixture("nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8"), "moe_latent_size": None}
    with pytest.raises(MoetuneError, match=r"num_nextn_predict_layers \(1\): Nemotron-H multi-token prediction "
                                           r"\(mtp_hybrid_override_pattern '\*E'\) is not modelled; set "
                                           r"num_nextn_predict_layers to 0"):
        spec_from_hf(data, name="x", origin="x.json")


def test_layers_block_type_reads_as_the_pattern(shared_data):
    """transformers 5 writes Nemotron-3.5-Lightning's pattern as layers_block_type (mamba/moe/attention per layer):
    the same stack as Nemotron-3-Nano's hybrid_override_pattern, so the same model once MTP is off."""
    data = {**_fixture("nvidia--NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4"), "num_nextn_predict_layers": 0}
    lightning, nano = spec_from_hf(data, name="x", origin="x.json"), load_model("nemotron3-nano-30b-a3b")
    assert lightning.layers == nano.layers and lightning.num_layers == 52
    assert replace(lightning, name=nano.name, source=nano.source) == nano
    # Ultra has no num_hidden_layers: the list gives the count (transformers' NemotronHConfig.num_hidden_layers)
    ultra = {**_fixture("nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16"), "moe_latent_size": None,
             "num_nextn_predict_layers": 0}
    spec = spec_from_hf(ultra, name="x", origin="x.json")
    assert (spec.num_layers, spec.num_moe_layers, sum(k.mixer == "gqa" for k in spec.layers)) == (108, 48, 12)
    # transformers 5's own names (linear_attention, full_attention) read the same
    renamed = {"mamba": "linear_attention", "attention": "full_attention"}
    data["layers_block_type"] = [renamed.get(b, b) for b in data["layers_block_type"]]
    assert spec_from_hf(data, name="x", origin="x.json").layers == nano.layers


@pytest.mark.parametrize("edit, needle", [
    ({"layers_block_type": ["mamba", "moe", "sparse"] * 4}, "layers_block_type has unknown layer type(s) ['sparse']"),
    ({"hybrid_override_pattern": "ME" * 26}, "layers_block_type (MEMEM*EMEMEM*E"),
    ({"layers_block_type": None}, "missing field 'hybrid_override_pattern' (or transformers 5's layers_block_type)"),
    ({"layers_block_type": "mamba"}, "field 'layers_block_type' ('mamba') must be a list of names"),
])
def test_a_bad_layers_block_type_is_one_line(edit, needle):
    data = {**_fixture("nvidia--NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4"), "num_nextn_predict_layers": 0, **edit}
    with pytest.raises(MoetuneError) as err:
        spec_from_hf(data, name="x", origin="x.json")
    assert needle in str(err.value)


def test_a_dense_nemotron_h_is_not_a_moe_model():
    """Nemotron-H-56B's pattern has Mamba, attention and MLP layers only: not 'add n_routed_experts'."""
    with pytest.raises(MoetuneError, match=r"^x.json: not a MoE model \(hybrid_override_pattern has no MoE layer, "
                                           r"E\); moetune plans MoE models$"):
        spec_from_hf(_fixture("nvidia--Nemotron-H-56B-Base-8K"), name="x", origin="x.json")


def test_mixtral_sliding_window_covers_every_layer(shared_data):
    """HF MixtralModel windows every layer when sliding_window is set (modeling_mixtral.py): each layer attends its
    last 4,096 keys, which Megatron's model FLOPs count (Bridge's SWA term) - the window had been dropped."""
    from moetune.walls.flops import causal_context
    from moetune.walls.model_flops import megatron_model_flops
    full = load_model("mixtral-8x22b")
    windowed = spec_from_hf(_edited(shared_data, "mixtral-8x22b", {"sliding_window": 4096}), name="x", origin="x")
    assert {k.window for k in windowed.layers} == {4096} and {k.window for k in full.layers} == {None}
    saved = megatron_model_flops(full, 32768, 1) - megatron_model_flops(windowed, 32768, 1)
    per_layer = 3 * 2 * 32768 * 2 * full.num_attention_heads * full.kv_channels * (
        causal_context(32768) - causal_context(32768, 4096))
    assert saved == pytest.approx(full.num_layers * per_layer)
    # MiniMax-M2 reads no window (HF MiniMaxM2Model: "no sliding window opposed to mixtral")
    minimax = spec_from_hf(_edited(shared_data, "minimax-m2", {"sliding_window": 4096}), name="x", origin="x")
    assert {k.window for k in minimax.layers} == {None}


@pytest.mark.parametrize("edit, needle", [
    ({"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 0},
     "use_sliding_window is true (sliding_window 4096): sliding-window attention in qwen3_moe is not modelled; set "
     "use_sliding_window to false"),
    ({"layer_types": ["sliding_attention"] * 62, "sliding_window": 4096},
     "layer_types has sliding_attention layers: sliding-window attention in qwen3_moe is not modelled"),
])
def test_qwen_sliding_windows_are_refused(edit, needle):
    """Qwen3-MoE windows had been ignored; transformers versions window different layers and Bridge's Qwen3-MoE
    bridge trains full attention, so moetune cannot say which layers a run windows."""
    with pytest.raises(MoetuneError) as err:
        spec_from_hf({**_fixture("Qwen--Qwen3-Coder-480B-A35B-Instruct"), **edit}, name="x", origin="x.json")
    assert needle in str(err.value)


def test_an_unused_qwen_window_reads(shared_data):
    """Qwen1.5-MoE gives sliding_window 32768 with use_sliding_window false: no window, as before."""
    assert {k.window for k in load_model("qwen1.5-moe-a2.7b").layers} == {None}


def test_gpt_oss_sliding_layers_need_a_window(shared_data):
    with pytest.raises(MoetuneError, match="layer_types has sliding_attention layers but sliding_window is null"):
        spec_from_hf(_edited(shared_data, "gpt-oss-20b", {"sliding_window": None}), name="x", origin="x.json")
    assert [k.window for k in load_model("gpt-oss-20b").layers[:2]] == [128, None]


@pytest.mark.parametrize("name, edit, needle", [
    # each had been ignored: the HF model biases projections Megatron cannot bias alone
    ("qwen3-30b-a3b", {"attention_bias": True}, "attention_bias true: qwen3_moe's HF model would bias q, k, v and "
                                                "o_proj (an o_proj bias comes in Megatron only with add_bias_linear"),
    ("deepseek-v3", {"attention_bias": True}, "attention_bias true: deepseek_v3's HF model would bias MLA's q_a_proj"),
    ("kimi-k2", {"attention_bias": True}, "attention_bias true: kimi_k2's HF model would bias MLA's q_a_proj"),
    ("llama4-scout", {"text_config.attention_bias": True}, "attention_bias true: llama4's HF model would bias q, k"),
    ("nemotron3-nano-30b-a3b", {"attention_bias": True}, "attention_bias true: nemotron_h's HF model would bias q"),
    ("nemotron3-nano-30b-a3b", {"mlp_bias": True}, "mlp_bias true: nemotron_h's HF model would bias the MLPs and the "
                                                   "shared expert but not the routed experts"),
    ("nemotron3-nano-30b-a3b", {"use_bias": True}, "use_bias true: nemotron_h's HF model would bias the Mamba in_proj"),
    ("gpt-oss-20b", {"attention_bias": False},
     "attention_bias false: gpt_oss's HF model would bias no attention projection, but Megatron's expert biases"),
])
def test_biases_megatron_cannot_build_are_refused(shared_data, name, edit, needle):
    with pytest.raises(MoetuneError) as err:
        spec_from_hf(_edited(shared_data, name, edit), name="x", origin="x.json")
    assert needle in str(err.value) and "set " in str(err.value)


def test_attention_bias_is_read_as_the_hf_model_reads_it(shared_data):
    """Mixtral and MiniMax-M2 build no attention biases whatever the config says (HF hard-codes bias=False; moetune
    had added q/k/v/o biases); GLM-4.5 biases q/k/v only; gpt-oss without the key takes GptOssConfig's default, true."""
    for name in ("mixtral-8x22b", "minimax-m2"):
        spec = spec_from_hf(_edited(shared_data, name, {"attention_bias": True}), name="x", origin="x")
        assert (spec.add_qkv_bias, spec.add_proj_bias) == (False, False)
    assert (load_model("glm-4.5").add_qkv_bias, load_model("glm-4.5").add_proj_bias) == (True, False)
    oss = _shared(shared_data, "gpt-oss-20b")
    del oss["attention_bias"]
    spec = spec_from_hf(oss, name="x", origin="x")
    assert (spec.add_qkv_bias, spec.add_proj_bias) == (True, True)


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "deepseek-v3", "nemotron3-nano-30b-a3b", "llama4-scout", "dbrx",
                                  "gpt-oss-20b", "ernie-4.5-21b-a3b", "qwen3-next-80b-a3b", "mixtral-8x7b"])
def test_every_field_given_an_odd_value_is_read_or_named(shared_data, name):
    """Each field of a real config (and of its nested objects) set to 0, -1, text, a list, an object or null: the
    config reads, or one line names what is wrong - never a traceback or the unnamed 'wrong type or zero' fallback
    (which had been reached by num_attention_heads 0 and a list as hidden_act)."""
    base = _shared(shared_data, name)
    sections = [()] + [(key,) for key, value in base.items() if isinstance(value, dict)]
    for section in sections:
        for key in list(_edited(shared_data, name, {}).get(section[0]) if section else base):
            for value in (0, -1, "2", [1], {"a": 1}, None):
                dotted = ".".join((*section, key))
                try:
                    spec_from_hf(_edited(shared_data, name, {dotted: value}), name="x", origin="x.json")
                except MoetuneError as err:
                    assert "wrong type or zero" not in str(err) and "\n" not in str(err), (dotted, value, err)


def test_an_unforeseen_error_names_the_last_field_read(shared_data, monkeypatch):
    from moetune.specs import hf_readers

    def reader(c):
        c.get("hidden_size"), c.get("decoder_sparse_step", default=1)
        return 1 // 0
    monkeypatch.setitem(hf_readers.READERS, "qwen3_moe", reader)
    with pytest.raises(MoetuneError, match=r"^x.json: 'decoder_sparse_step' or a field read before it holds a value "
                                           r"of the wrong type or zero \(integer division or modulo by zero\)"):
        spec_from_hf(_shared(shared_data, "qwen3-30b-a3b"), name="x", origin="x.json")


@pytest.mark.parametrize("name", ["deepseek-v2", "deepseek-v2-lite", "qwen2-57b-a14b", "qwen1.5-moe-a2.7b",
                                  "olmoe-1b-7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "mixtral-8x7b"])
def test_a_softmax_router_without_renormalised_top_k_is_pre_softmax(name, shared_data):
    """HF norm_topk_prob false keeps the softmax over every expert as the top-k weights: Megatron's
    moe_router_pre_softmax (its default renormalises over the top k, as norm_topk_prob true and Mixtral do). The
    Megatron-LM HEAD audit found the emitted arguments leaving it out, so those models trained another router."""
    config = json.loads((shared_data / "models" / f"{name}.config.json").read_text())
    assert load_model(name).moe_router_pre_softmax is (config.get("norm_topk_prob") is False)


@pytest.mark.parametrize("name", ["deepseek-v2", "deepseek-v2-lite", "deepseek-v3", "kimi-k2", "moonlight-16b-a3b",
                                  "glm-4.5", "glm-4.5-air", "nemotron3-nano-30b-a3b", "qwen3-30b-a3b"])
def test_routed_scaling_factor_is_megatrons_topk_scaling_factor(name, shared_data):
    """HF routed_scaling_factor multiplies the top-k weights; Megatron Bridge's DeepSeek bridges map it to
    moe_router_topk_scaling_factor, whose None is 1."""
    factor = json.loads((shared_data / "models" / f"{name}.config.json").read_text()).get("routed_scaling_factor")
    assert load_model(name).moe_router_topk_scaling_factor == (None if factor in (None, 1) else factor)


@pytest.mark.parametrize("value", ["2.5", True, 0, -1, float("inf")])
def test_a_routed_scaling_factor_that_is_no_positive_number_is_one_line(value, tmp_path):
    config = json.loads((Path(__file__).parents[2] / "src/moetune/data/models/deepseek-v3.config.json").read_text())
    path = tmp_path / "c.json"
    path.write_text(json.dumps({**config, "routed_scaling_factor": value}))
    with pytest.raises(MoetuneError, match="routed_scaling_factor .* must be a positive number"):
        load_hf_config(path)


def test_qwen3_next_trains_its_checkpoints_mtp_layer_when_asked():
    """The recipe audit: Bridge's Qwen3-Next recipes set mtp_num_layers 1 (its checkpoint ships mtp.layers.0, which
    qwen3_next_bridge.py maps as gated full attention and MoE), and `check --model` refused it because the config.json
    names no MTP depth. By hand: one gated attention + MoE layer and the MTP head's eh_proj and three norms, per rank
    at EP 64 (512 experts: 8 a rank)."""
    spec = load_model("qwen3-next-80b-a3b")
    assert spec.mtp_num_layers == 0  # trained only where asked
    from moetune.layout.layout import Layout
    from moetune.walls.rank_params import stage_params

    lay = Layout(world_size=64, ep=64)
    h, heads, kv, d, ffn = 2048, 16, 2, 256, 512
    attention = h * (2 * heads * d + 2 * kv * d) + heads * d * h + 2 * d + h  # gated q doubled; q/k norms; input norm
    moe = 8 * 3 * h * ffn + 512 * h + 3 * h * ffn + h + h  # local experts, router, shared expert + its gate, norm
    head = 2 * h * h + 3 * h  # eh_proj, enorm, hnorm, final_layernorm
    added = stage_params(spec.with_mtp(1), lay)[0].total - stage_params(spec, lay)[0].total
    assert added == attention + moe + head


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "mixtral-8x7b"])
def test_a_bridge_mtp_field_is_read_whatever_the_family(model, shared_data, tmp_path):
    """Megatron Bridge maps num_nextn_predict_layers to mtp_num_layers for every config (model_bridge.py
    CONFIG_MAPPING); the Qwen3-MoE and Mixtral readers had left it unread, planning no MTP in silence. Each layer is
    built as the decoder's last, and the checkpoint ships them."""
    data = json.loads((shared_data / "models" / f"{model}.config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**data, "num_nextn_predict_layers": 2}))
    spec, base = load_model(str(path)), load_model(model)
    assert (spec.mtp_num_layers, spec.mtp_checkpoint_layers, base.mtp_num_layers) == (2, 2, 0)
    assert spec.mtp_layer_kind == base.layers[-1]


def test_an_mtp_depth_that_cannot_be_built_names_the_field_given(shared_data, tmp_path):
    """mtp_num_hidden_layers alone, on a model with fewer decoder layers: the error names that field."""
    data = json.loads((shared_data / "models" / "qwen3-30b-a3b.config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**data, "mtp_num_hidden_layers": 99}))
    with pytest.raises(MoetuneError, match="field 'mtp_num_hidden_layers' \\(99\\)"):
        load_model(str(path))
