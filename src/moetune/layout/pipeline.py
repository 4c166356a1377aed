"""Which decoder layers, embedding, loss and MTP layers each pipeline stage (and virtual chunk) holds.

Mirrors Megatron-Core:
- even split and ``num_layers_in_first/last_pipeline_stage``:
  megatron/core/transformer/transformer_layer.py::get_transformer_layer_offset;
- ``pipeline_model_parallel_layout`` strings ("Et*4|(t*4|)*14tmL"):
  megatron/core/transformer/pipeline_parallel_layer_layout.py (stage s of the flat list is
  virtual chunk s // PP of pipeline rank s % PP; layer ids run chunk-major).
"""

from dataclasses import dataclass

from moetune.errors import MoetuneError
from moetune.layout.layout import Layout, parse_pipeline_layout
from moetune.memo import remembered


@dataclass(kw_only=True, slots=True, frozen=True)
class Chunk:
    """One virtual pipeline chunk of one pipeline rank."""

    pp_rank: int
    vpp_rank: int
    layers: tuple[int, ...]  # decoder layer ids (0-based, model order)
    embedding: bool  # holds the input embedding (pre_process)
    loss: bool  # holds final norm + output layer + loss (post_process)
    mtp_layers: int  # multi-token-prediction layers in this chunk


def _counts_from_layout(layout: Layout, num_layers: int, mtp: int) -> tuple[list[str], int]:
    stages = parse_pipeline_layout(layout.pipeline_layout)  # Layout checked stages = pp x vpp
    check_placement(stages, layout.pp, num_layers, mtp)
    return stages, len(stages) // layout.pp


def check_placement(stages: list[str], pp: int, num_layers: int, mtp: int, named: str = "--pipeline-layout") -> None:
    """A layout string's stages (parse_pipeline_layout) place the model's layers and the run's MTP layers, the
    embedding first and the loss last; a refusal begins with `named`, the string as the caller's user gave it
    (estimate's --pipeline-layout unless told)."""
    joined = "".join(stages)
    for char, want, what, whose in (("t", num_layers, "decoder layers", "the model has"),
                                    ("m", mtp, "MTP layers", "the run has")):
        if joined.count(char) != want:
            raise MoetuneError(
                f"{named} places {joined.count(char)} {what} but {whose} {want}; fix the number of "
                f"'{char}' symbols" + (" (or set the MTP depth: --mtp-layers N; in a config model.mtp_num_layers, "
                                       "Megatron-LM --mtp-num-layers)" if char == "m" else "")
            )
    if not joined.startswith("E") or not joined.endswith("L") or joined.count("E") != 1 or joined.count("L") != 1:
        raise MoetuneError(f"{named} must start with one E (embedding) and end with one L (loss)")
    if "t" in joined[joined.find("m"):] and mtp:
        raise MoetuneError(f"{named} places decoder layers after MTP layers; MTP must come last")
    _mtp_placement(stages, pp, named)


def _mtp_placement(stages: list[str], pp: int, named: str) -> None:
    """Megatron-Core's MTP restrictions (pipeline_parallel_layer_layout.py validate_layer_layout): every MTP layer in
    one stage, and that stage the last virtual chunk of its rank."""
    holding = [s for s, text in enumerate(stages) if "m" in text]
    if len(holding) > 1:
        raise MoetuneError(f"{named} splits the MTP layers over stages; Megatron-Core needs them in one")
    if holding and holding[0] // pp != len(stages) // pp - 1:
        raise MoetuneError(f"{named} puts MTP in virtual stage {holding[0] // pp} of pipeline rank "
                           f"{holding[0] % pp}; Megatron-Core needs it in that rank's last virtual stage")


