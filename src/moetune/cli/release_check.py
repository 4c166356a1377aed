"""``--megatron-core X.Y`` / ``--megatron-bridge X.Y.Z`` on check and emit: the names a config uses that the release
it targets lacks.

A Megatron-LM launch on an older release dies at its first flag the parser lacks ("unrecognized arguments"), and a
Bridge config at its first field TransformerConfig / DistributedDataParallelConfig / OptimizerConfig lacks ("got an
unexpected keyword argument"), or, as dotted overrides, at its first key the ConfigContainer lacks (Hydra: "not in
struct"); configio/releases.py reads megatron_releases.csv and bridge_releases.csv and configio/release_context.py
records what the read meets. check says each such name (check.not_in_release, an error); emit drops one held at its
default, which the release's own behaviour is, and refuses the rest.
"""

from __future__ import annotations

import json
from typing import Any

from moetune.configio.legacy import legacy_switches, switches_in
from moetune.configio.legacy import respelled as legacy_spelling
from moetune.configio.names import names
from moetune.configio.release_context import Reading, reading
from moetune.configio.releases import (
    alias_in,
    applied_onto,
    at_default,
    bridge_pins,
    core_source,
    describe,
    family_of,
    has,
    has_it,
    known_release,
    newest_having,
    option,
    product,
    release_number,
    span,
    values_lacking,
)
from moetune.errors import MoetuneError
from moetune.planner.release_fit import SPLIT_PATTERN_FLAG, splits_hybrids
from moetune.rules import Finding, load_table

# the class each section's fields belong to (tools/megatron_releases.py CONFIGS, tools/bridge_releases.py SECTIONS)
_CLASS = {"model": "TransformerConfig", "ddp": "DistributedDataParallelConfig", "optimizer": "OptimizerConfig",
          "comm_overlap": "CommOverlapConfig", "mixed_precision": "MixedPrecisionConfig", "train": "TrainingConfig",
          "dataset": "GPTDatasetConfig", "rng": "RNGConfig", "checkpoint": "CheckpointConfig",
          "dist": "DistributedInitConfig", "rerun_state_machine": "RerunStateMachineConfig"}


def release_target(megatron_core: str | None, megatron_bridge: str | None) -> tuple[str | None, str]:
    """(the release named, its family) of the two options, which name one release between them."""
    if megatron_core is not None and megatron_bridge is not None:
        raise MoetuneError(f"--megatron-core {megatron_core} and --megatron-bridge {megatron_bridge}: pass one; a "
                           "Bridge release runs the Megatron-Core its 3rdparty/Megatron-LM pins (bridge_pins.csv)")
    return (megatron_bridge, "bridge") if megatron_bridge is not None else (megatron_core, "core")


def options_reading(megatron_core: str | None, megatron_bridge: str | None):
    """The reading (configio/release_context.py) of the release the two options name, checked as it opens: the rules a
    command's findings read (core_at_least) judge under it, and the command takes the release from it."""
    return reading(*release_target(megatron_core, megatron_bridge))


def inputs_release(configs, megatron_core: str | None, megatron_bridge: str | None) -> tuple[str | None, str]:
    """release_target; where neither option is given, the release a saved plan among CONFIGS was searched for
    (plan --megatron-core / --megatron-bridge records it: release_json), so its files are written for that release."""
    if megatron_core is None and megatron_bridge is None:
        for path in configs:
            if (saved := _saved_release(path)) is not None:
                return saved
    return release_target(megatron_core, megatron_bridge)


def _saved_release(path: str) -> tuple[str, str] | None:
    if not str(path).endswith(".json"):
        return None
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):  # read_inputs says what is wrong with the file
        return None
    saved = data.get("release") if isinstance(data, dict) else None
    return (saved["release"], family_of(saved["release"])) if isinstance(saved, dict) and "release" in saved else None


def checked_release(megatron_core: str | None, megatron_bridge: str | None) -> str | None:
    """The release the two options name, checked (one line where it is unknown), or None."""
    release, family = release_target(megatron_core, megatron_bridge)
    return known_release(release, family) if release is not None else None


def release_json(release: str, lacks: tuple[str, ...]) -> dict:
    """A plan's release, as its JSON records it: emit and check of the file take it where they name none."""
    return {"release": release, "family": family_of(release), "option": option(release),
            "described": describe(release), "fields_it_lacks": list(lacks)}


def release_line(release: str, lacks: tuple[str, ...]) -> str:
    left = f"; knob sets setting {', '.join(lacks)}, which it lacks, left out or run without them" if lacks else ""
    return f"Searched for {describe(release)}{left}; emit and check of the saved plan target it ({option(release)})"


