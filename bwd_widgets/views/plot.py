"""Small SVG charts drawn by the package itself: memory over time, budget trade-offs, bytes by name.

They exist so a notebook's stored outputs show a picture wherever the notebook is opened (GitHub,
nbviewer, a terminal's saved file) without a plotting dependency: each chart is an `image/svg+xml`
output with axes, ticks and units, and a text repr that states the same numbers. Kernel text
(module and node names) is escaped, never read as markup. Long timelines are thinned to the
highest and lowest value per pixel column, so peaks survive and files stay small.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.text import visible
from ..core.units import axis_unit, format_value, nice_ticks, plain_number
from ..extraction.result import BackwardExtraction
from ..studio.compare import Sweep, SweepPoint
from .images import image_html
from .labels import LABEL_SIZE, placed_labels
from .stretches import stretch_extremes

COLOURS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563")
AXIS_TITLES = {"B": "bytes", "s": "time", "FLOP": "FLOPs"}
CHAR_WIDTH = 6.4
"""Approximate width of one character at the 11 px font, for laying out labels."""

Number = int | float


@dataclass(frozen=True)
class Plot:
    """One chart: `svg` is what notebooks show; `repr()` says the same in words."""

    svg: str
    summary: str

    def _repr_svg_(self) -> str:
        return self.svg

    def _repr_html_(self) -> str:  # an <img>, the summary its alt text: shown untrusted too (views/images.py)
        return image_html(self.svg, self.summary)

    def __repr__(self) -> str:
        return self.summary

    def save(self, path: str | Path) -> Path:
        """Write the SVG file (open it in a browser, or embed it in Markdown)."""
        path = Path(path)
        path.write_text(self.svg, encoding="utf-8")
        return path


# --- drawing ---------------------------------------------------------------------------------------


def _text(value: object) -> str:
    return html.escape(visible(value), quote=True)


def _f(value: float) -> str:
    """Coordinates with one decimal: enough for a screen, short in the file."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


class _Canvas:
    """An SVG document with a white background (readable in dark themes too)."""

    def __init__(self, width: int, height: int, title: str):
        self.width, self.height = width, height
        self.parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11" role="img">',
            f"<title>{_text(title)}</title>",
            f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        ]
        if title:
            self.text(width / 2, 16, title, anchor="middle", size=13, weight="bold")

    def add(self, element: str) -> None:
        self.parts.append(element)

    def text(
        self,
        x: float,
        y: float,
        value: object,
        *,
        anchor: str = "start",
        size: float = 11,
        fill: str = "#111827",
        weight: str = "normal",
    ) -> None:
        bold = ' font-weight="bold"' if weight == "bold" else ""
        self.add(
            f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}" font-size="{size}" fill="{fill}"{bold}>'
            f"{_text(value)}</text>"
        )

    def line(
        self, x1: float, y1: float, x2: float, y2: float, *, stroke: str = "#9ca3af", width: float = 1.0, dash: str = ""
    ) -> None:
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(
            f'<line x1="{_f(x1)}" y1="{_f(y1)}" x2="{_f(x2)}" y2="{_f(y2)}" stroke="{stroke}" '
            f'stroke-width="{width}"{dashed}/>'
        )

    def svg(self) -> str:
        return "".join(self.parts) + "</svg>"


@dataclass
class _Axes:
    """A plot area with linear x and y from 0 (or `x_min`) to the last tick."""

    left: float
    top: float
    right: float
    bottom: float
    x_ticks: list[float]
    y_ticks: list[float]
    x_min: float = 0.0

    def x(self, value: float) -> float:
        span = (self.x_ticks[-1] - self.x_min) or 1.0
        return self.left + (value - self.x_min) / span * (self.right - self.left)

    def y(self, value: float) -> float:
        return self.bottom - value / (self.y_ticks[-1] or 1.0) * (self.bottom - self.top)


