"""Read a Hugging Face ``config.json`` into a ``ModelSpec`` (family readers: hf_readers.py, hf_hybrid.py)."""

from dataclasses import replace
from pathlib import Path

from moetune.errors import MoetuneError
from moetune.files import read_json
from moetune.specs.hf_access import ABSENT, HfConfig, lookup, short
from moetune.specs.hf_attention import refuse_biases
from moetune.specs.hf_defaults import defaults_note, with_class_defaults
from moetune.specs.hf_readers import ARCHITECTURE_ALIASES, READERS
from moetune.specs.model import ModelSpec
from moetune.specs.spec_checks import SpecError

# Megatron Bridge's model bridges that set the provider's make_vocab_size_divisible_by themselves (@067f987:
# deepseek_v2_bridge.py 3200, deepseek_v3_bridge.py 1280, kimi_bridge.py 1280, glm_moe_dsa/glm5_bridge.py 1280);
# every other bridge passes MegatronModelBridge.make_vocab_size_divisible_by(vocab) (conversion/model_bridge.py):
# bridge_vocab_divisor (DeepSeek-V3.2 has no bridge @067f987: it takes that rule)
PROVIDER_VOCAB_DIVISORS = {"deepseek_v2": 3200, "deepseek_v3": 1280, "kimi_k2": 1280, "glm_moe_dsa": 1280}


def bridge_vocab_divisor(model_type: str, vocab: int) -> int:
    """The vocabulary padding divisor of a Megatron Bridge launch: the provider's own, else the largest power of two
    up to 128 that divides the vocabulary (so the HF vocabulary needs no padding beyond TP's)."""
    if model_type in PROVIDER_VOCAB_DIVISORS:
        return PROVIDER_VOCAB_DIVISORS[model_type]
    base = 128
    while vocab % base:
        base //= 2
    return base


# config.json fields that are counts or sizes wherever a family uses them: a whole number (null where a config
# leaves one out; a "128" given as text would be compared or repeated as a string) from `least` to `most`.
# least None: the reader or ModelSpec bounds it itself, naming the field (layers, expert counts, widths a model may
# lack); 0: a count a model may lack (shared experts); 1: a size that divides (a head dim, a window) or shapes a
# tensor (a Mamba or gated-delta-net dimension) - 0 or less would build nothing.
# most: orders of magnitude past any model released (the largest hidden size is 18,432, FFN width 73,728, head count
# 256 (Nemotron-H's Mamba heads), vocabulary 262,144, 512 experts, a few hundred layers), so that no single size
# overflows the 64-bit counts the planner's numpy layouts hold (walls/rank_params.py; ModelSpec bounds their product);
# None: a count the reader bounds (HfConfig.count, at hf_access.MOST). A dotted key is nested (DBRX's attn_config
# and ffn_config).
_WIDTH, _HEADS, _EXPERTS, _VOCAB, _KERNEL, _WINDOW = 2**18, 2**14, 2**16, 2**24, 2**10, 2**32
SIZE_FIELDS: dict[str, tuple[int | None, int | None]] = {
    "hidden_size": (None, _WIDTH), "intermediate_size": (None, _WIDTH), "moe_intermediate_size": (None, _WIDTH),
    "intermediate_size_mlp": (None, _WIDTH), "shared_expert_intermediate_size": (0, _WIDTH),
    "moe_shared_expert_intermediate_size": (0, _WIDTH), "num_attention_heads": (1, _HEADS),
    "num_key_value_heads": (1, _HEADS), "head_dim": (1, _WIDTH), "num_hidden_layers": (None, None),
    "vocab_size": (None, _VOCAB), "n_shared_experts": (0, _EXPERTS), "n_routed_experts": (None, _EXPERTS),
    "num_experts": (None, _EXPERTS), "num_local_experts": (None, _EXPERTS), "num_experts_per_tok": (None, _EXPERTS),
    "kv_lora_rank": (None, _WIDTH), "q_lora_rank": (0, _WIDTH), "qk_rope_head_dim": (0, _WIDTH),
    "qk_nope_head_dim": (0, _WIDTH), "v_head_dim": (1, _WIDTH), "first_k_dense_replace": (None, None),
    "num_nextn_predict_layers": (None, None), "n_group": (0, _EXPERTS), "topk_group": (0, _EXPERTS),
    "decoder_sparse_step": (None, None), "sliding_window": (1, _WINDOW), "full_attention_interval": (None, None),
    "moe_num_experts": (None, _EXPERTS), "moe_k": (None, _EXPERTS), "moe_num_shared_experts": (0, _EXPERTS),
    # Qwen3-Next gated delta-net (HF Qwen3NextGatedDeltaNet) and Nemotron-H Mamba-2 (NemotronHMamba2Mixer) dims
    "linear_num_key_heads": (1, _HEADS), "linear_num_value_heads": (1, _HEADS), "linear_key_head_dim": (1, _WIDTH),
    "linear_value_head_dim": (1, _WIDTH), "linear_conv_kernel_dim": (1, _KERNEL), "mamba_num_heads": (1, _HEADS),
    "mamba_head_dim": (1, _WIDTH), "ssm_state_size": (1, _WIDTH), "n_groups": (1, _HEADS), "conv_kernel": (1, _KERNEL),
    "moe_latent_size": (0, _WIDTH),
    # DBRX (HF DbrxConfig): d_model / n_heads is its head dim
    "d_model": (1, _WIDTH), "n_heads": (1, _HEADS), "attn_config.kv_n_heads": (1, _HEADS),
    "ffn_config.moe_num_experts": (None, _EXPERTS), "ffn_config.moe_top_k": (None, _EXPERTS),
    "ffn_config.ffn_hidden_size": (None, _WIDTH),
}


