"""Charts as inline SVG, drawn on the server: no script, no library, readable offline.

Each function returns markup for a template (``Markup``: the numbers and labels it holds
are formatted or escaped here).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from markupsafe import Markup, escape

WIDTH, HEIGHT = 640, 200
LEFT, RIGHT, TOP, BOTTOM = 40, 10, 10, 24
COLOURS = ("#1f6feb", "#d97706", "#16a34a", "#9333ea", "#dc2626", "#0891b2", "#6b7280")


def _x(value: float, low: float, high: float) -> float:
    span = (high - low) or 1.0
    return LEFT + (value - low) / span * (WIDTH - LEFT - RIGHT)


def _y(value: float) -> float:
    """0..1 to the plot's height (rewards and success rates are both in 0..1)."""
    return TOP + (1.0 - max(0.0, min(1.0, value))) * (HEIGHT - TOP - BOTTOM)


def _frame(title: str, x_label: str, x_low: float, x_high: float) -> list[str]:
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = _y(tick)
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{tick:g}</text>'
        )
    parts.append(
        f'<text x="{LEFT}" y="{HEIGHT - 6}">{escape(x_label)} {x_low:g}</text>'
        f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - 6}" text-anchor="end">{x_high:g}</text>'
    )
    return parts


def lines(
    title: str, x_label: str, xs: Sequence[float], series: dict[str, Sequence[float | None]]
) -> Markup:
    """One polyline per series over ``xs``, values in 0..1; missing values break no line."""
    if not xs:
        return Markup("")
    low, high = min(xs), max(xs)
    parts = _frame(title, x_label, low, high)
    for (name, values), colour in zip(series.items(), COLOURS, strict=False):
        points = " ".join(
            f"{_x(x, low, high):.1f},{_y(v):.1f}"
            for x, v in zip(xs, values, strict=True)
            if v is not None
        )
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}">'
            f"<title>{escape(name)}</title></polyline>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def intervals(title: str, rounds: Sequence[dict[str, Any]]) -> Markup:
    """Success rate of each eval round as a dot with its 95 % interval as a bar."""
    shown = [r for r in rounds if r["episodes"]]
    if not shown:
        return Markup("")
    parts = _frame(title, "round", 1, len(shown))
    for i, row in enumerate(shown, start=1):
        x = _x(i, 0.5, len(shown) + 0.5)
        label = escape(
            f"v{row['version']}: success {row['success']:.2f} "
            f"[{row['low']:.2f}, {row['high']:.2f}] on {row['episodes']} episodes"
        )
        parts.append(
            f'<g><title>{label}</title><line x1="{x:.1f}" x2="{x:.1f}" y1="{_y(row["low"]):.1f}" '
            f'y2="{_y(row["high"]):.1f}" stroke="{COLOURS[0]}" stroke-width="2"/>'
            f'<circle cx="{x:.1f}" cy="{_y(row["success"]):.1f}" r="3" fill="{COLOURS[0]}"/></g>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def stacked_bar(title: str, parts_s: dict[str, float]) -> Markup:
    """One horizontal bar split into the phases of a train step (seconds)."""
    total = sum(parts_s.values())
    if total <= 0:
        return Markup("")
    height, x = 28, 0.0
    parts = [
        f'<svg class="bar" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for (name, seconds), colour in zip(parts_s.items(), COLOURS, strict=False):
        width = seconds / total * WIDTH
        parts.append(
            f'<rect x="{x:.1f}" y="0" width="{width:.1f}" height="{height}" fill="{colour}">'
            f"<title>{escape(name)}: {seconds:.2f} s</title></rect>"
        )
        x += width
    parts.append("</svg>")
    return Markup("".join(parts))


def legend(names: Sequence[str]) -> Markup:
    return Markup(
        " ".join(
            f'<span class="key" style="background:{colour}"></span>{escape(name)}'
            for name, colour in zip(names, COLOURS, strict=False)
        )
    )
