"""Shared output helpers: JSON to stdout, rich tables for people."""

import json
import os
import re
import sys

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from moetune.emit.mlm import mlm_fix_words
from moetune.emit.values import hydra
from moetune.planner.explain_scale import fsdp_shards
from moetune.planner.from_json import pick_result, saved_launcher
from moetune.units import GIB
from moetune.walls.cp_legal import exchange_text
from moetune.words import plural


def layout_extras(layout, knobs, fsdp: bool = True, split: bool = True) -> list[str]:
    """What a layout row needs besides its sizes to be run again: the CP exchange, the pipeline split and an FSDP in
    place of Megatron's DDP (`fsdp` False: said once beside the table, as plan's rows share it; `split` False: said
    below it, plan_table.py)."""
    cp = [f"CP via {exchange_text(knobs, layout.cp)}"] if layout.cp > 1 else []
    return cp + ([layout.split_text()] if split and layout.split_text() else []) \
        + (fsdp_text(knobs, layout) if fsdp else [])


def fsdp_text(knobs, layout=None) -> list[str]:
    """The FSDP wrapping the model and what it shards over which ranks (explain's wording, planner/explain_scale.py:
    each copy's DP x CP / N under hybrid sharding), none under DDP. `layout`: the groups' sizes too."""
    if knobs.torch_fsdp2:
        return ["torch FSDP2: weights, gradients and optimizer state sharded over DP x CP"]
    if not knobs.megatron_fsdp:
        return []
    return [f"Megatron FSDP {knobs.megatron_fsdp}: {fsdp_shards(knobs, layout)}"]


def console() -> Console:
    # Piped output keeps whole table rows (a terminal uses its own width), unless COLUMNS names a width, which rich
    # then reads (Console's width from the environment): `COLUMNS=80 moetune plan ... | less` lays out for 80
    return Console(highlight=False, soft_wrap=True,
                   width=None if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit() else 200)


# A note's lines after the first start under its text where its label ("note: ", "Routing: ", "Track record: ") is at
# most this wide, else HANG in ("Not searched (the seeds' starting choice stays the pick's): " would leave little room)
HANG_MAX, HANG = 16, 4
# the words a line breaks between: a `command` is one (it stays whole on one line, to be copied), and so is a number
# with its unit ("2.85 s", "75.9 GiB")
_WORDS = re.compile(r"`[^`]*`\S*|\S+(?: (?:s|ms|GiB|GB|GB/s|Gb/s|tokens/s/GPU)\b\S*)?")


def wrapped(line: str, width: int) -> Text:
    """LINE (rich markup) in lines of at most WIDTH, broken between words (a word longer than a line stands alone),
    the lines after the first hung under the text after its label."""
    text = Text.from_markup(line)
    label = text.plain.find(": ")
    indent = label + 2 if 0 < label <= HANG_MAX - 2 else HANG
    lines = [piece for n, part in enumerate(text.split("\n", allow_blank=True))
             for piece in _pieces(part, width - (indent if n else 0), width - indent)]
    return Text("\n").join([lines[0], *(Text(" " * indent) + piece for piece in lines[1:])])


def _pieces(text: Text, first: int, rest: int) -> list[Text]:
    """TEXT's lines, greedily filled with whole words: the first FIRST characters long at most, the others REST."""
    spans: list[list[int]] = []  # [start, end] of each line in text.plain
    for m in _WORDS.finditer(text.plain):
        if spans and m.end() - spans[-1][0] <= (first if len(spans) == 1 else rest):
            spans[-1][1] = m.end()
        else:
            spans.append([m.start(), m.end()])
    return [text[a:b] for a, b in spans] or [text]


class Notes:
    """A console for the lines under plan's table: each wrapped to the console's width (wrapped), where the console
    itself leaves lines whole (console(): soft_wrap)."""

    def __init__(self, out: Console) -> None:
        self.out = out

    def print(self, line: str) -> None:
        self.out.print(wrapped(line, self.out.width))


def print_model_notes(printer, spec) -> None:
    """The config.json fields a model read at its config class's defaults (specs/hf_defaults.py), one note each;
    PRINTER is the command's console (or its quiet-aware wrapper)."""
    for note in spec.notes:
        printer.print(f"[yellow]note[/yellow]: {escape(note)}")


def emit_json(data: dict | list) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def gib(n: int | float) -> str:
    return f"{n / GIB:,.2f}"


def billions(n: int | float) -> str:
    return f"{n / 1e9:,.3f}B"


