"""Read a Hugging Face ``config.json`` into a ``ModelSpec`` (family readers: hf_readers.py)."""

from pathlib import Path

from moetune.errors import MoetuneError
from moetune.files import read_json
from moetune.specs.hf_access import HfConfig
from moetune.specs.hf_readers import ARCHITECTURE_ALIASES, READERS
from moetune.specs.model import ModelSpec

# Megatron Bridge's model bridges that set the provider's make_vocab_size_divisible_by themselves (@067f987:
# deepseek_v2_bridge.py 3200, deepseek_v3_bridge.py 1280, kimi_bridge.py 1280); every other bridge passes
# MegatronModelBridge.make_vocab_size_divisible_by(vocab) (conversion/model_bridge.py): bridge_vocab_divisor
PROVIDER_VOCAB_DIVISORS = {"deepseek_v2": 3200, "deepseek_v3": 1280, "kimi_k2": 1280}


def bridge_vocab_divisor(model_type: str, vocab: int) -> int:
    """The vocabulary padding divisor of a Megatron Bridge launch: the provider's own, else the largest power of two
    up to 128 that divides the vocabulary (so the HF vocabulary needs no padding beyond TP's)."""
    if model_type in PROVIDER_VOCAB_DIVISORS:
        return PROVIDER_VOCAB_DIVISORS[model_type]
    base = 128
    while vocab % base:
        base //= 2
    return base


def spec_from_hf(data: dict, *, name: str, origin: str) -> ModelSpec:
    """Build a ModelSpec from a parsed config.json dict."""
    model_type = data.get("model_type") or ARCHITECTURE_ALIASES.get((data.get("architectures") or [""])[0])
    if model_type not in READERS:
        raise MoetuneError(
            f"{origin}: model_type {model_type!r} is not supported; supported: {', '.join(sorted(READERS))}"
        )
    try:
        fields = READERS[model_type](HfConfig({**data, "model_type": model_type}, origin))
    except MoetuneError:
        raise
    except (TypeError, ValueError, ZeroDivisionError) as err:  # a number given as text, a zero interval...
        raise MoetuneError(f"{origin}: a field holds a value of the wrong type or zero ({err}); fix the "
                           "config.json") from None
    try:
        divisor = bridge_vocab_divisor(model_type, fields["vocab_size"])  # moetune plans Bridge launches
        return ModelSpec(name=name, model_type=model_type, source=origin, vocab_divisor=divisor, **fields)
    except ValueError as err:
        raise MoetuneError(f"{origin}: {err}") from None


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
