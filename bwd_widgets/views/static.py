"""The static picture a saved notebook keeps beside the widget: an SVG of the first view and the
headline numbers, for GitHub, nbviewer and anywhere else the widget cannot run.

The first view is the widget's: the payload's first-view candidates (views/grouping.py), the most
detailed one whose drawing is readable in a graph pane of NOMINAL_PANE pixels, drawn by the one DOT
builder (views/dot.py) and laid out by Graphviz's `dot` program; without it, the numbers alone.
"""

from __future__ import annotations

import html
import re
import shutil

import graphviz

from ..core.text import visible
from .dot import format_bytes, payload_dot
from .payload import GraphData

NOMINAL_PANE = (860.0, 560.0)
MAX_BYTES = 100_000
TEXT_CHAR_WIDTH = 7.0
"""About the width of one character of the 13 px headline, so that no line is cut off."""


def _size(svg: str) -> tuple[float, float]:
    match = re.search(r'viewBox="[\d.-]+ [\d.-]+ ([\d.]+) ([\d.]+)"', svg)
    return (float(match.group(1)), float(match.group(2))) if match else (1.0, 1.0)


def first_view_svg(data: GraphData) -> str | None:
    """Graphviz's SVG of the first view, or None without `dot`."""
    if shutil.which("dot") is None:
        return None
    views = data["views"]
    readable = views["min_label_px"] / views["label_units"]
    best = None
    for expanded in views["first"]:
        svg = graphviz.Source(payload_dot(data, set(expanded))).pipe(format="svg").decode()
        width, height = _size(svg)
        best = svg
        if min(NOMINAL_PANE[0] / width, NOMINAL_PANE[1] / height) >= readable:
            break
    return best


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


def fallback_svg(data: GraphData, with_graph: bool = True) -> str:
    """One SVG: the headline numbers above the first view of the graph, under MAX_BYTES."""
    lines = headline(data)
    graph = first_view_svg(data) if with_graph else None
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
