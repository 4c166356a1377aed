"""Field access to a Hugging Face config.json that names what is missing (the readers' only way in)."""

from typing import Any

from moetune.errors import MoetuneError

_MISSING = object()


class HfConfig:
    """A config dict that reports missing fields by name."""

    def __init__(self, data: dict, origin: str):
        self.data = data
        self.origin = origin

    def get(self, *keys: str, default: Any = _MISSING) -> Any:
        for key in keys:
            node: Any = self.data
            for part in key.split("."):
                if not isinstance(node, dict) or part not in node:
                    break
                node = node[part]
            else:
                if node is not None:
                    if isinstance(default, bool) and not isinstance(node, bool):  # a switch with a switch's default
                        raise MoetuneError(f"{self.origin}: field '{key}' ({node!r}) must be true or false")
                    return node
        if default is _MISSING:
            raise MoetuneError(
                f"{self.origin}: missing field '{keys[0]}' (model_type {self.data.get('model_type')!r}); "
                "add it to the config.json"
            )
        return default

    def count(self, *keys: str, default: Any = _MISSING, least: int = 0) -> int:
        """A whole-number count (layers, MTP modules) of at least `least`, else one error line naming the field."""
        value = self.get(*keys, default=default)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise MoetuneError(f"{self.origin}: field '{keys[0]}' ({value!r}) must be a whole number >= {least}")
        return value

    def head_dim(self) -> int:
        return self.get("head_dim", default=None) or self.get("hidden_size") // self.get("num_attention_heads")
