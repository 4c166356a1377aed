"""Which Megatron-Core or Megatron Bridge release a config targets (``--megatron-core X.Y``, ``--megatron-bridge
X.Y.Z``): the names that release lacks.

megatron_names.csv is taken from Megatron-LM main; src/moetune/data/megatron_releases.csv (tools/megatron_releases.py)
lists each Megatron-LM flag and Megatron-Core config field (model.*, ddp.*, optimizer.*) that is not in every release
it covers, with the releases that have it. A name it does not list is in all of them, or is not Megatron-Core's
(Bridge's own fields, moetune's cluster.*, env.*). bridge_releases.csv (tools/bridge_releases.py) does the same for
Megatron Bridge's releases: the fields of each ConfigContainer section, Bridge's own and those of the Megatron-Core
its 3rdparty/Megatron-LM submodule pins (bridge_pins.csv), and that commit's flags. Core release names (0.13, ...,
main) and Bridge's (0.2.0, ...) never meet, so a release names its family.

This module answers questions of the tables (which releases have a name, what a value or an alias is in one);
configio/release_context.py holds the release one command targets and the names its read meets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from moetune.configio.names import NO_DEFAULT, data_csv, names, numbered_csv_rows
from moetune.configio.types import coerce
from moetune.errors import MoetuneError
from moetune.files import shipped_text

# family -> (its data file, the option naming a release of it, the product)
FAMILIES = {"core": ("megatron_releases.csv", "--megatron-core", "Megatron-Core"),
            "bridge": ("bridge_releases.csv", "--megatron-bridge", "Megatron Bridge")}


@dataclass(frozen=True, slots=True)
class Releases:
    order: tuple[str, ...]  # "0.13", ..., "main" (core) or "0.2.0", ... (bridge): the columns after name and kind
    have: dict[str, frozenset[str]]  # name -> the releases that have it (listed names only)
    kind: dict[str, str]  # name -> "flag" | "field"


@lru_cache(maxsize=2)
def releases(family: str = "core") -> Releases:
    rows = data_csv(FAMILIES[family][0])
    order = tuple(rows.fieldnames[2:])  # after name and kind
    have, kind = {}, {}
    for row in rows:
        have[row["name"]] = frozenset(r for r in order if row[r])
        kind[row["name"]] = row["kind"]
    return Releases(order=order, have=have, kind=kind)


# a pin's Megatron-Core version as that commit's megatron/core/package_info.py spells it (__version__,
# MAJOR.MINOR.PATCH then PRE_RELEASE 'rcN' or '': package_info.py:4-13 @core_v0.17.0): core_at_least and
# release_check.bridge_on_core read the release number from it
_PIN_VERSION = re.compile(r"\d+\.\d+\.\d+(rc\d+)?")


def parse_bridge_pins(text: str, filename: str = "bridge_pins.csv") -> dict[str, dict[str, str]]:
    """TEXT's pins by Bridge release, each row's megatron_core checked as it is read (a bad one is one line naming the
    file, line, release and value, not a TypeError where a command compares release numbers)."""
    pins = {}
    for line, row in numbered_csv_rows(text):
        core = row.get("megatron_core")
        if core is None or not _PIN_VERSION.fullmatch(core):
            raise MoetuneError(f"{filename} line {line}: Bridge release {row.get('bridge')!r} pins megatron_core "
                               f"{core!r}, not a Megatron-Core version (X.Y.Z or X.Y.ZrcN, as the pinned commit's "
                               "megatron/core/package_info.py has it)")
        pins[row["bridge"]] = row
    return pins


@lru_cache(maxsize=1)
def bridge_pins() -> dict[str, dict[str, str]]:
    """Bridge release -> its tag, commit, the Megatron-LM commit it pins and that commit's Megatron-Core version."""
    return parse_bridge_pins(shipped_text("bridge_pins.csv"))


def family_of(release: str) -> str:
    return "bridge" if release in releases("bridge").order else "core"


def option(release: str) -> str:
    """The option that names RELEASE: '--megatron-core 0.17', '--megatron-bridge 0.4.2'."""
    return f"{FAMILIES[family_of(release)][1]} {release}"