def _draw_axes(canvas: _Canvas, axes: _Axes, x_label: str, y_label: str, x_unit: str, y_unit: str) -> None:
    """Grid lines, ticks with numbers in the axis unit, and axis titles that name the unit."""
    x_div, x_name = axis_unit(axes.x_ticks[-1], x_unit)
    y_div, y_name = axis_unit(axes.y_ticks[-1], y_unit)
    for tick in axes.y_ticks:
        y = axes.y(tick)
        canvas.line(axes.left, y, axes.right, y, stroke="#e5e7eb")
        canvas.line(axes.left - 4, y, axes.left, y, stroke="#374151")
        canvas.text(axes.left - 7, y + 4, plain_number(tick / y_div), anchor="end")
    for tick in axes.x_ticks:
        x = axes.x(tick)
        canvas.line(x, axes.bottom, x, axes.bottom + 4, stroke="#374151")
        canvas.text(x, axes.bottom + 16, plain_number(tick / x_div), anchor="middle")
    canvas.line(axes.left, axes.top, axes.left, axes.bottom, stroke="#374151")
    canvas.line(axes.left, axes.bottom, axes.right, axes.bottom, stroke="#374151")
    x_title = f"{x_label} ({x_name})" if x_name else x_label
    y_title = f"{y_label} ({y_name})" if y_name else y_label
    canvas.text((axes.left + axes.right) / 2, axes.bottom + 34, x_title, anchor="middle")
    middle = (axes.top + axes.bottom) / 2
    canvas.add(
        f'<text x="14" y="{_f(middle)}" text-anchor="middle" transform="rotate(-90 14 {_f(middle)})" '
        f'fill="#111827">{_text(y_title)}</text>'
    )


def _legend(canvas: _Canvas, entries: Sequence[tuple[str, str]], x: float, y: float) -> None:
    """Colour swatches and labels, one per line, starting at (x, y)."""
    for index, (label, colour) in enumerate(entries):
        row = y + index * 15
        canvas.add(f'<rect x="{_f(x)}" y="{_f(row - 8)}" width="14" height="4" fill="{colour}"/>')
        canvas.text(x + 19, row - 2, label)


def _thin(points: Sequence[tuple[float, float]], columns: int) -> list[tuple[float, float]]:
    """At most two points per pixel column (of points in x order): the lowest and the highest."""
    if len(points) <= 2 * columns:
        return list(points)
    return [points[i] for i in stretch_extremes([y for _, y in points], columns)]


def _polyline(axes: _Axes, points: Sequence[tuple[float, float]], colour: str, width: float = 1.8) -> str:
    coords = " ".join(f"{_f(axes.x(x))},{_f(axes.y(y))}" for x, y in points)
    return f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="{width}" stroke-linejoin="round"/>'


# --- charts ----------------------------------------------------------------------------------------

Series = Mapping[str, Sequence[tuple[Number, Number]]]


def lines(
    series: Series,
    *,
    title: str = "",
    x_label: str = "",
    y_label: str = "",
    x_unit: str = "",
    y_unit: str = "B",
    width: int = 640,
    height: int = 300,
    markers: bool = True,
) -> Plot:
    """Lines through (x, y) points, one per named series, with axes from 0 in the given units."""
    all_points = [p for points in series.values() for p in points]
    axes = _Axes(
        left=70,
        top=34 + 15 * len(series),
        right=width - 20,
        bottom=height - 46,
        x_ticks=nice_ticks(max((float(x) for x, _ in all_points), default=0.0)),
        y_ticks=nice_ticks(max((float(y) for _, y in all_points), default=0.0)),
    )
    canvas = _Canvas(width, height, title)
    _draw_axes(canvas, axes, x_label, y_label, x_unit, y_unit)
    entries, said = [], []
    for index, (label, points) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        points = [(float(x), float(y)) for x, y in points]
        canvas.add(_polyline(axes, _thin(points, int(axes.right - axes.left)), colour))
        if markers and len(points) <= 40:
            for x, y in points:
                canvas.add(f'<circle cx="{_f(axes.x(x))}" cy="{_f(axes.y(y))}" r="3" fill="{colour}"/>')
        entries.append((label, colour))
        if points:
            said.append(f"{label}: {len(points)} points, up to {format_value(max(y for _, y in points), y_unit)}")
    _legend(canvas, entries, axes.left + 8, 34)
    return Plot(canvas.svg(), f"lines ({title or y_label}): " + "; ".join(said))