def _check_size_fields(data: dict, origin: str) -> None:
    for section in (data, data.get("text_config")):
        if not isinstance(section, dict):
            continue
        for key, (least, most) in SIZE_FIELDS.items():
            value = lookup(section, key)
            if value is ABSENT or value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or (least is not None and value < least):
                text = short(value)
                bound = f" of at least {least}" if least is not None else ""
                raise MoetuneError(f"{origin}: field '{key}' ({text}) must be a whole number{bound} (or null where "
                                   "the model has none); fix the config.json")
            if most is not None and value > most:
                raise MoetuneError(f"{origin}: field '{key}' ({value:,}) is past {most:,}, orders of magnitude beyond "
                                   "any model's; fix the config.json")


def spec_from_hf(data: dict, *, name: str, origin: str) -> ModelSpec:
    """Build a ModelSpec from a parsed config.json dict."""
    model_type = _model_type(data, origin)  # first: another family's fields may mean other things (Hunyuan's lists)
    _check_size_fields(data, origin)
    data, filled = with_class_defaults(data, model_type)  # what transformers' config class builds it with
    config = HfConfig({**data, "model_type": model_type}, origin)
    try:
        refuse_biases(config)
        fields = READERS[model_type](config)
    except MoetuneError:
        raise
    except (TypeError, ValueError, ZeroDivisionError) as err:  # a case the fields' checks did not foresee
        last = f"'{config.asked[-1]}' or a field read before it" if config.asked else "a field"
        raise MoetuneError(f"{origin}: {last} holds a value of the wrong type or zero ({err}); fix the "
                           "config.json") from None
    try:
        divisor = bridge_vocab_divisor(model_type, fields["vocab_size"])  # moetune plans Bridge launches
        spec = ModelSpec(name=name, model_type=model_type, source=origin, vocab_divisor=divisor,
                         notes=defaults_note(model_type, filled), **fields)
        return _bridge_mtp(spec, config)
    except SpecError as err:  # in the config's own keys; the origin names the model
        raise MoetuneError(f"{origin}: {err.render(config.keys)}; fix the config.json") from None
    except TypeError as err:  # a number given as text ("128") that the spec's checks compare
        raise MoetuneError(f"{origin}: a field holds a value of the wrong type ({err}); fix the config.json") from None


# The MTP depth Megatron Bridge reads from any config.json, whatever its family's reader (models/conversion/
# model_bridge.py CONFIG_MAPPING: num_nextn_predict_layers and mtp_num_hidden_layers -> mtp_num_layers)
BRIDGE_MTP_FIELDS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")


def _bridge_mtp(spec: ModelSpec, config: HfConfig) -> ModelSpec:
    """SPEC with the MTP depth Bridge maps from the config.json where its family's reader read none (a Qwen3-MoE or
    Mixtral config naming num_nextn_predict_layers had planned no MTP in silence): each such layer built as the
    decoder's last (ModelSpec.with_mtp), shipped with the checkpoint."""
    given = {k: config.count(k) for k in BRIDGE_MTP_FIELDS if config.get(k, default=None) is not None}
    if len(set(given.values())) > 1:  # Bridge maps both onto one field: which wins is the mapping's order, not said
        raise MoetuneError(f"{config.origin}: " + " and ".join(f"{k} ({v})" for k, v in given.items())
                           + " give two MTP depths; keep one")
    key, depth = next(iter(given.items()), (None, 0))
    if spec.mtp_num_layers or not depth:
        return spec
    try:
        return replace(spec.with_mtp(depth), mtp_checkpoint_layers=depth)
    except ValueError as err:  # a Mamba stack, or more MTP layers than decoder layers
        raise MoetuneError(f"{config.origin}: field '{key}' ({depth}): {err}") from None


def _model_type(data: dict, origin: str) -> str:
    """The family's model_type (a port that ships none, by its architecture), or one line saying it is not read."""
    supported = ", ".join(sorted(READERS))
    architectures = data.get("architectures")
    model_type = data.get("model_type")
    if model_type is None:
        first = architectures[0] if isinstance(architectures, list) and architectures else None
        model_type = ARCHITECTURE_ALIASES.get(first) if isinstance(first, str) else None
        if model_type is None:
            names = f"architectures {_text(architectures)}" if architectures is not None else "no architectures"
            raise MoetuneError(f"{origin}: no model_type ({names}); add the model_type of its Hugging Face config "
                               f"class (supported: {supported})")
    if not isinstance(model_type, str) or model_type not in READERS:
        of = f" (architectures {_text(architectures)})" if architectures is not None else ""
        raise MoetuneError(f"{origin}: model_type {_text(model_type)}{of} is not supported; supported: {supported}")
    return model_type


def _text(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def load_hf_config(path: Path) -> ModelSpec:
    """Read a config.json file from disk (or the config.json inside a Hugging Face snapshot directory)."""
    if not path.exists():
        raise MoetuneError(f"{path}: no such file; pass a built-in model name or a path to a config.json")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise MoetuneError(f"{path}: a directory without a config.json; pass the model's config.json")
        path = path / "config.json"
    data = read_json(path, "model config", "pass a Hugging Face config.json")
    if not isinstance(data, dict):
        raise MoetuneError(f"{path}: a config.json must hold a JSON object")
    stem = path.name.removesuffix(".json").removesuffix(".config")
    if stem == "config":  # a snapshot's config.json: its directory names the model
        stem = path.resolve().parent.name
    return spec_from_hf(data, name=stem, origin=str(path.resolve()))  # absolute: a saved plan finds it from anywhere
