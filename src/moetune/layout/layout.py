"""Parallel Folding layouts: attention ``TP x CP x DP x PP`` and experts ``ETP x EP x EDP x PP``.

Both meshes cover the same ranks, so ``TP*CP*DP*PP == ETP*EP*EDP*PP == world_size``
(Megatron-Core parallel_state.initialize_model_parallel builds both from one rank order).
Checks that need the model or the workload live in ``validate.py``.
"""

import re
from dataclasses import dataclass, field, fields
from functools import cache
from operator import attrgetter
from typing import Any

from moetune.errors import MoetuneError

# Layout string symbols and Megatron-Core's LayerType names (transformer/pipeline_parallel_layer_layout.py)
LAYOUT_SYMBOLS = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}


# Most symbols an expanded layout may hold: far above any model's layers, far below what exhausts memory
MAX_LAYOUT_SYMBOLS = 100_000


@cache
def _stages(text: str, named: str | None = None) -> tuple[str, ...]:
    """The virtual stages of a layout string; a refusal begins with `named`, the string as the user gave it (estimate's
    flag unless the caller says otherwise: plan's --fix pin, a config's field)."""
    named = named or f"--pipeline-layout {text!r}"

    def repeat(m: re.Match) -> str:
        if len(m.group(1)) * int(m.group(2)) > MAX_LAYOUT_SYMBOLS:
            raise MoetuneError(f"{named}: {m.group(0)} expands to more than {MAX_LAYOUT_SYMBOLS:,} "
                               "symbols; give one t per decoder layer")
        return m.group(1) * int(m.group(2))

    flat = text.replace(",", "").replace(" ", "")
    flat = re.sub(r"\(([^()]+)\)\*(\d+)", repeat, flat)
    flat = re.sub(r"(.)\*(\d+)", repeat, flat)
    if "(" in flat or ")" in flat:
        raise MoetuneError(f"{named}: unbalanced parentheses, or a group without its *N "
                           "(write (t*4|)*14)")
    bad = sorted(set(flat) - set(LAYOUT_SYMBOLS) - {"|"})
    if bad:
        raise MoetuneError(
            f"{named}: unknown symbols {bad}; use E (embedding), t (layer), m (MTP), "
            "L (loss), | (stage break), (..)*N and x*N"
        )
    return tuple(flat.split("|"))


def parse_pipeline_layout(text: str, named: str | None = None) -> list[str]:
    """Expand Megatron's layout grammar into one string per virtual stage, e.g. ['Etttt', 'tttt', ...]; a refusal
    names the string as `named` says (_stages)."""
    return list(_stages(text, named))


def layout_stages(text: str, named: str | None = None) -> int:
    """Virtual stages of all ranks a layout string gives (its '|'-separated pieces, expanded): Megatron-Core derives
    VPP as these over PP (transformer_config.py); a refusal begins with `named` (_stages)."""
    return len(_stages(text, named))


def layout_stages_or_none(text: Any) -> int | None:
    """layout_stages, None for anything but a string that parses: a config read as it is written, whose string
    Megatron-Core would refuse (estimate and check --model say why)."""
    try:
        return layout_stages(text) if isinstance(text, str) else None
    except MoetuneError:
        return None


def check_vpp_one(pipeline_layout: str, pp: int) -> None:
    """A VPP given as 1 beside a layout string, which Layout reads as unset: Megatron-Core accepts only the string's
    own count (transformer_config.py), so a string of more virtual stages a rank contradicts it."""
    stages = layout_stages(pipeline_layout)
    if stages != pp:
        raise MoetuneError(f"--vpp 1 contradicts --pipeline-layout ({stages} stages over --pp {pp}); drop --vpp",
                           same_as=("pipeline.vpp_matches_layout",))


def hybrid_segments(pattern: str) -> list[str]:
    """A Mamba hybrid's hybrid_layer_pattern cut at its '|' separators: one segment per virtual pipeline stage, in
    Megatron's stage order; the MTP depths after '/' are not part of the split (Megatron-Core
    hybrid_layer_allocation.py)."""
    return pattern.split("/")[0].split("|")