def _advice(name: str, release: str) -> str:
    if alias := alias_in(name, release):
        return f"write it as {alias}, which that release has (`moetune emit {option(release)}` does)"
    upgrade = newest_having(name, family_of(release))
    advice = f"upgrade to {product(release)} {upgrade} or later, or drop {name}" if upgrade else f"drop {name}"
    if legacy := [s for s in legacy_switches() if s.field == name and s.switch_value and has(release, s.switch)]:
        advice += (f" ({describe(release)} takes " + ", ".join(f"{s.value} by {s.switch}" for s in legacy)
                   + f": `moetune emit {option(release)}` writes it)")
    return advice


def _what(name: str, release: str) -> str:
    if name.startswith("--"):
        return (f"Megatron-LM argument {name} is not in {describe(release)}'s parser ({has_it(name, release)}): the "
                "launch stops there with 'unrecognized arguments'")
    if onto := [a for a in applied_onto(name, family_of(release)) if not has(release, a)]:
        return (f"Bridge applies {name} onto {onto[0]}, which {describe(release)} lacks ({has_it(name, release)}): the "
                "run would go without it, silently")
    cls = _CLASS.get(name.split(".", 1)[0], "config")
    return f"{name} is not a {cls} field in {describe(release)} ({has_it(name, release)}): Bridge stops there with " + (
        "'unexpected keyword argument'" if family_of(release) == "core" else "'not in struct' (a dotted override) "
        "or 'unexpected keyword argument'")


def _source(release: str) -> str:
    if family_of(release) == "bridge":
        return f"Megatron-Bridge v{release} + Megatron-LM {core_source(release)} (src/moetune/data/bridge_releases.csv)"
    return f"Megatron-LM {core_source(release)} (src/moetune/data/megatron_releases.csv)"


def release_findings(reading: Reading, config: dict[str, Any], saved: bool = False) -> list[Finding]:
    """One error finding per name the read met that the target release lacks (a field CONFIG holds at its default,
    as a saved plan writes every field it sets over a recipe, is said to be one emit leaves out). `saved`: a saved
    plan or estimate is among the inputs, which runs only through emit: its default-held fields are then info. Each
    names, as its same_as, the rules that cover its name or value (rules.yaml `covers`): where one fires, it says
    the fault with its fix and check leaves this finding out (check_cmd.py said_once)."""
    def held_at_default(name: str) -> bool:
        key = _key(name)
        return key in config and at_default(key, config[key])

    def emit_note(name: str) -> str:
        return f" (it holds the default, which `moetune emit {option(reading.release)}` leaves out)" \
            if held_at_default(name) else ""

    return [Finding(rule="check.not_in_release", severity="info" if saved and held_at_default(name) else "error",
                    message=f"{_what(name, reading.release)}; {_advice(name, reading.release)}{emit_note(name)}",
                    source=_source(reading.release), same_as=load_table().covering(name))
            for name in reading.lacking()] + _value_findings(config, reading.release) + \
        _switch_findings(config, reading, saved)


def _value_findings(config: dict[str, Any], release: str | None) -> list[Finding]:
    """One error per value a field takes that the release's TransformerConfig refuses (its __post_init__ or Literal:
    configio/releases.py values_lacking); nothing of it can be left out."""
    if release is None:
        return []
    return [Finding(rule="check.not_in_release", severity="error",
                    message=f"{name.replace('=', ' value ', 1)} is not one {describe(release)} accepts "
                            f"({has_it(name, release)}); {_advice(name, release)}",
                    source=_source(release), same_as=load_table().covering(name))
            for name in values_lacking(config, release)]


_PATTERN = "model.hybrid_layer_pattern"  # a Mamba hybrid's, split by '|' where the release takes it (splits_hybrids)


def _switch_findings(config: dict[str, Any], reading: Reading, saved: bool) -> list[Finding]:
    """A value the release takes by a legacy switch (configio/legacy.py) without the switch: the flex dispatcher's
    DeepEP without moe_enable_deepep before 0.16, which asserts it. A saved plan runs through emit, which sets it:
    info there. A Megatron-LM launch's --moe-enable-deepep sets the field (configio/mlm.py SPECIAL)."""
    release = reading.release
    return [Finding(rule="check.needs_legacy_switch", severity="info" if saved else "error",
                    message=f"{describe(release)} takes {s.field}={s.value}{_with(s)} by {s.switch} "
                            f"({names().mlm_flag(s.switch) or s.switch}), which the config leaves off: set it "
                            f"({s.field} {span(s.field, family_of(release))})",
                    fix={s.switch: True}, source=f"{s.source} (src/moetune/data/legacy_switches.csv)")
            for s in switches_in(config, release) if s.switch_value and not config.get(s.switch)]


