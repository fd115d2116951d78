"""The static picture a saved notebook keeps beside the widget: an SVG of the first view and the
headline numbers, for GitHub, nbviewer and anywhere else the widget cannot run.

The first view is the widget's: the payload's first-view candidates (views/grouping.py), chosen by the
widget's rules (js/firstview.ts: the most detailed drawing that is readable and fills a graph pane of
NOMINAL_PANE pixels, a small one tried left to right too), drawn by the one DOT builder (views/dot.py)
and laid out by Graphviz's `dot` program; without it, the numbers alone.
"""

from __future__ import annotations

import html
import re
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

import graphviz

from ..core.text import visible
from .dot import format_bytes, payload_dot
from .grouping import visible_graph

if TYPE_CHECKING:
    from .payload import GraphData

NOMINAL_PANE = (860.0, 560.0)
MAX_BYTES = 100_000
TEXT_CHAR_WIDTH = 7.0
"""About the width of one character of the 13 px headline, so that no line is cut off."""


def _size(svg: str) -> tuple[float, float]:
    match = re.search(r'viewBox="[\d.-]+ [\d.-]+ ([\d.]+) ([\d.]+)"', svg)
    return (float(match.group(1)), float(match.group(2))) if match else (1.0, 1.0)


MAX_SCALE = 2.0
MIN_SPAN = 0.66
TRY_ACROSS_BELOW = 40
MIN_GLYPH_SCALE = 9 / 10
"""js/firstview.ts and js/panzoom.ts's rules (MAX_SCALE, MIN_SPAN, TRY_ACROSS_BELOW, glyphs of the 10-unit
labels at 9 px), so that the static picture is the drawing the widget opens with."""


@dataclass(frozen=True)
class Drawing:
    svg: str
    rankdir: str
    scale: float
    readable: bool
    span: float
    width: float
    """On screen in the nominal pane, in pixels: the width the widget first draws it at."""

    @property
    def good(self) -> bool:
        return self.readable and self.span >= MIN_SPAN

    def rank(self) -> tuple[bool, bool, float]:
        return (self.good, self.readable, self.span)


def _drawing(data: GraphData, expanded: set[str], rankdir: str, min_scale: float) -> Drawing:
    svg = graphviz.Source(payload_dot(data, expanded, rankdir=rankdir)).pipe(format="svg").decode()
    width, height = _size(svg)
    pane_w, pane_h = NOMINAL_PANE
    scale = min(pane_w / width, pane_h / height, MAX_SCALE)
    span = max(width * scale / pane_w, height * scale / pane_h)
    return Drawing(svg, rankdir, scale, scale >= min_scale, span, width * scale)


def _best_drawing(data: GraphData, expanded: set[str], min_scale: float) -> Drawing:
    """js/firstview.ts `bestDrawing`: top to bottom, and left to right for a small drawing that is not
    good downwards, kept only when it is good."""
    down = _drawing(data, expanded, "TB", min_scale)
    nodes = len(visible_graph(data["nodes"], data["edges"], expanded).nodes)
    if down.good or nodes >= TRY_ACROSS_BELOW:
        return down
    across = _drawing(data, expanded, "LR", min_scale)
    return across if across.good else down


def first_view(data: GraphData) -> Drawing | None:
    """The widget's first view (js/firstview.ts `chooseFirstView`): the first candidate whose drawing is
    good in a NOMINAL_PANE pane, else the best of them; None without Graphviz's `dot`."""
    if shutil.which("dot") is None:
        return None
    views = data["views"]
    min_scale = max(views["min_label_px"] / views["label_units"], MIN_GLYPH_SCALE)
    best: Drawing | None = None
    for expanded in views["first"]:
        drawing = _best_drawing(data, set(expanded), min_scale)
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
        f"{data['model']} \u00b7 {data['partitioner']}{budget} \u00b7 {data['mode']}",
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
