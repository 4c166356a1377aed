"""Readers: a Megatron Bridge YAML config, a JSON config, and a file of dotted Hydra-style overrides.

Bridge YAML is the ConfigContainer layout (``model:``, ``train:``, ``ddp:``, ``comm_overlap:``,
``mixed_precision:`` ..., and ``env_vars:``), as in Megatron-Bridge's examples/*/conf/*.yaml and as
``ConfigContainer.to_yaml`` dumps it (``_target_`` keys are skipped; a torch dtype dumped as
``{_target_: torch.bfloat16}`` is understood).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Callable

import yaml

from moetune.configio.names import PASSTHROUGH, VALIDATED
from moetune.configio.normalize import DELETE, Assignment
from moetune.configio.types import parse_text
from moetune.errors import MoetuneError
from moetune.files import json_error, saved_again

_DOTTED_LINE = re.compile(r"^[+~]{0,2}[A-Za-z_][\w.]*(=|$)")
PRAGMA = "# moetune:"  # `# moetune: cluster.num_gpus=16` in an emitted file carries moetune's own facts
_SKIP = ("_target_", "_call_", "_partial_", "_args_")
# Turns an estimate/plan result (moetune's JSON) into the normalized config. The planner owns that mapping
# (planner.to_config) and sits above configio, so the interfaces hand it in rather than configio importing it.
# It takes the result and the name its errors give it (the file's path), and names it once.
ResultReader = Callable[[dict, str], dict]


def flatten_sections(data: dict[str, Any], origin: str) -> list[Assignment]:
    """ConfigContainer sections (nested mappings) -> dotted assignments."""
    out: list[Assignment] = []
    for section, body in data.items():
        section = str(section)
        if section in _SKIP:
            continue
        if section in ("env_vars", "env"):
            if not isinstance(body, dict):
                raise MoetuneError(f"{origin}: {section} must be a mapping of NAME: value")
            out += [Assignment(key=f"env.{k}", value=v, origin=origin) for k, v in body.items()]
        elif section == "mixed_precision" and (isinstance(body, str) or body is None):
            out.append(Assignment(key="mixed_precision", value=body, origin=origin))
        elif "." in section:
            out.append(Assignment(key=section, value=body, origin=origin))
        elif body is None:
            continue  # e.g. `comm_overlap: null` -- the section is off
        elif isinstance(body, dict):
            out += [Assignment(key=f"{section}.{k}", value=v, origin=origin)
                    for k, v in body.items() if k not in _SKIP]
        else:
            raise MoetuneError(f"{origin}: section {section!r} must be a mapping of fields, got {body!r}")
    return out


def yaml_assignments(data: Any, origin: str) -> list[Assignment]:
    """A Bridge YAML's assignments (load.read_file sends Megatron-LM's MODEL_ARGS form to model_args.py)."""
    if data is None:
        return []
    if not isinstance(data, dict):
        raise MoetuneError(f"{origin}: expected a Megatron Bridge config (model:, train:, ... sections) or "
                           "Megatron-LM's MODEL_ARGS: mapping")
    return [_module_list(_interpolated(a, origin)) for a in flatten_sections(data, origin)]


# Module lists Megatron-Core reads as a set of names (TransformerConfig.__post_init__: set(recompute_modules) and
# set(offload_modules) less the allowed ones, transformer_config.py :1207 and :1282 @core_v0.16.0), which Bridge hands
# a YAML string over to as it is (training/utils/omegaconf_utils.py process_config_with_overrides merges untyped
# dicts): a string there is refused letter by letter, where moetune's --set reads `core_attn` as a one-item list
MODULE_LISTS = ("model.recompute_modules", "model.offload_modules")


def _module_list(a: Assignment) -> Assignment:
    if a.key in MODULE_LISTS and isinstance(a.value, str) and a.value.strip():
        items = ", ".join(s.strip() for s in a.value.strip("[]").split(","))
        raise MoetuneError(f"{a.origin}: {a.key}: {a.value!r} is one string, which Megatron-Core reads letter by "
                           f"letter as module names; write a list: [{items}]")
    return a


_OC_ENV = re.compile(r"^\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)(?:,([^}]*))?\}$")


def _interpolated(a: Assignment, origin: str) -> Assignment:
    """A Bridge YAML value as OmegaConf resolves it at launch: `${oc.env:NAME[,default]}` from the environment; any
    other `${...}` (a reference to another key, a resolver) is one error line, not a silent string."""
    if not (isinstance(a.value, str) and "${" in a.value) or a.key.split(".", 1)[0] in PASSTHROUGH:
        return a  # a path or name in a section moetune passes through (logger, checkpoint) is the launch's business
    m = _OC_ENV.match(a.value.strip())
    if m and (m.group(1) in os.environ or m.group(2) is not None):
        value = os.environ.get(m.group(1), m.group(2))
        return Assignment(key=a.key, value=parse_text(value.strip()), origin=a.origin)
    if m:
        raise MoetuneError(f"{origin}: {a.key} = {a.value}: environment variable {m.group(1)} is not set; export it "
                           "or write the value")
    raise MoetuneError(f"{origin}: {a.key} = {a.value}: moetune resolves only ${{oc.env:NAME}} interpolations; "
                       "write the value the launch resolves it to")


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last silently, so a run
    would take a value the user may not have meant)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` merges; the keys it brings may repeat
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)):  # `? [a, b]`: a complex key no config has
                raise MoetuneError(f"a key on line {key_node.start_mark.line + 1} is a {type(key).__name__}, not a "
                                   "name; write `name: value`")
            if key in seen:
                raise MoetuneError(f"key {key!r} is given twice in one section (line {key_node.start_mark.line + 1}); "
                                   "keep one")
            seen.add(key)
        return super().construct_mapping(node, deep)


def load_yaml(path: Path) -> Any:
    try:
        data = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)
    except MoetuneError as err:
        raise MoetuneError(f"{path}: {err}") from None
    except ValueError as err:  # a number past Python's 4,300-digit limit
        raise MoetuneError(f"{path}: a value is not a usable number ({err})") from None
    except RecursionError:
        raise MoetuneError(f"{path}: nests its values too deeply to read; pass the config as written out") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "syntax error"
        raise MoetuneError(f"{path}: YAML syntax error{where}: {problem}") from None
    _bounded(data, path)
    return data


# A config is a few hundred values a few levels deep; aliases may share a value, but a value that holds itself or an
# alias expanded into millions of values is no config (and would make emit and --json loop or run for minutes)
MAX_VALUES, MAX_DEPTH = 200_000, 64


def _bounded(data: Any, path: Path) -> None:
    stack, seen = [(data, 0)], 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if depth > MAX_DEPTH or seen > MAX_VALUES:
            what = f"nests values over {MAX_DEPTH} levels deep" if depth > MAX_DEPTH else \
                f"expands to over {MAX_VALUES:,} values"
            raise MoetuneError(f"{path}: {what} (an alias that holds itself, or repeated aliases?); pass the config "
                               "as written out")
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        stack.extend((child, depth + 1) for child in children)


def read_json(path: Path, from_result: ResultReader | None = None) -> list[Assignment]:
    """``{"config": {flat dotted names}}`` (moetune's own), ConfigContainer-shaped JSON, or (when the caller
    passes ``from_result``) an estimate/plan result."""
    text = path.read_text()
    if not text.strip():  # as an empty YAML reads: load_config names the file as one that sets nothing
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:  # a saved plan or estimate (from_result) is said to be saved again
        raise MoetuneError(json_error(str(path), err, from_result and saved_again(path, err.doc) or "")) from None
    except RecursionError:
        raise MoetuneError(f"{path}: nests its values too deeply to read; pass the config or result as written "
                           "out") from None
    except ValueError as err:  # a number past Python's 4,300-digit limit
        raise MoetuneError(f"{path}: a value is not a usable number ({err})") from None
    return json_assignments(data, str(path), from_result)


def json_assignments(data: Any, origin: str, from_result: ResultReader | None = None) -> list[Assignment]:
    if not isinstance(data, dict):
        raise MoetuneError(f"{origin}: expected a JSON object")
    if isinstance(data.get("config"), dict):
        return [Assignment(key=k, value=v, origin=origin) for k, v in data["config"].items()]
    sections = set(VALIDATED) | set(PASSTHROUGH) | {"env", "env_vars", "mixed_precision"}
    if all(str(k) in sections or "." in str(k) or str(k) in _SKIP for k in data):
        return flatten_sections(data, origin)
    if "model_type" in data and "layout" not in data:  # a model's config.json is the model, not the launch
        raise MoetuneError(f"{origin}: a Hugging Face model config.json (model_type {data['model_type']!r}), not a "
                           "launch config or a saved result: give it as the model (check --model FILE; estimate, "
                           "plan and explain take it as MODEL)")
    if from_result is None:
        raise MoetuneError(f"{origin}: no \"config\" object; give {{\"config\": {{dotted names}}}} or "
                           "Megatron Bridge sections (model, train, ...)")
    try:
        config = from_result(data, origin)
    except MoetuneError:  # a readable result that says what is wrong itself, naming the file (ResultReader)
        raise
    except (KeyError, TypeError, ValueError) as err:
        raise MoetuneError(f"{origin}: not an estimate/plan result moetune can read ({err})") from None
    return [Assignment(key=k, value=v, origin=origin) for k, v in config.items()]


def dotted_assignments(items: list[str], origin: str) -> list[Assignment]:
    """Hydra-style ``key=value`` / ``+key=value`` / ``++key=value`` / ``~key`` overrides."""
    out = []
    for item in items:
        text = item.strip()
        if text.startswith("~"):
            out.append(Assignment(key=text.lstrip("~").split("=", 1)[0], value=DELETE, origin=origin))
            continue
        key, eq, value = text.lstrip("+").partition("=")
        if not eq or not key:
            raise MoetuneError(f"{origin}: override {item!r} is not key=value "
                               "(e.g. model.expert_model_parallel_size=8)")
        out.append(Assignment(key=key.strip(), value=parse_text(value.strip()), origin=origin))
    return out


def overrides_lines(text: str) -> list[str]:
    """Non-comment lines of an overrides file, plus ``# moetune: key=value`` pragma lines."""
    lines = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith(PRAGMA):
            lines.append(s[len(PRAGMA):].strip())
        elif s and not s.startswith("#"):
            lines.append(s)
    return lines


SHELL_NAME = r"[A-Za-z_][A-Za-z0-9_]*"  # a shell variable's name (POSIX)
_EXPORT_LINE = re.compile(rf"^(export\s+)?{SHELL_NAME}=")


def looks_like_env(text: str) -> bool:
    """A file of shell variable lines (``export NAME=value``, as emit's env.sh): read as the environment a launch
    line sees, by the Megatron-LM reader."""
    lines = [s for line in text.splitlines() if (s := line.strip()) and not s.startswith("#")]
    return bool(lines) and all(_EXPORT_LINE.match(line) for line in lines)


def looks_dotted(text: str) -> bool:
    lines = overrides_lines(text)
    return bool(lines) and all(_DOTTED_LINE.match(line) for line in lines)