def _even_counts(layout: Layout, num_layers: int) -> list[int]:
    """Even split; with account_for_embedding/loss_in_pipeline_split the embedding and the loss each take
    the place of one layer in the first and the last chunk (transformer_config.py, Megatron-Core)."""
    chunks = layout.pp * layout.vpp
    emb, loss = int(layout.account_for_embedding), int(layout.account_for_loss)
    total = num_layers + emb + loss
    if total % chunks:
        extra = f" + {emb + loss} (embedding/loss as layers)" if emb or loss else ""
        # the split flags already given are no fix (Megatron-Core refuses them beside uneven stages or a layout)
        given = " and ".join(f for f, on in (("--account-for-embedding", emb), ("--account-for-loss", loss)) if on)
        split = (f"drop {given}, or give --first-stage-layers/--last-stage-layers or --pipeline-layout instead"
                 if emb or loss else
                 "set --first-stage-layers/--last-stage-layers, --pipeline-layout or "
                 "--account-for-embedding/--account-for-loss")
        raise MoetuneError(f"num_layers ({num_layers}){extra} must be divisible by PP*VPP ({layout.pp}*{layout.vpp}="
                           f"{chunks}); change --pp/--vpp, or {split}", same_as=("pipeline.layers_divisible",))
    counts = [total // chunks] * chunks
    counts[0] -= emb
    counts[-1] -= loss
    return counts


def _given_sizes(first: int | None, last: int | None, joint: str = " and ") -> str:
    """The stage-size flags given, with their values, for an error line."""
    return joint.join(f"{n} ({v})" for n, v in (("--first-stage-layers", first), ("--last-stage-layers", last))
                      if v is not None)


def _verb(first: int | None, last: int | None, verb: str) -> str:
    """`verb` agreeing with the flags given: one of them or both."""
    return verb if first is not None and last is not None else verb + "s"


def _other_stages(layout: Layout) -> str:
    """The pipeline stages those flags leave the rest of the layers to, named: with only one of them given, the stage
    at the other end is among them (Megatron-Core splits the layers left over every stage the flags do not set)."""
    inner = layout.pp - 2
    parts = (["the first stage"] * (layout.first_stage_layers is None)
             + [f"the {inner} middle stage" + "s" * (inner > 1)] * (inner > 0)
             + ["the last stage"] * (layout.last_stage_layers is None))
    return f"{' and '.join(parts)} of PP{layout.pp}"


def _uneven_counts(layout: Layout, num_layers: int) -> list[int]:
    first, last, pp, vpp = layout.first_stage_layers, layout.last_stage_layers, layout.pp, layout.vpp
    middle_stages = pp - (first is not None) - (last is not None)
    middle = num_layers - (first or 0) - (last or 0)
    for name, value in (("--first-stage-layers", first), ("--last-stage-layers", last)):
        # Megatron-Core refuses an empty first/last stage ("must be larger than 0", transformer_config.py)
        if value is not None and (value <= 0 or value % vpp):
            raise MoetuneError(f"{name} ({value}) must be a positive multiple of vpp ({vpp})")
    if middle_stages == 0 and vpp > 1:
        # transformer_layer.py get_transformer_layer_offset divides by the middle stages (a ZeroDivisionError)
        raise MoetuneError(f"--first-stage-layers and --last-stage-layers on PP{pp} leave no middle stage, which "
                           f"Megatron-Core cannot interleave (VPP {vpp}); drop --vpp or one of them")
    if middle < 0:
        given = _given_sizes(first, last, " + ")
        raise MoetuneError(f"{given} {_verb(first, last, 'exceed')} the model's {num_layers} layers; make them smaller")
    if middle_stages and middle == 0:  # transformer_config.py: "0 middle layers remaining but N middle PP stages"
        raise MoetuneError(f"{_given_sizes(first, last)} {_verb(first, last, 'leave')} no layers for "
                           f"{_other_stages(layout)}; Megatron-Core refuses a stage without layers: make them smaller")
    if (middle_stages == 0 and middle) or (middle_stages and middle % (middle_stages * vpp)):
        raise MoetuneError(
            f"the {middle} layers left after {_given_sizes(first, last)} must split evenly over "
            f"{_other_stages(layout)} x vpp {vpp}; adjust --first-stage-layers/--last-stage-layers"
        )
    per_middle = middle // (middle_stages * vpp) if middle_stages else 0
    counts = []
    for _v in range(vpp):
        for p in range(pp):
            if p == 0 and first is not None:
                counts.append(first // vpp)
            elif p == pp - 1 and last is not None:
                counts.append(last // vpp)
            else:
                counts.append(per_middle)
    return counts


def interleaved_warmup(pp, vpp, stage=0):
    """Forward chunks pipeline rank `stage` runs before its first backward under the interleaved schedule:
    2(PP - stage - 1) + (VPP - 1)PP (Megatron-Core pipeline_parallel/schedules.py, the interleaved schedule's warm-up
    count); arrays broadcast."""
    return 2 * (pp - stage - 1) + (vpp - 1) * pp


def stage_order(grid: list[list]) -> list:
    """Items given per pipeline rank and virtual chunk (``grid[pp_rank][vpp_rank]``) in Megatron's flat stage order:
    stage s is chunk s // PP of rank s % PP (pipeline_parallel_layer_layout.py)."""
    pp, vpp = len(grid), len(grid[0])
    return [grid[s % pp][s // pp] for s in range(pp * vpp)]


def split_key(layout: Layout) -> tuple:
    """The fields of a layout that decide which layers, embedding, loss and MTP layers each stage holds (all that
    pipeline_chunks reads): layouts of other TP, CP, EP sizes or world sizes share its answer."""
    return (layout.pp, layout.vpp, layout.pipeline_layout, layout.first_stage_layers, layout.last_stage_layers,
            layout.account_for_embedding, layout.account_for_loss)


# pipeline_chunks by split_key and the layer counts: asked three times per estimate (validation, stage parameters,
# stage times), and the planner's re-split weighs each split under several layouts' sizes and knob sets. A refusal is
# not remembered (memo.remembered keeps nothing where it raises).
_CHUNKS: dict = {}


def pipeline_chunks(layout: Layout, num_layers: int, mtp_layers: int = 0) -> tuple[tuple[Chunk, ...], ...]:
    """Chunks per pipeline rank: ``result[pp_rank][vpp_rank]`` (read-only: the result is shared)."""
    return remembered(_CHUNKS, (*split_key(layout), num_layers, mtp_layers),
                      lambda: _pipeline_chunks(layout, num_layers, mtp_layers), 4096)


def _pipeline_chunks(layout: Layout, num_layers: int, mtp_layers: int) -> tuple[tuple[Chunk, ...], ...]:
    if layout.pipeline_layout:
        stages, vpp = _counts_from_layout(layout, num_layers, mtp_layers)
    else:
        uneven = layout.first_stage_layers is not None or layout.last_stage_layers is not None
        counts = _uneven_counts(layout, num_layers) if uneven else _even_counts(layout, num_layers)
        vpp = layout.vpp
        stages = ["t" * c for c in counts]
        stages[0] = "E" + stages[0]
        stages[-1] = stages[-1] + "m" * mtp_layers + "L"
    return tuple(map(tuple, _chunks_from_stages(stages, layout.pp, vpp)))


def _chunks_from_stages(stages: list[str], pp: int, vpp: int) -> list[list[Chunk]]:
    """The grid of chunks. The embedding is built on the first stage and the output layer and loss on the last
    whatever stage of a layout string holds E or L: Megatron-Core checks the string with its empty stages dropped,
    then builds with pre_process / post_process = first / last pipeline stage (gpt_builders.py)."""
    grid: list[list[Chunk]] = [[None] * vpp for _ in range(pp)]  # type: ignore[list-item]
    next_layer = 0
    for s, text in enumerate(stages):
        n = text.count("t")
        grid[s % pp][s // pp] = Chunk(
            pp_rank=s % pp, vpp_rank=s // pp, layers=tuple(range(next_layer, next_layer + n)),
            embedding=s == 0, loss=s == len(stages) - 1, mtp_layers=text.count("m"),
        )
        next_layer += n
    return grid
