"""Charts as inline SVG, drawn on the server: no script, no library, readable offline.

Each function returns markup for a template (``Markup``: the numbers and labels it holds
are formatted or escaped here).
"""

from __future__ import annotations

import math
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


def _frame(title: str) -> list[str]:
    """The chart's opening tag, title and the 0..1 grid; the x axis is the caller's."""
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
    return parts


def lines(
    title: str, x_label: str, xs: Sequence[float], series: dict[str, Sequence[float | None]]
) -> Markup:
    """One polyline per series over ``xs``, values in 0..1; missing values break no line."""
    if not xs:
        return Markup("")
    low, high = min(xs), max(xs)
    parts = _frame(title)
    parts.append(
        f'<text x="{LEFT}" y="{HEIGHT - 6}">{escape(x_label)} {low:g}</text>'
        f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - 6}" text-anchor="end">{high:g}</text>'
    )
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


def held_out(title: str, rounds: Sequence[dict[str, Any]]) -> Markup:
    """Held-out success and mean reward of each eval round, by the policy version it
    played (oldest first): a dot per value with its 95 % interval as a bar, the dots of a
    series joined into a curve, the versions under the x axis."""
    shown = [r for r in rounds if r["episodes"]]
    if not shown:
        return Markup("")
    parts = _frame(title)
    n = len(shown)
    xs = [_x(i, 0.5, n + 0.5) for i in range(1, n + 1)]
    offset = min(6.0, (WIDTH - LEFT - RIGHT) / n / 6)
    series = (  # the train curve's colours: reward first, then success
        ("reward", "mean_reward", "reward_low", "reward_high", COLOURS[0], -offset),
        ("success", "success", "low", "high", COLOURS[1], offset),
    )
    for name, key, low, high, colour, dx in series:
        points = " ".join(
            f"{x + dx:.1f},{_y(float(r[key])):.1f}" for x, r in zip(xs, shown, strict=True)
        )
        parts.append(
            f'<polyline class="{name}" fill="none" stroke="{colour}" stroke-width="1" '
            f'stroke-opacity="0.6" points="{points}"/>'
        )
        for x, row in zip(xs, shown, strict=True):
            value = float(row[key])
            label = escape(
                f"{_versions(row)}: {name} {value:.3f} [{row[low]:.3f}, {row[high]:.3f}] "
                f"on {row['episodes']} episodes"
            )
            parts.append(
                f'<g class="{name}"><title>{label}</title>'
                f'<line x1="{x + dx:.1f}" x2="{x + dx:.1f}" y1="{_y(row[low]):.1f}" '
                f'y2="{_y(row[high]):.1f}" stroke="{colour}" stroke-width="2"/>'
                f'<circle cx="{x + dx:.1f}" cy="{_y(value):.1f}" r="3" fill="{colour}"/></g>'
            )
    every = max(1, math.ceil(n / 12))  # at most about 12 version labels
    for i, (x, row) in enumerate(zip(xs, shown, strict=True)):
        if i % every == 0 or i == n - 1:
            parts.append(
                f'<text x="{x:.1f}" y="{HEIGHT - 6}" text-anchor="middle">'
                f"{escape(_versions(row))}</text>"
            )
    parts.append("</svg>")
    return Markup("".join(parts))


def _versions(row: dict[str, Any]) -> str:
    low, high = row["policy_version"], row["last_version"]
    return f"v{high}" if low == high else f"v{low}–{high}"


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