def product(release: str) -> str:
    return FAMILIES[family_of(release)][2]


def describe(release: str) -> str:
    """RELEASE in words: 'Megatron-Core 0.17', or 'Megatron Bridge 0.4.2 (Megatron-Core 0.17.1 at Megatron-LM
    2edffadb528e)'."""
    if family_of(release) == "core":
        return f"Megatron-Core {release}"
    pin = bridge_pins()[release]
    return f"Megatron Bridge {release} (Megatron-Core {pin['megatron_core']} at Megatron-LM {core_source(release)})"


def release_number(release: str) -> tuple[int, ...] | None:
    """RELEASE's number, to compare: '0.4.2' -> (0, 4, 2), '0.16' -> (0, 16), a pin's '0.16.0rc0' -> (0, 16, 0) (an rc
    counts as its release, as core_at_least reads it); None for main, which has none."""
    parts = release.split("rc")[0].split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def core_source(release: str) -> str:
    """Where RELEASE's Megatron-Core source is: 'core_v0.17.0', 'main', or a Bridge release's pinned commit."""
    if family_of(release) == "bridge":
        return bridge_pins()[release]["megatron_lm_commit"]
    return "main" if release == "main" else f"core_v{release}" + (".0" if release.count(".") == 1 else "")


# what each family's release names are
_NAMING = {"core": "Megatron-Core core_vX.Y.0 tags as X.Y (or X.Y.0), patch tags as X.Y.Z, and Megatron-LM main",
           "bridge": "Megatron Bridge vX.Y.Z tags that pin a Megatron-LM commit"}


def known_release(text: str, family: str = "core") -> str:
    """TEXT as one of the releases the data covers ('0.16.0' is core_v0.16.0, the column '0.16'), or one line naming
    them."""
    order = releases(family).order
    if family == "core" and text.endswith(".0") and text[:-2] in order:
        return text[:-2]
    if text not in order:
        raise MoetuneError(f"{FAMILIES[family][1]} {text}: not a release moetune knows the names of; use one of "
                           f"{', '.join(order)} ({_NAMING[family]})")
    return text


# Bridge's sections that Bridge applies onto Megatron-Core's config (training/comm_overlap.py and mixed_precision.py
# set each field on the model provider): such a field runs only where the release has the Megatron-Core field it is
# applied through (its alias, megatron_names.csv's canonical column), comm_overlap.overlap_moe_expert_parallel_comm
# through model.overlap_moe_expert_parallel_comm (core_v0.14.0 on)
APPLIED_ONTO_MODEL = ("comm_overlap.", "mixed_precision.")


@lru_cache(maxsize=None)
def applied_onto(name: str, family: str = "core") -> tuple[str, ...]:
    """The Megatron-Core fields Bridge applies NAME through, where the release table lists them (APPLIED_ONTO_MODEL)."""
    if not name.startswith(APPLIED_ONTO_MODEL):
        return ()
    table = releases(family).have
    return tuple(a for a in names().aliases(name) if a in table)


def has(release: str, name: str) -> bool:
    family = family_of(release)
    listed = releases(family).have.get(name)
    if listed is not None and release not in listed:
        return False
    onto = applied_onto(name, family)
    return not onto or any(has(release, a) for a in onto)


def _having(name: str, family: str) -> list[str]:
    return [r for r in releases(family).order if has(r, name)]


def dropped_flag_of(release: str | None, flag: str) -> bool:
    """Whether FLAG is one main lacks (megatron_names.csv has no row for it) that RELEASE's parser has."""
    return release is not None and flag in releases().have and "main" not in releases().have[flag] and \
        has(release, flag)


def span(name: str, family: str = "core") -> str:
    """The releases that have NAME, in words: 'from 0.17 on', 'only in 0.19', 'in 0.16 to 0.18', 'in none'."""
    order, got = releases(family).order, _having(name, family)
    if not got:
        return "in none"
    first, last = order.index(got[0]), order.index(got[-1])
    if got != list(order[first:last + 1]):  # a gap (none in the data: a dropped name never came back)
        return "in " + ", ".join(got)
    if last == len(order) - 1:
        return f"from {got[0]} on"
    return f"only in {got[0]}" if first == last else f"in {got[0]} to {got[-1]}"


