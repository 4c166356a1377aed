"""Regenerate src/moetune/data/bridge_releases.csv and bridge_pins.csv: which Megatron Bridge releases have each
config field a Bridge ConfigContainer takes (and each Megatron-LM flag of the Megatron-LM they pin), for
``--megatron-bridge X.Y.Z``.

    PYTHONPATH=src python tools/bridge_releases.py [BRIDGE_GIT_DIR [MEGATRON_LM_GIT_DIR]]

A Bridge release runs the Megatron-LM its 3rdparty/Megatron-LM submodule pins (a commit of Megatron-LM main between
two Megatron-Core releases as often as a release tag), so its TransformerConfig is that commit's, not a release's.
Per Bridge tag:
- Megatron-LM flags: the pinned commit's real parser (tools/megatron_releases.py dump, in a child process), and the
  values its TransformerConfig takes (tools/megatron_values.py);
- config fields: the dataclass fields of the class each ConfigContainer section holds (SECTIONS), read from the
  sources by ast: each class's annotated names (ClassVar aside) and its bases', each base found through the module's
  imports, in Bridge at the tag (src/megatron/bridge/...) or in Megatron-LM at the pin (megatron/core, .../training).
  Bridge is not importable here (it needs CUDA-only packages); reading the sources is how megatron_names.csv was made.
bridge_pins.csv records each tag's commit, the pin, and the Megatron-Core version that pin's package_info.py says.
"""

from __future__ import annotations

import ast
import csv
import json
import os
import subprocess
import sys
import tempfile

from megatron_releases import _export  # the sibling tool: a Megatron-LM tree exported at a commit
from megatron_values import expand, scripts, values

BRIDGE = "/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo"
MLM = "/work/.mirror/NVIDIA+Megatron-LM/repo"
# Megatron Bridge's release tags with a 3rdparty/Megatron-LM pin (v0.1.0 had none: it used the installed megatron-core)
TAGS = ("v0.2.0", "v0.2.1", "v0.2.2", "v0.3.0", "v0.3.1", "v0.4.0", "v0.4.1", "v0.4.2", "v0.5.0", "v0.5.1", "v0.6.0")
# ConfigContainer section -> the classes it holds (module, class): a section's fields are the union (the model's
# provider is GPTModelProvider, an MLA model's adds MLATransformerConfig, a hybrid one's is MambaModelProvider)
SECTIONS = {
    "model": [("megatron.bridge.models.gpt_provider", "GPTModelProvider"),
              ("megatron.bridge.models.mamba.mamba_provider", "MambaModelProvider"),
              ("megatron.core.transformer.transformer_config", "MLATransformerConfig")],
    "ddp": [("megatron.bridge.training.config", "DistributedDataParallelConfig")],
    "optimizer": [("megatron.bridge.training.config", "OptimizerConfig")],
    "comm_overlap": [("megatron.bridge.training.comm_overlap", "CommOverlapConfig")],
    "mixed_precision": [("megatron.bridge.training.mixed_precision", "MixedPrecisionConfig")],
    "train": [("megatron.bridge.training.config", "TrainingConfig")],
    "dataset": [("megatron.bridge.training.config", "GPTDatasetConfig")],
    "rng": [("megatron.bridge.training.config", "RNGConfig")],
    "checkpoint": [("megatron.bridge.training.config", "CheckpointConfig")],
    "dist": [("megatron.bridge.training.config", "DistributedInitConfig")],
    "rerun_state_machine": [("megatron.bridge.training.config", "RerunStateMachineConfig")],
    "scheduler": [("megatron.bridge.training.config", "SchedulerConfig")],
    "logger": [("megatron.bridge.training.config", "LoggerConfig")],
}


# Megatron-Core's config classes (tools/megatron_releases.py CONFIGS), read at Megatron-LM main (MAIN, the commit
# megatron_names.csv was taken from)
CORE = (("model", "megatron.core.transformer.transformer_config", ("TransformerConfig", "MLATransformerConfig")),
        ("ddp", "megatron.core.distributed.distributed_data_parallel_config", ("DistributedDataParallelConfig",)),
        ("optimizer", "megatron.core.optimizer.optimizer_config", ("OptimizerConfig",)))
MAIN = "d98e8a64ddf3"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


