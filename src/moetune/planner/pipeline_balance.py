"""Even pipeline ranks: a local search that moves decoder layers between the ranks of the planner's winners.

The interleaved 1F1B schedule runs at the pace of its slowest rank (walls/step.py), and the last rank carries
more than its layers: the output layer of the loss (BF16 under every FP8 recipe but MXFP8's fp8_output_proj) and,
for MTP models, every MTP layer (a decoder layer, its eh_proj and one more output-layer pass: Megatron's
MultiTokenPredictionBlock, multi_token_prediction.py). Megatron's own splits count the loss as one layer at most
(account_for_loss_in_pipeline_split), and the recipes' MTP strings ("Et*4|(t*4|)*14tmL") give the last chunk only
the remainder: near even for DeepSeek-V3, while MiniMax-M2's three MTP layers and 200k vocabulary over hidden 3072
leave its last rank 15% slower than the first. NVIDIA's own tuned strings move layers for this (the MCore perf
tracker runs DeepSeek-V3 as "Et*3|(tt|)*29m|L", data/published_runs.csv R053).

How many layers to move depends on what a layer costs against an output layer under this candidate's precision,
exchanges and overlap, and on which ranks still have memory to spare, so the step model decides: one layer at a time
from the slowest rank to the quickest rank where the layout still fits, while the estimate gets faster
(``rebalance``). The result is a pipeline_model_parallel_layout string (Megatron checks only that the embedding
comes first, the loss last and the MTP layers in the last rank's last chunk: pipeline_parallel_layer_layout.py).
"""

from dataclasses import replace

from moetune.layout.dsa_split import keeps_index_groups
from moetune.layout.layout import Layout, write_pipeline_layout
from moetune.layout.pipeline import pipeline_chunks, stage_order
from moetune.memo import remembered
from moetune.planner.estimate import Estimate
from moetune.planner.ranking import SMALLEST_GAIN
from moetune.specs.model import ModelSpec
from moetune.units import GIB


def rank_layers(lay: Layout, num_layers: int, mtp: int) -> list[int]:
    """Decoder layers each pipeline rank holds under `lay`."""
    return [sum(len(c.layers) for c in chunks) for chunks in pipeline_chunks(lay, num_layers, mtp)]


def ranks_note(spec: ModelSpec, lay: Layout, time: dict) -> str:
    """explain's line on the pipeline: decoder layers and milliseconds a micro-batch of each rank."""
    layers = rank_layers(lay, spec.num_layers, spec.mtp_num_layers)
    ms = "/".join(f"{1e3 * s:.0f}" for s in time["stage_seconds"])
    return (f"pipeline ranks hold {'/'.join(map(str, layers))} decoder layers ({_heads_note(lay, spec)}) and "
            f"take {ms} ms a micro-batch; rank {time['slowest_stage']} sets the pace (`plan` moves layers off the "
            "slowest rank while that is faster, planner/pipeline_balance.py)")


def _heads_note(lay: Layout, spec: ModelSpec) -> str:
    """Which rank holds the MTP layers and which the loss: a layout string may put 'm' in an earlier virtual stage
    than 'L' (Et*3|(tt|)*29m|L at PP8 VPP4: the MTP layer on rank 6, the loss on rank 7)."""
    chunks = pipeline_chunks(lay, spec.num_layers, spec.mtp_num_layers)
    loss = next(r for r, cs in enumerate(chunks) if any(c.loss for c in cs))
    mtp = {r: sum(c.mtp_layers for c in cs) for r, cs in enumerate(chunks) if any(c.mtp_layers for c in cs)}
    last = "the last" if loss == len(chunks) - 1 else f"rank {loss}"
    if not mtp:
        return f"{last} also the loss"
    if set(mtp) == {loss}:
        return f"{last} also {mtp[loss]} MTP layer(s) and the loss"
    held = ", ".join(f"{n} MTP layer(s) on rank {r}" for r, n in mtp.items())
    return f"{held}, the loss on {'the last' if loss == len(chunks) - 1 else f'rank {loss}'}"


def move_note(e: Estimate) -> str | None:
    """explain's word on the ranks of a configuration that fits: the re-split `plan` would make (rebalance), or,
    where that stops short of the split memory aside would reach, which rank lacks the memory and by how much. None
    when no re-split is faster."""
    if e.layout.pp < 2 or not e.fits or not e.time:
        return None
    split = _resplitter(e)
    fitting, free = split(True), split(False)

    def gain(v: Estimate) -> float:
        return v.time["tokens_per_s_per_gpu"] / e.time["tokens_per_s_per_gpu"] - 1

    if fitting is not e:
        return (f"re-split as `--pipeline-layout \"{fitting.layout.pipeline_layout}\"` it predicts "
                f"{gain(fitting):+.1%} and fits; `plan` re-splits this way")
    if free is e or gain(free) < SMALLEST_GAIN:
        return None
    worst = max(free.stages, key=lambda m: m.total)
    return (f"evened out as `{free.layout.pipeline_layout}` it would predict {gain(free):+.1%}, but rank "
            f"{worst.stage} would need {worst.total / GIB:.1f} GiB of {e.gpu.capacity_bytes / GIB:.1f}: memory, not "
            "the split, keeps the ranks uneven")