TimelineSource = BackwardExtraction | Sequence[Mapping]


def _steps(source: TimelineSource) -> list[Mapping]:
    steps: list[Mapping] = []
    steps += source.memory_timeline() if isinstance(source, BackwardExtraction) else source
    return steps


def timeline(
    runs: TimelineSource | Mapping[str, TimelineSource],
    *,
    title: str = "Activation memory over time",
    width: int = 680,
    height: int = 320,
) -> Plot:
    """Bytes alive after each op, forward then backward (`memory_timeline()`: activations, and
    the gradients backward has made so far), one line per run, each run's peak marked and where
    its backward starts.

    `runs`: an extraction, a `memory_timeline()` list, or a mapping from a label to either (several
    partitions of one model overlaid: which has the lowest peak?)."""
    if isinstance(runs, BackwardExtraction) or (isinstance(runs, Sequence) and not isinstance(runs, str)):
        label = runs.label if isinstance(runs, BackwardExtraction) else "run"
        runs = {label: runs}
    series = {label: _steps(source) for label, source in runs.items()}
    saved = {
        label: source.saved_activation_bytes for label, source in runs.items() if isinstance(source, BackwardExtraction)
    }
    longest = max((len(steps) for steps in series.values()), default=0)
    highest = max((s["live_bytes"] for steps in series.values() for s in steps), default=0)
    axes = _Axes(
        left=70,
        top=38 + 15 * len(series),
        right=width - 20,
        bottom=height - 46,
        x_ticks=nice_ticks(max(longest - 1, 1)),
        y_ticks=nice_ticks(highest),
    )
    canvas = _Canvas(width, height, title)
    _draw_axes(canvas, axes, "ops run: forward, then backward", "activations + gradients alive", "", "B")
    entries, said = [], []
    for index, (label, steps) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        if not steps:
            entries.append((f"{label}: no ops", colour))
            continue
        points = [(float(i), float(s["live_bytes"])) for i, s in enumerate(steps)]
        canvas.add(_polyline(axes, _thin(points, int(axes.right - axes.left)), colour))
        switch = next((i for i, s in enumerate(steps) if s["phase"] == "backward"), None)
        if switch is not None:
            x = axes.x(switch - 0.5)
            canvas.line(x, axes.bottom, x, axes.top, stroke=colour, width=1, dash="4 3")
        peak_step = max(range(len(steps)), key=lambda i: (steps[i]["live_bytes"], -i))
        peak = steps[peak_step]["live_bytes"]
        cx, cy = axes.x(peak_step), axes.y(peak)
        canvas.add(f'<circle cx="{_f(cx)}" cy="{_f(cy)}" r="4.5" fill="none" stroke="{colour}" stroke-width="2"/>')
        kept = f"saved {format_value(saved[label], 'B')}, " if label in saved else ""
        entries.append((f"{label}: {kept}peak {format_value(peak, 'B')}", colour))
        said.append(f"{label} peak {format_value(peak, 'B')} at op {peak_step} of {len(steps)}")
    _legend(canvas, entries, axes.left + 8, 38)
    canvas.text(axes.right, axes.top - 6, "dashed: where each backward starts", anchor="end", fill="#4b5563", size=10)
    return Plot(canvas.svg(), "timeline: " + "; ".join(said))


def _sweep_points(sweep: Sweep | Sequence[SweepPoint]) -> list[SweepPoint]:
    return list(sweep.points if isinstance(sweep, Sweep) else sweep)