def table(title: str, columns: list[str], rows: list[list], justify_right_from: int = 1) -> Table:
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        # fold, never truncate: a cell (a layout string, a config value) must stay whole to be passed again
        t.add_column(c, justify="right" if i >= justify_right_from else "left", overflow="fold")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    return t


def user_files_line(files: dict) -> str | None:
    """One line naming the user's files a result was made under (its efficiency_file / overheads_file keys; a None
    path: constants a saved result carried without its file's name), or None without any."""
    what = {"efficiency_file": "efficiency constants", "overheads_file": "memory overheads"}
    parts = [f"{label} from {escape(files[key]) if files[key] else 'the saved result (file not named)'}"
             for key, label in what.items() if key in files]
    return f"[bold]Your files[/bold]: {'; '.join(parts)}, over the shipped ones" if parts else None


def launched_by_mlm(result) -> bool:
    """Whether an estimate was read from a Megatron-LM launch (its fixes are then said as Megatron-LM arguments), a
    saved one's as it recorded (planner/from_json.py saved_launcher)."""
    return result.launcher == "megatron-lm"


def unknown_launcher_note(data: dict, rank: int, where: str) -> None:
    """One line on stderr where a saved result (result RANK of DATA) records no launcher, neither its own key nor the
    FLOP counter of its launch: it is read as a Megatron Bridge launch, which a Megatron-LM launch's user would
    otherwise take for moetune's answer to it (Bridge's names in its fixes, Bridge's rules)."""
    if saved_launcher(pick_result(data, rank), where) is None:
        click.echo(f"note: {where} does not say which launcher runs it (saved by an older moetune): read as a "
                   "Megatron Bridge launch; for a Megatron-LM one, save its estimate again (`moetune estimate ... "
                   "--mlm-args ... --json`)", err=True)


def override_words(change: dict, mlm: bool = False, sep: str = ", ") -> str:
    """Config fields to set, as the user sets them: Hydra overrides with values as check and the overrides files write
    them (null, true, [a,b]: emit/values.py hydra), not Python's None / True / ['a']; for a Megatron-LM launch (`mlm`)
    its arguments (emit/mlm.py). Brackets are rich markup: escape the words before printing them."""
    return mlm_fix_words(change) if mlm else sep.join(f"{k}={hydra(v)}" for k, v in change.items())


def print_checks(found: list[dict], mlm: bool = False) -> None:
    """Rule findings as `explain` and `estimate` print them: one line each, with the fix when the rule has one (as
    Megatron-LM arguments for a Megatron-LM launch: `mlm`, emit/mlm.py)."""
    out = console()
    for c in found:
        fix = override_words(c["fix"], mlm)
        withdrawn = c.get("fix_withdrawn") and f" (no fix: its own would trip {', '.join(c['fix_withdrawn'])})"
        # escaped: a message or fix may hold brackets ('[moe_act,mlp]', '[a2a, p2p]') that rich reads as markup
        out.print(f"[bold]Check[/bold] {c['severity']} {c['rule']}: {escape(c['message'])}"
                  + (f" (fix: {escape(fix)})" if fix else "") + escape(withdrawn or ""))


def attention_notes(e) -> list[str]:
    """What the step charges attention differently from the FLOP count (estimate and plan print them): Llama 4's chunks,
    which the count does not know; and DeepSeek Sparse Attention's uncalibrated kernel rates."""
    t, m, out = e.time, e.model, []
    if t["counted_not_run"] > 0.005:
        out.append(f"{m.name} attends within {m.attention_chunk:,}-token chunks (Megatron Bridge's Llama 4 attention), "
                   f"which the step is charged; {t['flops_convention']}'s FLOP count, and so TFLOP/s/GPU and MFU here, "
                   f"counts whole-sequence attention: {100 * t['counted_not_run']:.0f}% of the counted FLOPs never run")
    if "uncalibrated" in t:  # DeepSeek Sparse Attention (walls/dsa.py)
        out.append(t["uncalibrated"])
    return out


def workload_line(w: dict) -> str:
    """The batch priced (planner/explain.py workload_of): sequence, micro- and global batch and the micro-batches each
    DP rank runs a step, a defaulted one said so."""
    said = {k: " (default)" if k in w["defaulted"] else "" for k in ("seq_length", "global_batch_size")}
    return (f"sequence {w['seq_length']:,}{said['seq_length']}, micro-batch {w['micro_batch_size']}, global batch "
            f"{w['global_batch_size']:,}{said['global_batch_size']}: {plural(w['num_microbatches'], 'micro-batch')} "
            f"a step on each of DP {w['dp']}")
