"""Regenerate src/moetune/data/megatron_releases.csv: which Megatron-Core releases have each Megatron-LM flag and each
Megatron-Core config field that differs between them.

    PYTHONPATH=src python tools/megatron_releases.py [MEGATRON_LM_GIT_DIR] > src/moetune/data/megatron_releases.csv

For each release (TAGS) the tag's megatron/ tree is exported (git archive) and, in a child process with that tree
first on sys.path, megatron/training/arguments.py add_megatron_arguments builds the real argparse parser (so the
flags ArgumentGroupFactory makes from TransformerConfig, TrainingConfig, ... are there as Megatron-LM makes them) and
dataclasses.fields lists TransformerConfig + MLATransformerConfig (ModelParallelConfig's by inheritance; model.*),
DistributedDataParallelConfig (ddp.*) and OptimizerConfig (optimizer.*). Optional packages the import reaches and
this machine lacks (six, regex, pydantic, triton) are stand-ins for imports made from the exported tree only;
torch.compile is left undone (no kernel is built). The same dump of main gives exactly the flags megatron_names.csv
lists (its rows other than extra_args), which is how it was checked.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.abc
import importlib.machinery
import json
import os
import subprocess
import sys
import tempfile
import types

from megatron_values import expand, scripts, values  # the sibling tool

# release -> tag (X.Y: core_vX.Y.0; X.Y.Z: a patch release; main: the commit megatron_names.csv was taken from)
TAGS = {"0.13": "core_v0.13.0", "0.13.1": "core_v0.13.1", "0.14": "core_v0.14.0", "0.15": "core_v0.15.0",
        "0.15.1": "core_v0.15.1", "0.15.2": "core_v0.15.2", "0.15.3": "core_v0.15.3", "0.16": "core_v0.16.0",
        "0.16.1": "core_v0.16.1", "0.17": "core_v0.17.0", "0.17.1": "core_v0.17.1", "0.18": "core_v0.18.0",
        "0.18.2": "core_v0.18.2", "0.19": "core_v0.19.0", "main": "d98e8a64ddf3"}
MIRROR = "/work/.mirror/NVIDIA+Megatron-LM/repo"
STAND_INS = ("six", "regex", "pydantic", "triton")
CONFIGS = {"model": ("megatron.core.transformer.transformer_config", ("TransformerConfig", "MLATransformerConfig")),
           "ddp": ("megatron.core.distributed.distributed_data_parallel_config", ("DistributedDataParallelConfig",)),
           "optimizer": ("megatron.core.optimizer.optimizer_config", ("OptimizerConfig",))}


class _Meta(type):
    def __getattr__(cls, name):
        return _Anything

    def __getitem__(cls, item):
        return _Anything

    def __or__(cls, other):
        return _Anything


class _Anything(metaclass=_Meta):
    """Whatever a stand-in package's attribute is: a class to subclass, a decorator, a value."""

    def __init_subclass__(cls, **kw):
        pass

    def __init__(self, *a, **kw):
        pass

    def __call__(self, *a, **kw):
        return a[0] if len(a) == 1 and callable(a[0]) else _Anything

    def __getattr__(self, name):
        return _Anything


class _Package(types.ModuleType):
    __path__: list[str] = []
    __version__ = "0.0.0"  # the oldest: Megatron then takes its own no-triton paths where it has them

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stand-in modules for STAND_INS, for imports made from TREE's files only (torch's own probes see none)."""

    def __init__(self, tree: str):
        self.tree = tree

    def find_spec(self, name, path, target=None):
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(("<frozen", __file__)):
            frame = frame.f_back
        if name.split(".")[0] in STAND_INS and frame is not None and frame.f_code.co_filename.startswith(self.tree):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _Package(spec.name)

    def exec_module(self, module):
        pass


def dump(tree: str) -> dict:
    """The flags and config fields of the Megatron-LM tree at TREE (run in a child process: it imports that tree)."""
    import importlib
    import typing
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    torch.compile = lambda fn=None, **kw: fn if fn is not None else (lambda f: f)
    typing.override = getattr(typing, "override", lambda f: f)  # Python 3.12's, a plain decorator at main
    sys.meta_path.append(_StandIns(tree))
    sys.path.insert(0, tree)
    from megatron.training.arguments import add_megatron_arguments

    parser = add_megatron_arguments(argparse.ArgumentParser(add_help=False, allow_abbrev=False))
    assert sys.modules["megatron"].__path__[0].startswith(tree)
    flags = sorted(o for a in parser._actions for o in a.option_strings)
    fields = {}
    for section, (module, classes) in CONFIGS.items():
        mod = importlib.import_module(module)
        fields[section] = sorted({f.name for c in classes for f in dataclasses.fields(getattr(mod, c))})
    return {"flags": flags, "fields": fields}


def _export(tag: str, into: str) -> str:
    tree = os.path.join(into, tag)
    os.makedirs(tree)
    archive = subprocess.run(["git", "-C", MIRROR, "archive", tag, "megatron"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
    return tree


def main() -> None:
    global MIRROR
    if len(sys.argv) > 2 and sys.argv[1] == "--dump":
        json.dump(dump(sys.argv[2]), sys.stdout)
        return
    MIRROR = sys.argv[1] if len(sys.argv) > 1 else MIRROR
    have: dict[str, dict[str, set[str]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for release, tag in TAGS.items():
            tree = _export(tag, tmp)
            out = subprocess.run([sys.executable, __file__, "--dump", tree], check=True,
                                 capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
            data = json.loads(out.stdout)
            have[release] = {**{f: "flag" for f in data["flags"]},
                             **{f"{s}.{n}": "field" for s, ns in data["fields"].items() for n in ns},
                             **values(tree), **scripts(MIRROR, tag)}
    have = expand(have)
    commits = {r: subprocess.run(["git", "-C", MIRROR, "rev-parse", "--short=12", f"{t}^{{commit}}"], check=True,
                                 capture_output=True, text=True).stdout.strip() for r, t in TAGS.items()}
    every = set.intersection(*(set(h) for h in have.values()))
    kinds = {n: k for h in have.values() for n, k in h.items()}
    print("# Megatron-Core releases that have each Megatron-LM flag / Megatron-Core config field, listed where they "
          "differ:")
    print("# x = the release has it. A flag or field not listed is in all of them (or is not Megatron-Core's: "
          "Bridge's own).")
    print("# Generated by tools/megatron_releases.py from Megatron-LM "
          + ", ".join(f"{r}={TAGS[r]}@{commits[r]}" if r != "main" else f"main@{commits[r]}" for r in TAGS) + ":")
    print("# flags from megatron/training/arguments.py add_megatron_arguments (the real parser, its dataclass-made "
          "groups too);")
    print("# fields from dataclasses.fields of TransformerConfig + MLATransformerConfig (model.*, with "
          "ModelParallelConfig's),")
    print("# DistributedDataParallelConfig (ddp.*) and OptimizerConfig (optimizer.*); values (model.FIELD=VALUE, "
          "optimizer.optimizer=VALUE, "
          "kind value) a field takes, and the pretrain_*.py entry points (kind script), by tools/megatron_values.py.")
    print("name,kind," + ",".join(TAGS))
    for name in sorted(set(kinds) - every, key=lambda n: (kinds[n], n)):
        print(f"{name},{kinds[name]}," + ",".join("x" if name in have[r] else "" for r in TAGS))


if __name__ == "__main__":
    main()
