"""The report's page: one self-contained HTML file (styles inline, charts as inline SVG, no script)."""

from __future__ import annotations

from html import escape

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.6em 0; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f3f3; } p.note { font-size: 0.85em; color: #555; }
code { font-size: 0.95em; }
"""


def table(columns: list[str], rows: list[list], numeric_from: int = 99) -> str:
    """Rows of cells (text, escaped here); columns from NUMERIC_FROM on are right-aligned figures."""
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f'<td{" class=num" if i >= numeric_from else ""}>{escape(str(cell))}</td>'
                                    for i, cell in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def pairs(items: list[tuple[str, str]]) -> str:
    """A two-column table of name and value."""
    return table(["", ""], [[k, v] for k, v in items]).replace("<thead><tr><th></th><th></th></tr></thead>", "")


def paragraph(text: str, note: bool = False) -> str:
    return f'<p{" class=note" if note else ""}>{escape(text)}</p>'


def section(title: str, *parts: str, anchor: str = "") -> str:
    ident = f' id="{escape(anchor)}"' if anchor else ""
    return f"<section{ident}><h2>{escape(title)}</h2>{''.join(parts)}</section>"


def page(title: str, subtitle: str, sections: list[str]) -> str:
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1>{paragraph(subtitle, note=True)}"
            + "".join(sections) + "</body></html>\n")
