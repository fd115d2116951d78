"""The static picture a saved notebook keeps beside the widget: an SVG of the first view and the
headline numbers, for GitHub, nbviewer and anywhere else the widget cannot run.

The first view is the widget's: the payload's first-view candidates (views/grouping.py), chosen by the
widget's rules (js/firstview.ts: the most detailed drawing that is readable and fills a graph pane of
NOMINAL_PANE pixels, a small one tried left to right too) with the figures the payload's `views` carries
(the scale limit, the span, readable labels: written once, in views/grouping.py, for both), drawn by the
one DOT builder (views/dot.py) and laid out by Graphviz's `dot` program; without it, the numbers alone.
"""

from __future__ import annotations

import html
import re
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

import graphviz

from ..core.text import visible
from ..core.units import format_bytes
from .dot import payload_dot
from .grouping import visible_graph

if TYPE_CHECKING:
    from .grouping import Views
    from .payload import GraphData

NOMINAL_PANE = (860.0, 560.0)
MAX_BYTES = 100_000
TEXT_CHAR_WIDTH = 7.0
"""About the width of one character of the 13 px headline, so that no line is cut off."""


def _size(svg: str) -> tuple[float, float]:
    match = re.search(r'viewBox="[\d.-]+ [\d.-]+ ([\d.]+) ([\d.]+)"', svg)
    return (float(match.group(1)), float(match.group(2))) if match else (1.0, 1.0)


@dataclass(frozen=True)
class Drawing:
    svg: str
    rankdir: str
    scale: float
    readable: bool
    span: float
    width: float
    """On screen in the nominal pane, in pixels: the width the widget first draws it at."""
    good: bool
    """Readable, and spanning the payload's `views.min_span` of the pane."""

    def rank(self) -> tuple[bool, bool, float]:
        return (self.good, self.readable, self.span)


def min_scale(views: Views) -> float:
    """js/firstview.ts `minScaleOf`: labels' line boxes at `min_label_px`, their glyphs at `min_glyph_px`."""
    return max(views["min_label_px"] / views["label_units"], views["min_glyph_px"] / views["label_font_units"])


def _drawing(data: GraphData, expanded: set[str], rankdir: str) -> Drawing:
    """js/firstview.ts `fitOf`, in a NOMINAL_PANE pane, by the payload's figures."""
    views = data["views"]
    svg = graphviz.Source(payload_dot(data, expanded, rankdir=rankdir)).pipe(format="svg").decode()
    width, height = _size(svg)
    pane_w, pane_h = NOMINAL_PANE
    scale = min(pane_w / width, pane_h / height, views["max_scale"])
    span = max(width * scale / pane_w, height * scale / pane_h)
    readable = scale >= min_scale(views)
    return Drawing(svg, rankdir, scale, readable, span, width * scale, readable and span >= views["min_span"])


def _best_drawing(data: GraphData, expanded: set[str]) -> Drawing:
    """js/firstview.ts `bestDrawing`: top to bottom, and left to right for a small drawing that is not
    good downwards, kept only when it is good."""
    down = _drawing(data, expanded, "TB")
    nodes = len(visible_graph(data["nodes"], data["edges"], expanded).nodes)
    if down.good or nodes >= data["views"]["try_across_below"]:
        return down
    across = _drawing(data, expanded, "LR")
    return across if across.good else down


def first_view(data: GraphData) -> Drawing | None:
    """The widget's first view (js/firstview.ts `chooseFirstView`): the first candidate whose drawing is
    good in a NOMINAL_PANE pane, else the best of them; None without Graphviz's `dot`."""
    if shutil.which("dot") is None:
        return None
    best: Drawing | None = None
    for expanded in data["views"]["first"]:
        drawing = _best_drawing(data, set(expanded))
        if drawing.good:
            return drawing
        if best is None or drawing.rank() > best.rank():
            best = drawing
    return best


def first_view_svg(data: GraphData) -> str | None:
    """Graphviz's SVG of the first view, or None without `dot`."""
    drawing = first_view(data)
    return None if drawing is None else drawing.svg


def headline(data: GraphData) -> list[str]:
    """The numbers a reader wants first, one line each, each saying what it counts: this compiled
    region, or the whole run."""
    part, run = data["partition"], data["run"]
    peak = run["memory"]["peak"]
    budget = f" (budget {data['memory_budget']})" if data["memory_budget"] is not None else ""
    where = f" in {peak['module']}" if peak["module"] else ""
    region = f"graph {data['graph_index'] + 1} of {data['graph_count']}"
    return [
        f"{data['model']} \u00b7 {data['partitioner']}{budget} \u00b7 {data['mode']} \u00b7 {data['backend']}",
        f"this compiled region ({region}): {part['backward_nodes']} backward nodes \u00b7 saved {part['saved']} values "
        f"\u00b7 activations {format_bytes(part['saved_activation_bytes'])} \u00b7 "
        f"parameters/inputs {format_bytes(part['saved_input_bytes'])} \u00b7 recomputed {part['recomputed']}",
        f"whole run: peak activation memory {format_bytes(peak['live_bytes'])} after {peak['node']}{where} "
        f"({peak['phase']}) \u00b7 saved activations {format_bytes(run['saved_activation_bytes'])}",
    ]


def fallback_svg(data: GraphData, with_graph: bool = True, drawing: Drawing | None = None) -> str:
    """One SVG: the headline numbers above the first view of the graph (`drawing`, else laid out
    here), under MAX_BYTES."""
    lines = headline(data)
    graph = (drawing.svg if drawing is not None else first_view_svg(data)) if with_graph else None
    if graph is None:
        lines.append("(the interactive widget draws the graph; it runs in JupyterLab and Notebook 7)")
    top = 18 * len(lines) + 14
    inner = ""
    width, height = 640.0, 0.0
    if graph is not None:
        width, height = _size(graph)
        inner = re.sub(r"<!--.*?-->", "", graph[graph.index("<svg") :], flags=re.S)
        placed = f'<svg x="0" y="{top}" width="{width}" height="{height}"'
        inner = re.sub(r'<svg width="[^"]*" height="[^"]*"', placed, inner, count=1)
    width = max(width, 640.0, TEXT_CHAR_WIDTH * max(len(line) for line in lines) + 16)
    text = "".join(
        f'<text x="8" y="{18 * (i + 1)}" font-family="Helvetica,sans-serif" font-size="13"{BOLD if i == 0 else ""}>'
        f"{html.escape(visible(line))}</text>"
        for i, line in enumerate(lines)
    )
    size = f'width="{width:.0f}" height="{top + height:.0f}" viewBox="0 0 {width:.0f} {top + height:.0f}"'
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" {size}><rect width="100%" height="100%" fill="white"/>{text}{inner}</svg>'
    if len(svg.encode()) > MAX_BYTES and graph is not None:
        return fallback_svg(data, with_graph=False)
    return svg


BOLD = ' font-weight="bold"'
