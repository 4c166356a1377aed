"""plan's candidates laid out for the terminal's width: one table where every column fits unwrapped, else the results
beside a table of their knobs, else one block of lines per row; each row's pipeline split below, one line a split so
the string stays whole to be passed again. Every cell is one of the same per-row cells in each form."""

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from moetune.cli.output import layout_extras
from moetune.cli.plan_notes import recompute_text
from moetune.planner.result_text import with_twins

TITLE = "Fastest configurations that fit"
COLUMNS = ("#", "layout", "mbs", "precision", "dispatcher", "recompute", "cuda graphs", "EP overlap", "offload",
           "tok/s/GPU", "TFLOP/s/GPU", "peak GiB", "dominant wall")
NUMBERS = frozenset({"#", "mbs", "tok/s/GPU", "TFLOP/s/GPU", "peak GiB"})  # never wrapped: a number reads whole
RIGHT_FROM = COLUMNS.index("tok/s/GPU")  # the figures compared down the rows
RESULTS = ("#", "layout", "mbs", "precision", "tok/s/GPU", "TFLOP/s/GPU", "peak GiB", "dominant wall")
KNOBS = ("#", "dispatcher", "recompute", "cuda graphs", "EP overlap", "offload")


def _offload(k) -> str:
    """Optimizer offload fraction, plus the activation-offload modules when any (a second line of the cell)."""
    return f"{k.optimizer_offload_fraction:g}" + ("\nact: " + ",".join(sorted(k.offload_modules))
                                                  if k.offload_modules else "")


def _overlap(k) -> str:
    """EP overlap (with delayed wgrad), and TP comm overlap where the result runs it."""
    ep = ("on + delay wgrad" if k.delay_wgrad else "on") if k.ep_overlap else "off"
    return ep + ("\n(+TP overlap)" if k.tp_comm_overlap else "")


def row_cells(rank: int, r, twins: list[str] = ()) -> dict[str, str]:
    """Result R's cells by column; a cell's lines break where its words do (a module list or a layout stays one
    line), so the widest line is the column's natural width. TWINS: the dispatchers folded into the row, which
    predict its step time too (planner/twins.py)."""
    k, t = r.knobs, r.time
    recompute = recompute_text(k).replace(" (", "\n(")
    return {"#": str(rank), "layout": "\n".join([r.layout.compact(), *layout_extras(r.layout, k, False, False)]),
            "mbs": str(r.workload.micro_batch_size),
            "precision": k.precision + ("\n+LM head" if k.fp8_output_proj else ""),  # the head in MXFP8 too
            "dispatcher": with_twins(k.dispatcher, twins, "\n"), "recompute": recompute,
            "cuda graphs": ",".join(k.cuda_graph_scope) or "-",
            "EP overlap": _overlap(k), "offload": _offload(k), "tok/s/GPU": f"{t['tokens_per_s_per_gpu']:,.0f}",
            "TFLOP/s/GPU": f"{t['tflops_per_gpu']:.0f}", "peak GiB": f"{r.peak_bytes / 2**30:.1f}",
            "dominant wall": t["dominant_wall"]}


def _table(title: str, columns: tuple[str, ...], rows: list[dict]) -> Table:
    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c, justify="right" if COLUMNS.index(c) >= RIGHT_FROM else "left", no_wrap=c in NUMBERS)
    for row in rows:
        t.add_row(*[row[c] for c in columns])
    return t


def _tables(rows: list[dict]) -> list[list[Table]]:
    """The table forms, widest first: every column in one table; the results, then the knobs of the same rows."""
    return [[_table(TITLE, COLUMNS, rows)],
            [_table(TITLE, RESULTS, rows), _table("Their knobs", KNOBS, rows)]]


def _fits(out: Console, t: Table) -> bool:
    """Whether the table's natural width (no cell wrapped) fits the console: rich shrinks a wider table's columns
    below their longest word, and past that its unwrapped ones, which splits numbers across lines."""
    return Measurement.get(out, out.options.update_width(10**4), t).maximum <= out.width  # unbounded: its natural


def _fill(parts: list[str], width: int, first: str, indent: str) -> list[str]:
    """PARTS joined by ", " in lines of at most WIDTH, a part never split (one longer than a line stands alone)."""
    lines, prefix, current = [], first, []
    for part in parts:
        if current and len(prefix + ", ".join([*current, part])) > width:
            lines.append(prefix + ", ".join(current) + ",")
            prefix, current = indent, []
        current.append(part)
    return [*lines, prefix + ", ".join(current)]


def _block(row: dict, width: int) -> list[str]:
    """One row as lines of at most WIDTH: its figures, its layout, its knobs, each a "name value" kept whole."""
    said = {c: row[c].replace("\n", " ") for c in COLUMNS}
    indent = " " * (len(f"#{said['#']}") + 2)
    figures = [f"{said['tok/s/GPU']} tok/s/GPU", f"{said['TFLOP/s/GPU']} TFLOP/s/GPU", f"peak {said['peak GiB']} GiB",
               f"dominant wall {said['dominant wall']}"]
    setup = [said["layout"], f"mbs {said['mbs']}", said["precision"]]
    return (_fill(figures, width, f"#{said['#']}".ljust(len(indent)), indent) + _fill(setup, width, indent, indent)
            + _fill([f"{c} {said[c]}" for c in KNOBS[1:]], width, indent, indent))


def print_rows(out: Console, results: list, twins: list[list[str]] | None = None) -> None:
    """The results in the widest form that fits OUT, then their pipeline splits and what the layouts leave out;
    TWINS: by row, the dispatchers folded into it."""
    rows = [row_cells(rank, r, same) for rank, (r, same) in enumerate(zip(results, twins or [[]] * len(results)), 1)]
    form = next((tables for tables in _tables(rows) if all(_fits(out, t) for t in tables)), None)
    if form is not None:
        for t in form:
            out.print(t)
    else:
        out.print(TITLE)
        for row in rows:
            out.print("\n".join(_block(row, out.width)), markup=False)
    splits: dict[str, list[str]] = {}
    for rank, r in enumerate(results, 1):
        if r.layout.split_text():
            splits.setdefault(r.layout.split_text(), []).append(f"#{rank}")
    for text, ranks in splits.items():  # one line, unwrapped: copied as a whole
        out.print(f"{', '.join(ranks)}: {text}", markup=False)
    left = [name for name, size in (("CP", "cp"), ("ETP", "etp")) if any(getattr(r.layout, size) == 1 for r in results)]
    if left:
        out.print(f"Layouts name {' and '.join(left)} only above 1.")
