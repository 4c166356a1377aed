"""Read a Hugging Face ``config.json`` into a ``ModelSpec`` (family readers: hf_readers.py)."""

from pathlib import Path

from moetune.errors import MoetuneError
from moetune.files import read_json
from moetune.specs.hf_access import HfConfig
from moetune.specs.hf_readers import ARCHITECTURE_ALIASES, READERS
from moetune.specs.model import ModelSpec


def spec_from_hf(data: dict, *, name: str, origin: str) -> ModelSpec:
    """Build a ModelSpec from a parsed config.json dict."""
    model_type = data.get("model_type") or ARCHITECTURE_ALIASES.get((data.get("architectures") or [""])[0])
    if model_type not in READERS:
        raise MoetuneError(
            f"{origin}: model_type {model_type!r} is not supported; supported: {', '.join(sorted(READERS))}"
        )
    fields = READERS[model_type](HfConfig({**data, "model_type": model_type}, origin))
    try:
        return ModelSpec(name=name, model_type=model_type, source=origin, **fields)
    except ValueError as err:
        raise MoetuneError(f"{origin}: {err}") from None


def load_hf_config(path: Path) -> ModelSpec:
    """Read a config.json file from disk."""
    if not path.exists():
        raise MoetuneError(f"{path}: no such file; pass a built-in model name or a path to a config.json")
    data = read_json(path, "model config", "pass a Hugging Face config.json")
    if not isinstance(data, dict):
        raise MoetuneError(f"{path}: a config.json must hold a JSON object")
    stem = path.name.removesuffix(".json").removesuffix(".config")
    return spec_from_hf(data, name=stem, origin=str(path))
