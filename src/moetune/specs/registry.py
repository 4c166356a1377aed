"""Built-in models: the Hugging Face configs shipped in moetune/data/models, addressable by short name."""

from functools import cache
from importlib import resources
from pathlib import Path

from moetune.errors import MoetuneError
from moetune.specs.hf_config import load_hf_config, spec_from_hf
from moetune.specs.model import ModelSpec
from moetune.words import closest

_SUFFIX = ".config.json"


def _models_dir():
    return resources.files("moetune") / "data" / "models"


def builtin_names() -> list[str]:
    """Short names of every built-in model, sorted."""
    return sorted(p.name.removesuffix(_SUFFIX) for p in _models_dir().iterdir() if p.name.endswith(_SUFFIX))


@cache
def _builtin(name: str) -> ModelSpec:
    import json

    text = (_models_dir() / f"{name}{_SUFFIX}").read_text()
    return spec_from_hf(json.loads(text), name=name, origin=f"built-in model '{name}'")


def load_model(name_or_path: str) -> ModelSpec:
    """A built-in short name (``deepseek-v3``, in any case, as GPU names are) or a path to a config.json."""
    if name_or_path.lower() in builtin_names():
        return _builtin(name_or_path.lower())
    path = Path(name_or_path)
    if path.suffix == ".json" or path.exists():
        return load_hf_config(path)
    raise MoetuneError(
        f"unknown model '{name_or_path}'{_closest(name_or_path)}: use a built-in name ({', '.join(builtin_names())}) "
        "or a path to a Hugging Face config.json"
    )


def _closest(name: str) -> str:
    """'; did you mean X?' for the built-in name nearest a typo or a Hugging Face repo id (Qwen/Qwen3-30B-A3B,
    kimi-k2-instruct), else nothing: the list of every name alone leaves the user to spot it."""
    close = closest(name.lower().rsplit("/", 1)[-1], builtin_names(), cutoff=0.6)
    return f" (did you mean {close}?)" if close else ""
