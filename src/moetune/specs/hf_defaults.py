"""A config.json as transformers builds it: the fields it leaves out take their config class's defaults
(data/hf_defaults.toml), since Megatron Bridge loads it through AutoConfig. A DeepSeek-V3 config without q_lora_rank
had read as a plain q projection (678.8B parameters where transformers builds 671.0B), a Qwen3-MoE one without
num_key_value_heads as 32 KV heads where Qwen3MoeConfig gives 4. Each default filled is named (ModelSpec.notes).
"""

from functools import cache

from moetune.files import shipped_toml

# the section a family's language-model fields live in (Llama-4's text_config), where not the top level
SECTION = {"llama4": "text_config"}
# the table a family reads (llama4's text_config is a Llama4TextConfig; ERNIE's older model_type is the same class)
TABLE = {"llama4": "llama4_text", "ernie_moe": "ernie4_5_moe",
         # Kimi-K2's config.json builds a DeepseekV3Config (its architectures, DeepseekV3ForCausalLM)
         "kimi_k2": "deepseek_v3"}
@cache
def class_defaults() -> dict[str, dict]:
    return shipped_toml("hf_defaults.toml")


def with_class_defaults(data: dict, model_type: str) -> tuple[dict, tuple[str, ...]]:
    """(DATA with each field its family's config class defaults and DATA leaves out, 'field=value' of each filled)."""
    defaults = class_defaults().get(TABLE.get(model_type, model_type), {})
    key = SECTION.get(model_type)
    nested = bool(key) and isinstance(data.get(key), dict)  # a text-only llama4_text config has its fields on top
    fields = data[key] if nested else data
    filled = {k: v for k, v in defaults.items() if k not in fields} | _derived(model_type, fields)  # null is a value
    said = tuple(f"{k}={_text(v)}" for k, v in filled.items())
    if not filled:
        return data, ()
    return ({**data, key: {**fields, **filled}} if nested else {**data, **filled}), said


def _derived(model_type: str, fields: dict) -> dict:
    """Defaults the class derives from other fields: GptOssConfig's layer_types, sliding on even layers
    (configuration_gpt_oss.py :84-87 @5.24.0: "sliding_attention" if bool((i + 1) % 2) else "full_attention")."""
    n = fields.get("num_hidden_layers")
    if model_type == "gpt_oss" and fields.get("layer_types") is None and isinstance(n, int) and n > 0:
        return {"layer_types": ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]}
    return {}


def _text(value) -> str:
    if isinstance(value, list):
        return f"[{len(value)} entries]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def defaults_note(model_type: str, filled: tuple[str, ...]) -> tuple[str, ...]:
    """The ModelSpec note naming the defaults filled in, or none."""
    if not filled:
        return ()
    return (f"config.json leaves out {', '.join(f.split('=')[0] for f in filled)}: read at transformers' "
            f"{TABLE.get(model_type, model_type)} config class defaults ({', '.join(filled)}; data/hf_defaults.toml), "
            "as Megatron Bridge's AutoConfig builds it",)