def has_it(name: str, release: str) -> str:
    """Which releases of RELEASE's family have NAME, in words: 'Megatron-Core has it from 0.16 on'."""
    return f"{product(release)} has it {span(name, family_of(release))}"


def newest_having(name: str, family: str = "core") -> str | None:
    """The first release from which NAME stays (the one to upgrade to), or None where the newest (main) lacks it."""
    order, got = releases(family).order, _having(name, family)
    if order[-1] not in got:
        return None
    start = len(order) - 1
    while start > 0 and order[start - 1] in got:
        start -= 1
    return order[start]


def core_at_least(now: str | None, release: str) -> bool:
    """Whether NOW, the release a command targets (--megatron-core / --megatron-bridge), runs Megatron-Core RELEASE
    ('0.18.2') or later: a core release by the table's order, a Bridge release by the Megatron-Core its pin names (an
    rc counts as its release); True for none (moetune follows the newest) and for main. Rules ask it as
    core_at_least(get('derived.target_release'), '0.18.2')."""
    if now is None or now == "main":
        return True
    if family_of(now) == "bridge":
        now = bridge_pins()[now]["megatron_core"].split("rc")[0]
    order = releases("core").order
    return order.index(known_release(now)) >= order.index(known_release(release))


def old_flag_hint(flag: str) -> str:
    """For a flag megatron_names.csv (main) lacks: the releases that had it, and how to read it as theirs; '' where
    none did."""
    if flag not in releases().have:
        return ""
    return (f"; Megatron-Core had it {span(flag)} (megatron_releases.csv), not at main: pass --megatron-core "
            f"{sorted(releases().have[flag], key=releases().order.index)[-1]} to read it as that release's")


def at_default(key: str, value: Any) -> bool:
    """Whether VALUE is KEY's default, Bridge's or Megatron-LM's (megatron_names.csv), or None, which sets nothing (a
    plan's unset field, config_map.py UNSET_EXPLICITLY): what a release without the field runs, so a config holding
    it there loses nothing where the field is absent."""
    if value is None:
        return True
    row = names().get(key)
    if row is None:
        return False
    defaults = [d for d in (row.default, row.mlm_default) if d is not NO_DEFAULT]
    try:
        return any(value == coerce(key, row.type, d) for d in defaults)
    except MoetuneError:
        return False


def alias_in(key: str, release: str) -> str | None:
    """An alias of KEY that RELEASE has, which a config for that release is written with: for a field, a name
    megatron_names.csv folds into it (Bridge before 0.6.0 has the data's sequence length only as Megatron-Core's
    dataset.sequence_length); for a flag, another spelling of its field (--hybrid-override-pattern before 0.17)."""
    if key.startswith("--"):
        row = names().by_flag.get(key)
        return next((f for f in (row.mlm_flags if row else ()) if f != key and has(release, f)), None)
    return next((a for a in names().aliases(key) if has(release, a)), None)


def values_lacking(config: dict[str, Any], release: str) -> list[str]:
    """'FIELD=VALUE' for each value CONFIG gives a field RELEASE has but whose TransformerConfig refuses the value (a
    value row of the table, tools/megatron_values.py: cuda_graph_scope moe_router before 0.16, cuda_graph_impl
    full_iteration before 0.18, recompute_modules shared_experts before 0.14)."""
    table = releases(family_of(release))
    return [f"{k}={item}" for k, v in config.items() if has(release, k)
            for item in (v if isinstance(v, (list, tuple)) else [v])
            if isinstance(item, str) and release not in table.have.get(f"{k}={item}", (release,))]


def refused(fix: dict[str, Any], release: str) -> list[str]:
    """The names of FIX (config overrides: a rule's fix) that RELEASE lacks, and 'FIELD=VALUE' for each value of it
    RELEASE refuses (values_lacking): what check.not_in_release would say of a config holding FIX. A field set to None
    sets nothing, and one with an alias the release has is written so (check says which), so neither is one."""
    return [k for k, v in fix.items() if v is not None and not has(release, k) and not alias_in(k, release)] + \
        values_lacking(fix, release)
