"""Read Megatron Bridge YAML, dotted overrides and Megatron-LM arguments into one normalized config."""

from moetune.configio.load import load_config, read_file
from moetune.configio.names import names

__all__ = ["load_config", "read_file", "names"]