def _resplitter(e: Estimate):
    """split(check_memory) -> `e` re-split by rebalance (e itself where no move pays), each candidate layout
    estimated once across calls; without the memory check, the split the ranks' times alone would reach."""
    variants: dict[Layout, Estimate] = {}

    def variant(cand: Layout) -> Estimate:
        if cand not in variants:
            variants[cand] = e.variant(layout=cand)
        return variants[cand]

    def split(check_memory: bool) -> Estimate:
        _, best = rebalance(e.layout, e.model.num_layers, e.model.mtp_num_layers,
                            lambda cand: (variant(cand).time["step_seconds"], variant(cand).time["stage_seconds"])
                            if keeps_index_groups(e.model, cand) else None,
                            (lambda cand: variant(cand).fits) if check_memory else (lambda cand: True),
                            (e.time["step_seconds"], e.time["stage_seconds"]))
        return e if best is e.layout else variant(best)

    return split


def chunk_counts(rank_counts: list[int], vpp: int) -> list[int]:
    """Layers per virtual stage in Megatron's order (stage s: chunk s // PP of rank s % PP); a rank's spare layers
    go to its earlier chunks, so the last rank's final chunk, beside the MTP layers and loss, is its lightest."""
    return stage_order([[n // vpp + (v < n % vpp) for v in range(vpp)] for n in rank_counts])


# with_rank_layers by its inputs: the re-split weighs the same moves of a layout again under each knob set it tries
# (89 distinct of a DeepSeek-V3 plan's 207), and each was a layout string written, parsed and checked (Layout)
_SPLITS: dict = {}


def with_rank_layers(lay: Layout, counts: list[int], mtp: int) -> Layout | None:
    """`lay` re-split with `counts[r]` decoder layers on pipeline rank r; None where a chunk but the last would
    hold no layer."""
    return remembered(_SPLITS, (lay, tuple(counts), mtp), lambda: _with_rank_layers(lay, counts, mtp), 4096)


def _with_rank_layers(lay: Layout, counts: list[int], mtp: int) -> Layout | None:
    chunks = chunk_counts(counts, lay.vpp)
    if any(c < 1 for c in chunks[:-1]) or chunks[-1] < 0:
        return None
    cleared = {"first_stage_layers": None, "last_stage_layers": None,
               "account_for_embedding": False, "account_for_loss": False}
    return replace(lay, pipeline_layout=write_pipeline_layout(chunks, mtp), **cleared)


def rebalance(lay: Layout, num_layers: int, mtp: int, evaluate, fits, start: tuple) -> tuple[float, Layout]:
    """(step seconds, layout) after moving decoder layers one at a time from the slowest pipeline rank to the
    quickest other rank where the layout still fits, while that makes the ranks' times better: the step faster, or
    the same step with fewer ranks at the slowest time, so two equally slow ranks are relieved one after the other.
    `evaluate(layout)` gives (step seconds, seconds a micro-batch of each rank), or None for a split Megatron refuses
    (DSA index sharing), which is passed over; `fits(layout)` is asked only of a
    move that would be taken; `start` is `lay`'s own evaluation. Only PP > 1 layouts are re-split."""
    if lay.pp < 2:
        return start[0], lay
    now, counts, now_lay = start, rank_layers(lay, num_layers, mtp), lay
    best, best_lay = start[0], lay
    for _ in range(num_layers * lay.pp):  # a safety bound: every move lowers (step, ranks at the top)
        found = _move_off_slowest(lay, counts, now, mtp, evaluate, fits)
        if not found:
            break
        now, counts, now_lay = found
        if now[0] < best:
            best, best_lay = now[0], now_lay
    return best, best_lay


def _pays(found: tuple, now: tuple) -> bool:
    """Whether a move pays: a faster step, or the same step with fewer ranks at the slowest time (relieving one of
    two equally slow ranks leaves the step where it was; the next move can lower it). Plateau moves lower that count,
    so they are at most PP - 1 in a row. (Accepting steps up to 0.2% slower as the same, since a moved layer's
    parameters shift the DP traffic a hair, found no faster pick over the 28 models on two clusters and cost 10%
    more search time.)"""
    def at_top(stages):
        return sum(t >= max(stages) * (1 - 1e-9) for t in stages)

    return found[0] < now[0] or (found[0] <= now[0] and at_top(found[1]) < at_top(now[1]))


def _move_off_slowest(lay: Layout, counts: list[int], best: tuple, mtp: int, evaluate, fits):
    """((step, stage seconds), counts, layout) with one layer moved from the slowest rank to the quickest rank
    where it fits, if that pays (`_pays`); else None. A rank that cannot take the layer for memory passes it to the
    next quickest; a move that does not pay ends the search (a slower rank would pay less)."""
    stages = best[1]
    slow = max(range(lay.pp), key=lambda i: stages[i])
    for r in sorted((i for i in range(lay.pp) if i != slow), key=lambda i: stages[i]):
        moved = [c + (i == r) - (i == slow) for i, c in enumerate(counts)]
        cand = with_rank_layers(lay, moved, mtp)
        if cand is None:
            continue
        found = evaluate(cand)
        if found is None:  # a split Megatron refuses (DSA index sharing: layout/dsa_split.py)
            continue
        if not _pays(found, best):
            return None
        if fits(cand):
            return found, moved, cand
    return None


def even_out(e: Estimate) -> Estimate:
    """An estimate with its ranks evened out as `plan` does (explain re-splits the layers for a new VPP this way,
    so the move is weighed against the pick on equal terms); as it is where it does not fit or has no pipeline."""
    return _resplitter(e)(True) if e.fits else e