def split_stages(layout: str | None, hybrid_pattern: str | None, named: str | None = None) -> int | None:
    """Virtual pipeline stages a layout string, or else a Mamba hybrid pattern's '|' segments, define; None without
    either (Megatron derives VPP as these over PP: transformer_config.py, hybrid_layer_allocation.py)."""
    if layout:
        return layout_stages(str(layout), named and f"{named} {str(layout)!r}")
    return len(hybrid_segments(hybrid_pattern)) if isinstance(hybrid_pattern, str) else None


def _t(n: int) -> str:
    return "t" * n if n < 3 else f"t*{n}"


def write_pipeline_layout(counts: list[int], mtp: int) -> str:
    """parse_pipeline_layout's inverse for decoder-layer counts per virtual stage (Megatron's stage order), the
    embedding first and the MTP layers and loss last, spelled as the recipes spell theirs: "t*4", runs of equal
    middle stages "(t*4|)*14" ("Et*4|(t*4|)*14tmL")."""
    stages = [_t(n) for n in counts]
    stages[0], stages[-1] = "E" + stages[0], stages[-1] + "m" * mtp + "L"
    out, i = "", 0
    while i < len(stages) - 1:
        j = i
        while i > 0 and j + 1 < len(stages) - 1 and stages[j + 1] == stages[i]:
            j += 1
        out += f"({stages[i]}|)*{j - i + 1}" if j > i else f"{stages[i]}|"
        i = j + 1
    return out + stages[-1]


# The largest job moetune plans: past the largest published training clusters (about 100k GPUs), and it keeps
# every rank count a 64-bit number can multiply
MAX_GPUS = 2 ** 17


def derived_sizes(world: int, tp: int, cp: int, pp: int, ep: int, etp: int,
                  sequence_parallel: bool | None) -> tuple[int, int, bool]:
    """A layout's (DP, EDP, SP): the attention mesh's data-parallel size, the expert mesh's, and sequence parallelism
    as it runs (on whenever TP > 1 unless given): Layout's fields, and planner/layout_stamp.py's."""
    return world // (tp * cp * pp), world // (etp * ep * pp), tp > 1 if sequence_parallel is None else sequence_parallel