def _with(s) -> str:
    return f" with {s.when[0]}={s.when[1]}" if s.when else ""


def _key(name: str) -> str:
    """The config key a lacking name sets ('' for a Megatron-LM-only flag, which emit never writes)."""
    if not name.startswith("--"):
        return name
    row = names().by_flag.get(name)
    return row.bridge_name if row is not None else ""


def for_release(config: dict[str, Any], reading: Reading) -> dict[str, Any]:
    """CONFIG without the names the target release lacks that sit at their default (not written: the release runs
    its own behaviour, which that default keeps); one line naming the others, which emit may not write."""
    if refused := values_lacking(config, reading.release):
        raise MoetuneError(f"{option(reading.release)}: the config gives values that release refuses: "
                           + ", ".join(f"{n} ({has_it(n, reading.release)})" for n in refused)
                           + f"; upgrade {product(reading.release)} or change them")
    if "|" in str(config.get(_PATTERN) or "") and not splits_hybrids(reading.release):
        raise MoetuneError(f"{option(reading.release)}: {_PATTERN} splits the pipeline with '|', which "
                           f"{SPLIT_PATTERN_FLAG} brings ({has_it(SPLIT_PATTERN_FLAG, reading.release)}); "
                           "before it --hybrid-override-pattern takes one unsplit pattern: plan with PP 1 "
                           "(plan --megatron-core does), or upgrade")
    config = legacy_spelling(config, reading.release)  # its legacy switches (configio/legacy.py)
    # the first name read for a key; a flag with a spelling the release has is not lacking (emit writes that one)
    keys = {_key(name): name for name in reversed(reading.lacking())
            if not (name.startswith("--") and alias_in(name, reading.release))}
    respelled = {k: alias for k in keys if k in config and (alias := alias_in(k, reading.release))}
    config = {respelled.get(k, k): v for k, v in config.items()}  # written as that release spells it
    kept = [k for k in keys if k in config and not at_default(k, config[k])]
    if kept:
        listed = ", ".join(f"{keys[k]} ({k}={config[k]!r}; {has_it(keys[k], reading.release)})" for k in kept)
        raise MoetuneError(f"{option(reading.release)}: the config sets what that release lacks: {listed}; "
                           f"upgrade {product(reading.release)} or drop them (`moetune check "
                           f"{option(reading.release)}` says each)")
    return {k: v for k, v in config.items() if k not in keys}


def bridge_on_core(release: str) -> str | None:
    """The newest Megatron Bridge release whose pinned Megatron-Core is core RELEASE's minor (0.16 and 0.16.1: 0.3.1),
    or None (none in data/bridge_pins.csv: 0.13-0.15)."""
    if (number := release_number(release)) is None:  # main: no Bridge release pins it
        return None
    on = [b for b, pin in bridge_pins().items() if release_number(pin["megatron_core"])[:2] == number[:2]]
    return on[-1] if on else None


def bridge_names_note(files: dict[str, str], release: str | None) -> str | None:
    """Where emit wrote for a Megatron-Core release (--megatron-core) and the Bridge files name fields the Bridge
    releases on that Megatron-Core lack (struct-mode overrides abort on an unknown key: training/utils/
    omegaconf_utils.py @v0.3.1), one line naming them and the option that writes that Bridge's names."""
    if release is None or family_of(release) != "core" or (bridge := bridge_on_core(release)) is None:
        return None
    lacking = written_lacking({"overrides.txt": files.get("overrides.txt", "")}, bridge)
    if not lacking:
        return None
    return (f"the Bridge files (overrides.txt, bridge_overrides.py) write {', '.join(lacking)}, which Megatron Bridge "
            f"{bridge}, the newest on Megatron-Core {'.'.join(release.split('.')[:2])}, lacks: for a Bridge launch, "
            f"`emit --megatron-bridge {bridge}` writes that release's names (megatron_lm_args.txt is this release's)")


def written_lacking(files: dict[str, str], release: str) -> list[str]:
    """Flags (megatron_lm_args.txt) and Bridge fields (overrides.txt) the emitted files write that RELEASE lacks."""
    words = [line.split()[0] for line in files.get("megatron_lm_args.txt", "").splitlines()
             if line.startswith("--")]
    words += [line.split("=", 1)[0] for line in files.get("overrides.txt", "").splitlines()
              if line and not line.startswith(("#", "+")) and "=" in line]
    return list(dict.fromkeys(w for w in words if not has(release, w)))
