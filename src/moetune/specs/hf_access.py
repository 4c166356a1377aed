"""Field access to a Hugging Face config.json that names what is missing (the readers' only way in)."""

from typing import Any

from moetune.errors import MoetuneError

_MISSING = object()
ABSENT = object()  # lookup's answer for a key the config does not hold
# The largest count (layers, MTP modules, dense-first layers) a config.json may give: no model has a thousandth of
# it, and a larger one would make every per-layer loop run for minutes
MOST = 10_000


class HfConfig:
    """A config dict that reports missing fields by name."""

    def __init__(self, data: dict, origin: str, keys: dict[str, str] | None = None, read: list[str] | None = None):
        self.data = data
        self.origin = origin
        # ModelSpec field -> the config.json key it was read from, where the two differ (read); a ModelSpec error
        # names the key (hf_config.spec_from_hf)
        self.keys = {} if keys is None else keys
        # the key asked last, shared with sections (a one-item list): an unforeseen error names it
        self.asked = [] if read is None else read

    def section(self, key: str) -> "HfConfig":
        """A nested config (Llama-4's text_config) read like the top level; the top level itself where the config
        has none (a text-only llama4_text config)."""
        value = self.data.get(key)
        if value is None:
            return self
        if not isinstance(value, dict):
            raise MoetuneError(f"{self.origin}: field '{key}' ({short(value)}) must be an object holding the "
                               "language model's fields; fix the config.json")
        return HfConfig({"model_type": self.data.get("model_type"), **value}, self.origin, self.keys, self.asked)

    def name(self, key: str, default: str) -> str:
        """A setting spelled as a name (an activation function)."""
        value = self.get(key, default=default)
        if not isinstance(value, str):
            raise MoetuneError(f"{self.origin}: field '{key}' ({short(value)}) must be a name (text); fix the "
                               "config.json")
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        """A setting spelled as one of `choices` (a scoring function, a routing method)."""
        value = self.get(key, default=default)
        if value not in choices:
            raise MoetuneError(f"{self.origin}: field '{key}' ({short(value)}) must be one of "
                               f"{', '.join(choices)}; fix the config.json")
        return value

    def get(self, *keys: str, default: Any = _MISSING) -> Any:
        self.asked[:] = keys[:1]
        for key in keys:
            node = lookup(self.data, key)
            if node is not ABSENT and node is not None:
                if isinstance(default, bool) and not isinstance(node, bool):  # a switch with a switch's default
                    raise MoetuneError(f"{self.origin}: field '{key}' ({short(node)}) must be true or false")
                return node
        if default is _MISSING:
            raise MoetuneError(
                f"{self.origin}: missing field '{keys[0]}' (model_type {self.data.get('model_type')!r}); "
                "add it to the config.json"
            )
        return default

    def read(self, field: str, *keys: str, default: Any = _MISSING) -> Any:
        """get(*keys) for the ModelSpec `field`, remembering which key gave it (the first present; else the first)."""
        self.keys[field] = next((key for key in keys if self._has(key)), keys[0])
        return self.get(*keys, default=default)

    def _has(self, key: str) -> bool:
        return lookup(self.data, key) not in (ABSENT, None)

    def count(self, *keys: str, default: Any = _MISSING, least: int = 0) -> int:
        """A whole-number count (layers, MTP modules) of at least `least`, else one error line naming the field."""
        value = self.get(*keys, default=default)
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MOST:
            raise MoetuneError(f"{self.origin}: field '{keys[0]}' ({short(value)}) must be a whole number from "
                               f"{least} to {MOST:,}")
        return value

    def layer_indices(self, key: str, layers: int) -> set[int]:
        """A list of layer indices (e.g. mlp_only_layers), each in 0..layers-1."""
        value = self.get(key, default=[])
        if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers
                                                  for i in value):
            raise MoetuneError(f"{self.origin}: field '{key}' ({short(value)}) must be a list of layer indices from 0 "
                               f"to {layers - 1}")
        return set(value)

    def text_list(self, key: str) -> list[str]:
        """A list of names, one per layer (layer_types, layers_block_type); [] where the config has none."""
        value = self.get(key, default=[])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise MoetuneError(f"{self.origin}: field '{key}' ({short(value)}) must be a list of names, one per "
                               "layer; fix the config.json")
        return value

    def head_dim(self) -> int:
        self.keys["kv_channels"] = "head_dim"
        if (given := self.get("head_dim", default=None)) is not None:
            return given
        hidden, heads = self.get("hidden_size"), self.get("num_attention_heads")
        if isinstance(hidden, int) and isinstance(heads, int) and hidden > 0 and heads > 0 and hidden % heads:
            raise MoetuneError(f"{self.origin}: hidden_size ({hidden}) is not a multiple of num_attention_heads "
                               f"({heads}) and no head_dim is given; add head_dim to the config.json")
        return hidden // heads


def lookup(data: dict, key: str) -> Any:
    """The value at a dotted key ("rope_scaling.factor"), None included; ABSENT where the config has no such key."""
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return ABSENT
        node = node[part]
    return node


def short(value: Any) -> str:
    """A value as an error line quotes it: its repr, cut at 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