@dataclass(kw_only=True, slots=True, frozen=True)
class Layout:
    """One folded layout. ``dp`` and ``edp`` are derived from the world size."""

    world_size: int  # GPUs in the job
    tp: int = 1  # tensor_model_parallel_size (attention and dense layers)
    cp: int = 1  # context_parallel_size
    pp: int = 1  # pipeline_model_parallel_size
    vpp: int = 1  # virtual_pipeline_model_parallel_size (1: no interleaving)
    ep: int = 1  # expert_model_parallel_size
    etp: int = 1  # expert_tensor_parallel_size
    sequence_parallel: bool | None = None  # None: on whenever tp > 1, as every MoE recipe does
    first_stage_layers: int | None = None  # num_layers_in_first_pipeline_stage
    last_stage_layers: int | None = None  # num_layers_in_last_pipeline_stage
    pipeline_layout: str | None = None  # pipeline_model_parallel_layout, e.g. "Et*4|(t*4|)*14tmL"
    account_for_embedding: bool = False  # account_for_embedding_in_pipeline_split: embedding counts as a layer
    account_for_loss: bool = False  # account_for_loss_in_pipeline_split: loss counts as a layer
    # derived sizes, set once by __post_init__ (read tens of thousands of times a plan, a property call each was a
    # share of it); not compared, hashed or shown: the fields above decide them
    dp: int = field(init=False, repr=False, compare=False)  # data_parallel_size of the attention mesh
    edp: int = field(init=False, repr=False, compare=False)  # expert_data_parallel_size: the expert mesh's DP
    sp: bool = field(init=False, repr=False, compare=False)  # sequence parallel: on whenever TP > 1 unless given
    # the hash, worked out at the first lookup: layouts key the planner's sets and the re-split's memos (a DeepSeek-V3
    # plan hashes some 13,000), and each was a tuple of every field built and hashed again
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        # the value dataclass's own __hash__ gives (its compared fields in order), so sets of layouts iterate alike
        if self._hash is None:
            object.__setattr__(self, "_hash", hash(_compared_fields(self)))
        return self._hash

    def __post_init__(self) -> None:
        # the checks spelled out field by field first, their loops (which name the field) run only where one fails: the
        # planner builds thousands of layouts a plan
        sp = self.sequence_parallel
        if type(self.account_for_embedding) is not bool or type(self.account_for_loss) is not bool or (
                sp is not None and type(sp) is not bool):
            self._refuse_flags()
        if self.world_size < 1 or self.tp < 1 or self.cp < 1 or self.pp < 1 or self.vpp < 1 or self.ep < 1 \
                or self.etp < 1:
            self._refuse_sizes()
        if self.world_size > MAX_GPUS:
            raise MoetuneError(f"world size ({self.world_size}) is past the {MAX_GPUS:,} GPUs moetune plans for; "
                               "check --gpus")
        attention = self.tp * self.cp * self.pp
        if self.world_size % attention:
            raise MoetuneError(
                f"world size ({self.world_size}) must be divisible by TP*CP*PP ({self.tp}*{self.cp}*{self.pp}"
                f"={attention}) so that the attention mesh TPxCPxDPxPP covers every rank",
                same_as=("scale.world_size_attention",), flags_fix="change --gpus or the layout",
                file_fields="layout (tp, cp, pp) or gpus")
        experts = self.etp * self.ep * self.pp
        if self.world_size % experts:
            raise MoetuneError(
                f"world size ({self.world_size}) must be divisible by ETP*EP*PP ({self.etp}*{self.ep}*{self.pp}"
                f"={experts}) so that the expert mesh ETPxEPxEDPxPP covers every rank",
                same_as=("scale.world_size_experts",), flags_fix="change --ep/--etp/--pp",
                file_fields="layout (ep, etp, pp)")
        dp, edp, sp = derived_sizes(self.world_size, self.tp, self.cp, self.pp, self.ep, self.etp, sp)
        object.__setattr__(self, "dp", dp), object.__setattr__(self, "edp", edp), object.__setattr__(self, "sp", sp)
        if self.pipeline_layout is not None:
            self._derive_vpp(layout_stages(self.pipeline_layout))
        if self.vpp > 1 and self.pp == 1:  # parallel_state.py: the interleaved schedule needs PP > 1
            given = "--pipeline-layout's stages need" if self.pipeline_layout is not None else f"vpp ({self.vpp}) needs"
            raise MoetuneError(f"{given} pp > 1: interleaving splits pipeline stages; set --pp")
        uneven = self.first_stage_layers is not None or self.last_stage_layers is not None
        if uneven and self.pipeline_layout is not None:
            raise MoetuneError(
                "give either --first-stage-layers/--last-stage-layers or --pipeline-layout, not both "
                "(Megatron rejects the combination)"
            )
        if uneven and self.pp == 1:
            raise MoetuneError("--first-stage-layers/--last-stage-layers need pp > 1")
        accounted = self.account_for_embedding or self.account_for_loss
        if accounted and (uneven or self.pipeline_layout is not None):
            # transformer_config.py __post_init__ raises for either combination: the layout string or the uneven
            # stage sizes already place the embedding and the loss
            given = ("--pipeline-layout" if self.pipeline_layout is not None
                     else "--first-stage-layers/--last-stage-layers")
            raise MoetuneError(f"--account-for-embedding/--account-for-loss cannot go with {given} (Megatron-Core "
                               "rejects the combination): drop one")

    def _refuse_flags(self) -> None:
        for name in ("account_for_embedding", "account_for_loss", "sequence_parallel"):  # a hand-edited saved result
            if not isinstance(getattr(self, name), bool) and (name != "sequence_parallel" or self.sequence_parallel
                                                              is not None):
                raise MoetuneError(f"{name} is {getattr(self, name)!r}; it takes true or false")

    def _refuse_sizes(self) -> None:
        for name in ("world_size", "tp", "cp", "pp", "vpp", "ep", "etp"):
            if getattr(self, name) < 1:
                raise MoetuneError(f"{name} ({getattr(self, name)}) must be at least 1")

    def _derive_vpp(self, stages: int) -> None:
        """Megatron derives VPP from a layout string and accepts an equal explicit value (transformer_config.py)."""
        if stages % self.pp:
            raise MoetuneError(f"the pipeline layout has {stages} stages, not a multiple of pp ({self.pp}); each "
                               "pipeline rank needs the same number of virtual stages",
                               same_as=("pipeline.layout_stages_divisible",))
        if self.vpp == 1:
            object.__setattr__(self, "vpp", stages // self.pp)
        elif self.vpp != stages // self.pp:
            raise MoetuneError(f"--vpp ({self.vpp}) contradicts --pipeline-layout ({stages} stages / pp {self.pp} = "
                               f"{stages // self.pp} virtual stages); leave --vpp unset or match it",
                               same_as=("pipeline.vpp_matches_layout",))

    def as_dict(self) -> dict:
        return {
            "tp": self.tp, "cp": self.cp, "dp": self.dp, "pp": self.pp, "vpp": self.vpp,
            "etp": self.etp, "ep": self.ep, "edp": self.edp,
        }

    def short(self) -> str:
        """Compact form for tables: TP2 CP1 PP8v4 EP64 ETP1 (DP64 EDP2)."""
        vpp = f"v{self.vpp}" if self.vpp > 1 else ""
        return f"TP{self.tp} CP{self.cp} PP{self.pp}{vpp} EP{self.ep} ETP{self.etp} (DP{self.dp} EDP{self.edp})"

    def compact(self) -> str:
        """short() less CP and expert TP where they are 1, for plan's narrow columns: TP4 PP4v8 EP64 (DP64 EDP4)."""
        vpp = f"v{self.vpp}" if self.vpp > 1 else ""
        sizes = [f"TP{self.tp}", *([f"CP{self.cp}"] if self.cp > 1 else []), f"PP{self.pp}{vpp}", f"EP{self.ep}",
                 *([f"ETP{self.etp}"] if self.etp > 1 else [])]
        return f"{' '.join(sizes)} (DP{self.dp} EDP{self.edp})"

    def split_text(self) -> str:
        """How the layers are split over pipeline stages when not evenly: what a user must pass again to reproduce
        the layout (--pipeline-layout, --first/--last-stage-layers, --account-for-*); "" for an even split."""
        if self.pipeline_layout:
            return f"pipeline layout {self.pipeline_layout}"
        parts = [f"{name} stage {n} layers" for name, n in (("first", self.first_stage_layers),
                                                             ("last", self.last_stage_layers)) if n is not None]
        counted = [name for name, on in (("embedding", self.account_for_embedding), ("loss", self.account_for_loss))
                   if on]
        if counted:
            parts.append(f"{' and '.join(counted)} counted as {'layers' if len(counted) == 2 else 'a layer'}")
        return ", ".join(parts)

    def describe(self) -> str:
        """The two Parallel Folding meshes written out."""
        return (
            f"Attention: TP{self.tp} x CP{self.cp} x DP{self.dp} x PP{self.pp}"
            f"{f' (VPP{self.vpp})' if self.vpp > 1 else ''} | "
            f"MoE: ETP{self.etp} x EP{self.ep} x EDP{self.edp} x PP{self.pp}"
        )


# Layout's compared fields in order, read as one tuple: what the dataclass's own __hash__ would hash, so a field added
# to Layout joins its hash as it joins its equality
_compared_fields = attrgetter(*(f.name for f in fields(Layout) if f.compare))
