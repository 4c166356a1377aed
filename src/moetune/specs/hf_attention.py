"""What a Hugging Face family's attention builds beyond its shapes: the biases its attention projections carry
(and the bias switches Megatron cannot build, refused in one line) and which layers attend over a sliding window.
The family readers (hf_readers.py, hf_hybrid.py) call these."""

from moetune.errors import MoetuneError
from moetune.specs.hf_access import HfConfig

# The biases each family's HF attention builds from config.attention_bias, as ModelSpec fields (a family not here
# builds none from it: HF MixtralAttention and MiniMaxM2Attention hard-code bias=False; Qwen2-MoE's switch is
# qkv_bias, read in hf_readers):
# Glm4MoeAttention biases q, k and v (o_proj bias=False), Megatron's add_qkv_bias; PhimoeAttention (LlamaAttention)
# and GptOssAttention bias o_proj too. Grok-1 (hpcai remote code) keeps the reading it had. Then the config class's
# default where a config leaves attention_bias out (GptOssConfig: true; Glm4MoeConfig, PhimoeConfig: false).
ATTENTION_BIASES: dict[str, tuple[tuple[str, ...], bool]] = {
    "glm4_moe": (("add_qkv_bias",), False),
    "phimoe": (("add_qkv_bias", "add_proj_bias"), False),
    "gpt_oss": (("add_qkv_bias", "add_proj_bias"), True),
    "grok-1": (("add_qkv_bias", "add_proj_bias"), False),
}
# Bias switches whose HF biases Megatron cannot build, refused at the value that asks for them: model_type -> key ->
# (value, what the HF model would bias). Megatron biases o_proj only with add_bias_linear, which biases every MLP and
# expert too (transformer_config.py add_bias_linear), and has no bias switch for MLA's down-projections.
_QKVO = "q, k, v and o_proj (an o_proj bias comes in Megatron only with add_bias_linear, which biases every MLP too)"
REFUSED_BIASES: dict[str, dict[str, tuple[bool, str]]] = {
    # HF Qwen3MoeAttention (Qwen3Attention), Qwen3NextAttention, OlmoeAttention, Llama4TextAttention: bias on q/k/v/o
    **{t: {"attention_bias": (True, _QKVO)} for t in ("qwen3_moe", "qwen3_next", "olmoe", "llama4", "llama4_text")},
    # HF DeepseekV3Attention: q_a_proj, kv_a_proj_with_mqa and o_proj (q_b_proj, kv_b_proj none); V2 alike
    **{t: {"attention_bias": (True, "MLA's q_a_proj, kv_a_proj_with_mqa and o_proj, which Megatron's MLA cannot "
                                    "bias alone")} for t in ("deepseek_v2", "deepseek_v3", "kimi_k2")},
    # gpt-oss's expert biases are add_bias_linear, which biases o_proj as well: no gpt-oss without attention biases
    "gpt_oss": {"attention_bias": (False, "no attention projection, but Megatron's expert biases (add_bias_linear) "
                                          "bias o_proj too")},
    # NVIDIA's modeling_nemotron_h.py NemotronHAttention: q/k/v/o (transformers 5's JambaAttention: none);
    # NemotronHMLP: up/down_proj of the MLPs and the shared expert, and the latent projections, not the routed experts;
    # NemotronHMamba2Mixer: in_proj and out_proj
    # HF Ernie4_5_Moe: use_bias biases q/k/v/o, the MLPs' gate/up/down and the LM head (modeling_ernie4_5_moe.py
    # :73-75, :222-225, :635 @5.24.0), and Megatron's output layer has no bias
    **{t: {"use_bias": (True, "q/k/v/o, the MLPs and the LM head, whose bias Megatron's output layer cannot hold")}
       for t in ("ernie4_5_moe", "ernie_moe")},
    "nemotron_h": {"attention_bias": (True, _QKVO),
                   "mlp_bias": (True, "the MLPs and the shared expert but not the routed experts, which Megatron's "
                                      "add_bias_linear cannot do"),
                   "use_bias": (True, "the Mamba in_proj and out_proj, which moetune does not model")},
}


