"""Charts as inline SVG, drawn by the server (no script, no library): weekly bars and
lines over weeks. Every text in them is escaped here; each bar or line links somewhere."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 680, 220
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 28, 34
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM


@dataclass(frozen=True)
class Series:
    """One thing drawn over the weeks: its name (the legend), colour, a value per week
    (None: nothing that week) and where a click on it goes."""

    name: str
    colour: str
    values: list[float | None]
    href: str


def _frame(title: str, labels: list[str], top: float, unit: str) -> list[str]:
    """The box, the y axis (0 and ``top``), a label under every few weeks, the title."""
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<text x="{LEFT}" y="14" font-size="12" font-weight="600">{escape(title)}</text>',
        f'<line x1="{LEFT}" y1="{TOP + PLOT_H}" x2="{LEFT + PLOT_W}" y2="{TOP + PLOT_H}" '
        'stroke="#8a93a6"/>',
        f'<text x="{LEFT - 4}" y="{TOP + PLOT_H}" text-anchor="end" font-size="10">0</text>',
        f'<text x="{LEFT - 4}" y="{TOP + 8}" text-anchor="end" font-size="10">'
        f"{escape(_short(top))}{escape(unit)}</text>",
    ]
    every = max(1, len(labels) // 8)
    step = PLOT_W / max(len(labels), 1)
    for i, label in enumerate(labels):
        if i % every == 0:
            x = LEFT + step * (i + 0.5)
            parts.append(
                f'<text x="{x:.1f}" y="{HEIGHT - 18}" text-anchor="middle" font-size="10">'
                f"{escape(_shown(label))}</text>"
            )
    return parts


def _shown(label: str) -> str:
    """A week's label without its year (``W48``); any other label as it is."""
    year, dash, week = label.partition("-W")
    return f"W{week}" if dash and year.isdigit() else label


def _legend(series: list[Series]) -> str:
    out, x = [], LEFT
    for one in series:
        out.append(
            f'<a href="{escape(one.href)}"><rect x="{x}" y="{HEIGHT - 10}" width="10" height="8" '
            f'fill="{one.colour}"/><text x="{x + 14}" y="{HEIGHT - 2}" font-size="10">'
            f"{escape(one.name)}</text></a>"
        )
        x += 24 + 7 * len(one.name)
    return "".join(out)


def _short(value: float) -> str:
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.2f}"


def bars(title: str, labels: list[str], series: list[Series], unit: str = "") -> str:
    """Bars side by side per week, one per series; each bar links to its series' tasks."""
    top = max([v for s in series for v in s.values if v is not None] + [1])
    parts = _frame(title, labels, top, unit)
    group = PLOT_W / max(len(labels), 1)
    width = group * 0.8 / max(len(series), 1)
    for k, one in enumerate(series):
        for i, value in enumerate(one.values):
            if not value:
                continue
            high = PLOT_H * value / top
            x = LEFT + group * i + group * 0.1 + width * k
            parts.append(
                f'<a href="{escape(one.href)}"><rect x="{x:.1f}" y="{TOP + PLOT_H - high:.1f}" '
                f'width="{max(width - 1, 1):.1f}" height="{high:.1f}" fill="{one.colour}">'
                f"<title>{escape(labels[i])}: {escape(one.name)} {escape(_short(value))}"
                f"{escape(unit)}</title></rect></a>"
            )
    return "".join([*parts, _legend(series), "</svg>"])


def lines(
    title: str, labels: list[str], series: list[Series], top: float | None = None, unit: str = ""
) -> str:
    """A line per series over the weeks (broken where a week has no value), each a link."""
    found = [v for s in series for v in s.values if v is not None]
    top = top or max([*found, 1])
    parts = _frame(title, labels, top, unit)
    step = PLOT_W / max(len(labels), 1)
    for one in series:
        points = [
            (LEFT + step * (i + 0.5), TOP + PLOT_H - PLOT_H * v / top)
            for i, v in enumerate(one.values)
            if v is not None
        ]
        if not points:
            continue
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        dots = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5"/>' for x, y in points)
        parts.append(
            f'<a href="{escape(one.href)}"><g fill="{one.colour}" stroke="{one.colour}">'
            f'<title>{escape(one.name)}</title><polyline points="{path}" fill="none" '
            f'stroke-width="2"/>{dots}</g></a>'
        )
    return "".join([*parts, _legend(series), "</svg>"])