def pareto(
    sweep: Sweep | Sequence[SweepPoint],
    *,
    x: str = "saved",
    title: str = "",
    width: int = 640,
    height: int = 320,
) -> Plot:
    """Memory against recompute for each budget of a sweep: x is saved activation bytes
    (`x="saved"`) or the peak of the memory timeline (`x="peak"`), y the FLOPs recomputed in
    backward. Points no other point beats on both are joined: the Pareto front."""
    points = _sweep_points(sweep)
    if x not in ("saved", "peak"):
        raise ValueError(f"x must be 'saved' or 'peak', not {x!r}")

    def memory(p: SweepPoint) -> int:
        if x == "saved":
            return p.saved_activation_bytes
        if p.extraction is None:
            raise ValueError("x='peak' needs the sweep's extractions (points made by bw.sweep)")
        return p.extraction.peak_activation_bytes

    coords: dict[tuple[int, int], list[float]] = {}
    for p in points:
        coords.setdefault((memory(p), p.recompute_flops), []).append(p.budget)
    front = [
        c
        for c in coords
        if not any(o != c and o[0] <= c[0] and o[1] <= c[1] for o in coords)  # nothing at least as good on both
    ]
    axes = _Axes(
        left=70,
        top=40,
        right=width - 24,
        bottom=height - 46,
        x_ticks=nice_ticks(max((c[0] for c in coords), default=0)),
        y_ticks=nice_ticks(max((c[1] for c in coords), default=0)),
    )
    memory_label = "saved activation bytes" if x == "saved" else "peak activation memory"
    canvas = _Canvas(width, height, title or f"Recompute against {memory_label}, one point per budget")
    _draw_axes(canvas, axes, memory_label, "recomputed in backward", "B", "FLOP")
    ordered = sorted(front)
    if len(ordered) > 1:
        canvas.add(_polyline(axes, [(float(a), float(b)) for a, b in ordered], COLOURS[0], width=1.5))
    dots = [(axes.x(c[0]), axes.y(c[1])) for c in sorted(coords)]
    labels = ["budget " + ", ".join(plain_number(b) for b in sorted(coords[c])) for c in sorted(coords)]
    for c, (cx, cy) in zip(sorted(coords), dots):
        filled = COLOURS[0] if c in front else "#ffffff"
        canvas.add(
            f'<circle cx="{_f(cx)}" cy="{_f(cy)}" r="4.5" fill="{filled}" stroke="{COLOURS[0]}" stroke-width="1.5"/>'
        )
    inside_plot = (axes.left, 24.0, width - 4.0, axes.bottom + 2)  # not over the title, the y or the x numbers
    for (x_at, y_at, anchor), label in zip(placed_labels(dots, labels, inside_plot), labels):
        canvas.text(x_at, y_at, label, anchor=anchor, size=LABEL_SIZE, fill="#374151")
    summary = "; ".join(
        f"budget {', '.join(plain_number(b) for b in sorted(coords[c]))}: {format_value(c[0], 'B')}, "
        f"{format_value(c[1], 'FLOP')}"
        for c in ordered
    )
    return Plot(canvas.svg(), f"pareto ({memory_label} against recompute FLOPs), front: {summary}")


Values = Mapping[str, Number] | Mapping[str, Mapping[str, Number]]


def _bar_table(values: Values, top: int | None, sort: bool) -> tuple[list[tuple[str, dict[str, Number]]], int]:
    """(name, {series: value}) rows to draw, largest first unless `sort` is off, and how many `top` hides."""
    table = [(name, dict(v) if isinstance(v, Mapping) else {"": v}) for name, v in values.items()]
    for name, row in table:
        for value in row.values():
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"bars got {value!r} for {name!r}: pass finite numbers.")
    if sort:
        table.sort(key=lambda row: -max(row[1].values(), default=0))
    return (table[:top], len(table[top:])) if top is not None else (table, 0)