def attention_biases(c: HfConfig) -> dict:
    fields, default = ATTENTION_BIASES.get(c.get("model_type"), ((), False))
    on = c.get("attention_bias", default=default)
    return {field: on for field in fields}


def refuse_biases(c: HfConfig) -> None:
    """One line for a bias switch the model's HF biases cannot be built from (REFUSED_BIASES); Llama-4 keeps its
    switches in text_config."""
    model_type = c.get("model_type")
    switches = c.section("text_config") if model_type in ("llama4", "llama4_text") else c
    for key, (value, what) in REFUSED_BIASES.get(model_type, {}).items():
        if switches.get(key, default=not value) is value:  # left out: the HF default, buildable
            was, fix = str(value).lower(), str(not value).lower()
            raise MoetuneError(f"{c.origin}: {key} {was}: {model_type}'s HF model would bias {what}; moetune "
                               f"cannot plan that - set {key} to {fix}, which Megatron can build")


ATTENTION_TYPES = ("full_attention", "sliding_attention")  # transformers' layer_types for attention layers
# Which layers the family's HF model gives config.sliding_window (a family not here has no sliding window and does not
# read the field: MiniMax-M2's MiniMaxM2Model builds a plain causal mask, "no sliding window opposed to mixtral"):
# "every": every layer - HF MixtralModel builds a sliding-window causal mask for all layers whenever sliding_window is
#   set and MixtralAttention passes it to the kernel (modeling_mixtral.py); PhimoeModel inherits that mask
#   (modular_phimoe.py). Megatron's window_size = (W - 1, 0) on every layer is the same W keys (mistral_bridge.py).
# "layer_types": the layers `layer_types` marks sliding_attention (HF GptOssAttention; gpt_oss_bridge.py's
#   window_size with window_attn_skip_freq)
SLIDING_WINDOW_LAYERS = {"mixtral": "every", "phimoe": "every", "gpt_oss": "layer_types"}


def windows(c: HfConfig, n: int) -> tuple[int | None, ...]:
    """Each layer's sliding window (None: full causal attention), as the family's HF model applies sliding_window."""
    rule = SLIDING_WINDOW_LAYERS.get(c.get("model_type"))
    window = c.get("sliding_window", default=None)
    if rule == "every":
        return (window,) * n
    if rule != "layer_types":
        return (None,) * n
    types = c.text_list("layer_types")  # one entry per layer, as transformers checks
    if types and len(types) != n:
        raise MoetuneError(f"{c.origin}: layer_types has {len(types)} entries for num_hidden_layers {n}; one per layer")
    if bad := sorted(set(types) - set(ATTENTION_TYPES)):
        raise MoetuneError(f"{c.origin}: layer_types has unknown value(s) {bad}; expected {', '.join(ATTENTION_TYPES)}")
    if "sliding_attention" in types and window is None:
        raise MoetuneError(f"{c.origin}: layer_types has sliding_attention layers but sliding_window is null; give "
                           "the window's width")
    return tuple(window if t == "sliding_attention" else None for t in types) or (None,) * n


def refuse_qwen_windows(c: HfConfig) -> None:
    """Sliding windows in the Qwen MoE families are refused: transformers versions window different layers (4.5x
    Qwen2Moe/Qwen3MoeAttention: those from max_window_layers on when use_sliding_window; 5.x Qwen3MoeAttention: every
    layer, Qwen2Moe: as its layer_types say) and Megatron Bridge's Qwen3-MoE bridge sets no window_size
    (qwen3_moe_bridge.py), so the launch would train full attention."""
    window = c.get("sliding_window", default=None)
    if c.get("use_sliding_window", default=False) and window is not None:
        raise MoetuneError(f"{c.origin}: use_sliding_window is true (sliding_window {window}): sliding-window "
                           f"attention in {c.get('model_type')} is not modelled; set use_sliding_window to false to "
                           "plan full attention")
    if "sliding_attention" in c.text_list("layer_types"):
        raise MoetuneError(f"{c.origin}: layer_types has sliding_attention layers: sliding-window attention in "
                           f"{c.get('model_type')} is not modelled; mark them full_attention to plan full attention")
