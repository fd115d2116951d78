"""The static picture a saved notebook keeps beside the widget: an SVG of the first view and the
headline numbers, for GitHub, nbviewer and anywhere else the widget cannot run.

The first view follows the widget's rule (js/grouping.ts `firstViews`, js/firstview.ts): modules open
level by level while at most FIRST_VIEW_LIMIT nodes are drawn, the most detailed one whose drawing is
readable in a graph pane of NOMINAL_PANE pixels, else all modules collapsed. Laid out by Graphviz's
`dot` program; without it, the numbers alone.
"""

from __future__ import annotations

import html
import re
import shutil
from collections.abc import Iterable

import graphviz

from .dot import COLOURS, _text
from .payload import GraphData, GraphNode

FIRST_VIEW_LIMIT = 40
NOMINAL_PANE = (860.0, 560.0)
READABLE_SCALE = 9.5 / 11.5
"""Pixels per point at which 10 pt labels (11.5 pt with their line box) are 9.5 px high."""
MAX_BYTES = 100_000
GROUP = "group:"


def _ancestors(path: str) -> list[str]:
    parts = path.split(".") if path else []
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _representative(node: GraphNode, expanded: set[str]) -> str:
    for path in _ancestors(node["module"]):
        if path not in expanded:
            return GROUP + path
    return node["id"]


def first_views(nodes: list[GraphNode], limit: int = FIRST_VIEW_LIMIT) -> list[set[str]]:
    """Open modules to depth d for each d whose view draws at most `limit` nodes, most detailed
    first, ending with every module collapsed."""
    paths = {p for n in nodes for p in _ancestors(n["module"])}
    deepest = max((len(_ancestors(p)) for p in paths), default=0)
    views = []
    for depth in range(deepest, -1, -1):
        expanded = {p for p in paths if len(_ancestors(p)) <= depth}
        if depth == 0 or len({_representative(n, expanded) for n in nodes}) <= limit:
            views.append(expanded)
    return views


def _dot(data: GraphData, expanded: set[str]) -> str:
    """The collapsed graph as DOT: groups as boxes, open modules as clusters, labels as text."""
    dot = graphviz.Digraph(
        "backward", graph_attr={"rankdir": "TB", "newrank": "true", "ranksep": "0.25", "nodesep": "0.18"}
    )
    dot.attr(
        "node",
        fontname="Helvetica",
        fontsize="10",
        shape="box",
        style="rounded,filled",
        margin="0.08,0.03",
        height="0.2",
    )
    dot.attr("edge", arrowsize="0.5", color="#9e9e9e")
    clusters: dict[str, graphviz.Digraph] = {}
    sizes: dict[str, int] = {}
    owner: dict[str, str] = {}
    drawn: dict[str, GraphNode | None] = {}
    for node in data["nodes"]:
        shown = _representative(node, expanded)
        owner[node["id"]] = shown
        if shown.startswith(GROUP):
            sizes[shown] = sizes.get(shown, 0) + 1
            drawn.setdefault(shown, None)
        else:
            drawn[shown] = node
    ids = {shown: f"n{i}" for i, shown in enumerate(drawn)}  # no user text in ids (a `:` would be a port)
    for shown, node in drawn.items():
        module = node["module"] if node is not None else shown[len(GROUP) :].rpartition(".")[0]
        target = clusters.setdefault(module, graphviz.Digraph(f"cluster_{len(clusters)}")) if module else dot
        if node is None:
            label, colour = f"{shown[len(GROUP) :]} \u25b8\n{sizes[shown]} nodes", "#d7eef3"
        else:
            label, colour = "\n".join(_label_lines(node)), COLOURS[node["kind"]]
        target.node(ids[shown], label=_text(label), fillcolor=colour)
    for module, cluster in clusters.items():
        cluster.attr(label=_text(module), style="rounded", color="#90caf9", fontname="Helvetica", fontsize="11")
        dot.subgraph(cluster)
    seen = set()
    for source, target in data["edges"]:
        edge = (owner.get(source), owner.get(target))
        if None not in edge and edge[0] != edge[1] and edge not in seen:
            seen.add(edge)
            dot.edge(ids[edge[0]], ids[edge[1]])
    return dot.source


def _label_lines(node: GraphNode) -> Iterable[str]:
    yield node["id"]
    if node["kind"] == "gradient":
        yield "\u2207 " + ", ".join(node["grad_of"])
    elif node["kind"] in ("saved", "tangent"):
        yield f"{list(node['shape'])} {node['dtype']}"
    elif not node["id"].startswith(node["op"].removeprefix("aten.")):
        yield node["op"].removeprefix("aten.")


def _size(svg: str) -> tuple[float, float]:
    match = re.search(r'viewBox="[\d.-]+ [\d.-]+ ([\d.]+) ([\d.]+)"', svg)
    return (float(match.group(1)), float(match.group(2))) if match else (1.0, 1.0)


def first_view_svg(data: GraphData) -> str | None:
    """Graphviz's SVG of the first view, or None without `dot`."""
    if shutil.which("dot") is None:
        return None
    best = None
    for expanded in first_views(data["nodes"]):
        svg = graphviz.Source(_dot(data, expanded)).pipe(format="svg").decode()
        width, height = _size(svg)
        best = svg
        if min(NOMINAL_PANE[0] / width, NOMINAL_PANE[1] / height) >= READABLE_SCALE:
            break
    return best


def _bytes(count: int) -> str:
    value, unit = float(count), 0
    units = ["B", "KB", "MB", "GB", "TB"]
    while value >= 1000 and unit < len(units) - 1:
        value /= 1000
        unit += 1
    return f"{int(value)} B" if unit == 0 else f"{value:.{0 if value >= 100 else 1}f} {units[unit]}"


def headline(data: GraphData) -> list[str]:
    """The numbers a reader wants first, one line each."""
    totals, peak = data["totals"], data["memory"]["peak"]
    budget = f" (budget {data['memory_budget']})" if data["memory_budget"] is not None else ""
    where = f" in {peak['module']}" if peak["module"] else ""
    return [
        f"{data['model']} \u00b7 {data['partitioner']}{budget} \u00b7 {data['mode']} \u00b7 {len(data['nodes'])} backward nodes",
        f"saved {totals['saved']} values \u00b7 activations {_bytes(totals['saved_activation_bytes'])} \u00b7 "
        f"parameters/inputs {_bytes(totals['saved_input_bytes'])} \u00b7 recomputed {totals['recomputed']}",
        f"peak activation memory {_bytes(peak['live_bytes'])} after {peak['node']}{where} ({peak['phase']})",
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
    width = max(width, 640.0)
    text = "".join(
        f'<text x="8" y="{18 * (i + 1)}" font-family="Helvetica,sans-serif" font-size="13"{BOLD if i == 0 else ""}>'
        f"{html.escape(line)}</text>"
        for i, line in enumerate(lines)
    )
    size = f'width="{width:.0f}" height="{top + height:.0f}" viewBox="0 0 {width:.0f} {top + height:.0f}"'
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" {size}><rect width="100%" height="100%" fill="white"/>{text}{inner}</svg>'
    if len(svg.encode()) > MAX_BYTES and graph is not None:
        return fallback_svg(data, with_graph=False)
    return svg


BOLD = ' font-weight="bold"'