class Sources:
    """Module sources by dotted name: megatron.bridge.* from Bridge at TAG, megatron.* else from Megatron-LM at PIN."""

    def __init__(self, tag: str, pin: str):
        self.tag, self.pin, self.cache = tag, pin, {}

    def module(self, name: str) -> tuple[str, ast.Module] | None:
        """(the module's own dotted name as a package or not, its syntax tree), or None where neither repo has it."""
        if name not in self.cache:
            repo, rev, root = (BRIDGE, self.tag, "src/") if name.startswith("megatron.bridge") else (MLM, self.pin, "")
            path = root + name.replace(".", "/")
            for candidate, package in ((path + ".py", False), (path + "/__init__.py", True)):
                got = subprocess.run(["git", "-C", repo, "show", f"{rev}:{candidate}"], capture_output=True, text=True)
                if got.returncode == 0:
                    self.cache[name] = (name if package else name.rsplit(".", 1)[0], ast.parse(got.stdout))
                    break
            else:
                self.cache[name] = None
        return self.cache[name]


def _imported(package: str, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom names (PACKAGE: the importing module's package)."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _base_name(node: ast.expr) -> str:
    node = node.value if isinstance(node, ast.Subscript) else node  # Mixin[T] -> Mixin
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def class_fields(src: Sources, module: str, cls: str, depth: int = 0) -> set[str]:
    """The annotated class-body names of CLS in MODULE and of its bases (a dataclass's fields), ClassVar aside."""
    found = src.module(module)
    if found is None or depth > 20:
        return set()
    package, tree = found
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            own = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                   and "ClassVar" not in ast.unparse(s.annotation)}
            for base in node.bases:
                name = _base_name(base)
                own |= class_fields(src, *_where(tree, package, module, name), depth + 1) if name else set()
            return own
    where = _where(tree, package, module, cls)  # re-exported: follow the import
    return class_fields(src, *where, depth + 1) if where[0] != module else set()


def _where(tree: ast.Module, package: str, module: str, name: str) -> tuple[str, str]:
    """(module, original name) NAME refers to in MODULE: imported there, or defined there."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _imported(package, node), alias.name
    return module, name


def core_fields(src: Sources) -> dict[str, str]:
    """Megatron-Core's own config classes' fields (model.*, ddp.*, optimizer.*), as megatron_releases.py lists."""
    return {f"{section}.{f}": "field" for section, module, classes in CORE for cls in classes
            for f in class_fields(src, module, cls)}


def core_listed() -> dict[str, str]:
    """The names megatron_releases.csv lists (each is in some Megatron-Core release and not in all), with their kind."""
    with open(_data("megatron_releases.csv")) as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        return {row["name"]: row["kind"] for row in rows}


def fields(tag: str, pin: str) -> dict[str, str]:
    src = Sources(tag, pin)
    return {**{f"{section}.{f}": "field" for section, classes in SECTIONS.items()
               for module, cls in classes for f in class_fields(src, module, cls)},
            **{f: "field" for f in class_fields(src, "megatron.bridge.training.config", "ConfigContainer")
               if f not in SECTIONS and not f.startswith("_")}, **runner(tag)}


# What emit's Bridge launch (emit/launch.py) runs of the tag's own runner: run_recipe.py (from v0.3.0), its --mode
# option (v0.3.x, again from v0.6.0), and recipe_runner.py, whose hooks the launch patches (from v0.6.0)
RUNNER = ("scripts/training/run_recipe.py", "scripts/training/recipe_runner.py")


def runner(tag: str) -> dict[str, str]:
    """{"scripts/training/run_recipe.py": "bridge_script", "run_recipe.py --mode": "bridge_option", ...} at TAG."""
    listed = set(_git("-C", BRIDGE, "ls-tree", "--name-only", tag, "scripts/training/").split())
    out = {name: "bridge_script" for name in RUNNER if name in listed}
    if RUNNER[0] in listed and '"--mode"' in _git("-C", BRIDGE, "show", f"{tag}:{RUNNER[0]}"):
        out["run_recipe.py --mode"] = "bridge_option"
    return out


def flags(pin: str, tmp: str) -> dict[str, str]:
    """The flags of Megatron-LM at PIN (its real parser), and the values its TransformerConfig takes
    (megatron_values)."""
    tools, tree = os.path.dirname(os.path.abspath(__file__)), _export(pin, tmp)
    out = subprocess.run([sys.executable, os.path.join(tools, "megatron_releases.py"), "--dump", tree],
                         check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    return {**{f: "flag" for f in json.loads(out.stdout)["flags"]}, **values(tree), **scripts(MLM, pin)}


# Bridge's own optimizer setup (training/optim.py) routes a Muon name to Megatron-Core's get_megatron_muon_optimizer
# from v0.3.0; before it every name goes to get_megatron_optimizer, which at the pin (0d8e0714cd29,
# optimizer/__init__.py:415) raises "muon optimizer is not supported" though the pin's own trainer takes it
MUON_ROUTE = "get_megatron_muon_optimizer"


def bridge_optimizers(tag: str, pinned: dict[str, str]) -> dict[str, str]:
    """PINNED (the pin's names) with the Muon optimizer values (megatron_values.MUON) only where TAG's own optimizer
    setup routes them (MUON_ROUTE)."""
    routes = MUON_ROUTE in _git("-C", BRIDGE, "show", f"{tag}:src/megatron/bridge/training/optim.py")
    return {n: k for n, k in pinned.items() if routes or not n.startswith("optimizer.optimizer=")}


def core_version(pin: str) -> str:
    info = _git("-C", MLM, "show", f"{pin}:megatron/core/package_info.py")
    parts = dict(line.replace(" ", "").split("=", 1) for line in info.splitlines()
                 if line.split("=")[0].strip() in ("MAJOR", "MINOR", "PATCH", "PRE_RELEASE"))
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}{parts['PRE_RELEASE'].strip(chr(34) + chr(39))}"


def main() -> None:
    global BRIDGE, MLM
    BRIDGE = sys.argv[1] if len(sys.argv) > 1 else BRIDGE
    MLM = sys.argv[2] if len(sys.argv) > 2 else MLM
    pins = {t: _git("-C", BRIDGE, "ls-tree", t, "3rdparty/Megatron-LM").split()[2] for t in TAGS}
    have: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        dumped: dict[str, dict[str, str]] = {}
        for tag, pin in pins.items():
            if pin not in dumped:
                dumped[pin] = flags(pin, os.path.join(tmp, pin[:12]))
            have[tag] = {**bridge_optimizers(tag, dumped[pin]), **fields(tag, pin)}
    releases = [t[1:] for t in TAGS]
    with open(_data("bridge_pins.csv"), "w") as out:
        out.write("# Megatron Bridge release tags and the Megatron-LM their 3rdparty/Megatron-LM submodule pins "
                  "(tools/bridge_releases.py);\n# megatron_core: that commit's megatron/core/package_info.py\n")
        out.write("bridge,tag,bridge_commit,megatron_lm_commit,megatron_core\n")
        for t in TAGS:
            out.write(f"{t[1:]},{t},{_git('-C', BRIDGE, 'rev-parse', '--short=12', t + '^{commit}').strip()},"
                      f"{pins[t][:12]},{core_version(pins[t])}\n")
        # Megatron-LM main's own names (its parser's flags, its config classes' fields), and the names
        # megatron_releases.csv lists: one no pin has is listed with no release, not left out (a name not listed is
        # in every release)
        main = {**flags(MAIN, os.path.join(tmp, "main")), **core_fields(Sources(TAGS[-1], MAIN)), **core_listed()}
    have = expand({**have, "main": main})
    main = have.pop("main")
    every = set.intersection(*(set(h) for h in have.values()))
    kinds = {n: k for h in [main, *have.values()] for n, k in h.items()}
    with open(_data("bridge_releases.csv"), "w") as out:
        out.write("# Megatron Bridge releases that have each config field a ConfigContainer section takes and each "
                  "Megatron-LM flag of the Megatron-LM they pin, listed where they differ:\n"
                  "# x = the release has it; a row with none is in no release (a name of Megatron-LM main at " + MAIN
                  + " or of\n# an older Megatron-Core release). "
                  "A name not listed is in all of them (or is not one the tool reads). Generated by "
                  "tools/bridge_releases.py from Megatron-Bridge tags " + ", ".join(TAGS) + " and the Megatron-LM "
                  "commits they pin (bridge_pins.csv):\n# fields by ast from the classes each section holds (the "
                  "tool's SECTIONS, bases followed into Megatron-LM at the pin); flags from the pin's real parser.\n")
        out.write("name,kind," + ",".join(releases) + "\n")
        for name in sorted(set(kinds) - every, key=lambda n: (kinds[n], n)):
            out.write(f"{name},{kinds[name]}," + ",".join("x" if name in have[t] else "" for t in TAGS) + "\n")


def _data(name: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "moetune", "data", name)


if __name__ == "__main__":
    main()
