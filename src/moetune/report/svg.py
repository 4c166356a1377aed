"""Stacked horizontal bar charts as inline SVG: the report's only graphics, drawn here so the page needs nothing to
open (no script, no network) and a test can read each bar's length back."""

from __future__ import annotations

from html import escape

# one colour per segment name, in the order segments are first met (Okabe-Ito: told apart with colour-blindness too)
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999")
LABEL_W, BAR_W, ROW_H, GAP = 150, 520, 20, 6


def stacked_bars(rows: list[tuple[str, list[tuple[str, float]]]], unit: str, *, limit: float | None = None,
                 limit_label: str = "") -> str:
    """ROWS: (label, [(segment, value), ...]) each; one bar a row, segments left to right, all on one scale (the
    largest total, or LIMIT where larger: a vertical line marks it). Each segment is a <rect> with data-segment and
    data-value, and a <title> a browser shows on hover."""
    names = list(dict.fromkeys(name for _, segments in rows for name, _ in segments))
    colour = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}
    top = max([sum(v for _, v in segments) for _, segments in rows] + [limit or 0.0]) or 1.0
    scale = BAR_W / top
    height = len(rows) * (ROW_H + GAP) + 40
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{LABEL_W + BAR_W + 90}" height="{height}" '
             f'data-unit="{escape(unit)}" data-scale="{scale:.6g}">']
    for i, (label, segments) in enumerate(rows):
        y, x = i * (ROW_H + GAP), float(LABEL_W)
        parts.append(f'<text x="{LABEL_W - 6}" y="{y + ROW_H - 5}" text-anchor="end" font-size="12">'
                     f'{escape(label)}</text>')
        for name, value in segments:
            w = value * scale
            parts.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{ROW_H}" fill="{colour[name]}" '
                         f'data-segment="{escape(name)}" data-value="{value:.6g}"><title>{escape(name)}: '
                         f'{value:.4g} {escape(unit)}</title></rect>')
            x += w
        total = sum(v for _, v in segments)
        parts.append(f'<text x="{x + 4:.2f}" y="{y + ROW_H - 5}" font-size="11">{total:.4g} {escape(unit)}</text>')
    if limit:
        lx = LABEL_W + limit * scale
        parts.append(f'<line x1="{lx:.2f}" y1="0" x2="{lx:.2f}" y2="{len(rows) * (ROW_H + GAP)}" stroke="#000" '
                     f'stroke-dasharray="4 3" data-limit="{limit:.6g}"><title>{escape(limit_label)}</title></line>')
    legend_y = len(rows) * (ROW_H + GAP) + 16
    x = LABEL_W
    for name in names:
        parts.append(f'<rect x="{x}" y="{legend_y - 10}" width="10" height="10" fill="{colour[name]}"/>'
                     f'<text x="{x + 14}" y="{legend_y}" font-size="11">{escape(name)}</text>')
        x += 14 + 7 * len(name) + 16
    parts.append("</svg>")
    return "".join(parts)