def _value_axis(canvas: _Canvas, axes: _Axes, unit: str, title: str) -> None:
    """Vertical grid lines and numbers along x, the frame, and the axis title with its unit."""
    x_div, x_name = axis_unit(axes.x_ticks[-1], unit)
    for tick in axes.x_ticks:
        x = axes.x(tick)
        canvas.line(x, axes.top, x, axes.bottom, stroke="#e5e7eb")
        canvas.text(x, axes.bottom + 16, plain_number(tick / x_div), anchor="middle")
    canvas.line(axes.left, axes.top, axes.left, axes.bottom, stroke="#374151")
    canvas.line(axes.left, axes.bottom, axes.right, axes.bottom, stroke="#374151")
    canvas.text(
        (axes.left + axes.right) / 2, axes.bottom + 34, f"{title} ({x_name})" if x_name else title, anchor="middle"
    )


def _bar_group(
    canvas: _Canvas, axes: _Axes, y0: float, row: Mapping[str, Number], series: list[str], unit: str
) -> None:
    """One name's bars, one per series it has, each with its value at its end."""
    for position, key in enumerate(series):
        if key not in row:
            continue
        value, colour, y = row[key], COLOURS[position % len(COLOURS)], y0 + position * BAR
        length = max(axes.x(value) - axes.left, 0.0)
        canvas.add(f'<rect x="{_f(axes.left)}" y="{_f(y)}" width="{_f(length)}" height="{BAR - 3}" fill="{colour}"/>')
        canvas.text(axes.left + length + 4, y + BAR - 5, format_value(value, unit), size=10, fill="#374151")


BAR = 14
"""Height of one bar, in pixels."""


def bars(
    values: Values,
    *,
    title: str = "",
    unit: str = "B",
    label: str = "",
    top: int | None = None,
    sort: bool = True,
    width: int = 640,
) -> Plot:
    """Horizontal bars, one per name, each with its value written at its end.

    `values`: `{name: number}`, or `{name: {series: number}}` for groups of bars (say, saved and
    peak bytes for each partition). `top` keeps the largest names only; `sort=False` keeps the
    mapping's order."""
    grouped = any(isinstance(v, Mapping) for v in values.values())
    table, hidden = _bar_table(values, top, sort)
    series = list(dict.fromkeys(s for _, row in table for s in row))
    names = [name if len(name) <= 40 else name[:39] + "…" for name, _ in table]
    gap = 8
    group_height = BAR * len(series) + gap
    top_edge = 34 + 15 * (len(series) if grouped else 0)
    height = int(top_edge + group_height * len(table) + 52)
    axes = _Axes(
        left=max(60.0, 12 + CHAR_WIDTH * max((len(n) for n in names), default=0)),
        top=top_edge,
        right=width - 90,
        bottom=height - 46,
        x_ticks=nice_ticks(max((v for _, row in table for v in row.values()), default=0)),
        y_ticks=[0.0, 1.0],
    )
    canvas = _Canvas(width, height, title)
    axis_title = label or AXIS_TITLES.get(unit, unit or "value")
    _value_axis(canvas, axes, unit, axis_title)
    said = []
    for index, ((_, row), name) in enumerate(zip(table, names)):
        y0 = axes.top + gap / 2 + index * group_height
        canvas.text(axes.left - 6, y0 + group_height / 2 - 1, name, anchor="end")
        _bar_group(canvas, axes, y0, row, series, unit)
        said.append(f"{name} " + ", ".join(f"{k + ' ' if k else ''}{format_value(v, unit)}" for k, v in row.items()))
    if grouped:
        _legend(canvas, [(s, COLOURS[i % len(COLOURS)]) for i, s in enumerate(series)], axes.left + 8, 34)
    if hidden:
        canvas.text(axes.right, axes.bottom + 34, f"{hidden} smaller not shown", anchor="end", size=10, fill="#4b5563")
    return Plot(canvas.svg(), f"bars ({title or axis_title}): " + "; ".join(said))
