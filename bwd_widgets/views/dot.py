"""The one Graphviz DOT builder for every static output (`bw.to_dot`, `bw.save_svg`, the widget's SVG
fallback), clustered by module.

It writes the same DOT as the browser's js/dot.ts `buildDot` (ids `v<i>` and `c<i>`, no user text in
ids, labels as quoted text, never an HTML-like label), and with `colours` adds the fill colours the
browser's CSS gives otherwise; the contract fixture holds the two equal.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import graphviz

from ..core.errors import BwdWidgetsError
from ..core.text import visible
from ..core.units import format_bytes
from .grouping import VisibleGraph, VisibleNode, parent_of, visible_graph
from .palette import EDGE_COLOURS, NODE_FILLS
from .payload import GraphData, GraphNode, graph_payload

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..extraction.result import BackwardExtraction

COLOURS = NODE_FILLS
"""Node fills for a picture without CSS, by `node_kind` (edges: `EDGE_COLOURS`): views/palette.py, widget.css's
colours over white."""
SHAPE = {
    "saved": 'shape=box, style="filled"',
    "tangent": 'shape=box, style="filled"',
    "gradient": 'shape=box, style="rounded,filled,bold"',
    "op": 'shape=box, style="rounded,filled"',
    "recomputed": 'shape=box, style="rounded,filled,dashed"',
    "group": 'shape=box3d, style="filled"',
}
QUICK_LAYOUT_ABOVE = 150
"""Bigger drawings lay out with Graphviz's effort limits (a large flat graph would not finish)."""


def quote(text: str) -> str:
    """A DOT double-quoted string, read as text: backslashes and quotes escaped, newlines as \\n."""
    escaped = visible(text).replace("\\", "\\\\").replace('"', '\\"')
    return '"' + re.sub(r"\r?\n", r"\\n", escaped) + '"'


def short_dtype(dtype: str) -> str:
    """float32 -> f32, bfloat16 -> bf16, int64 -> i64: labels stay narrow."""
    dtype = re.sub(r"^(b?)float(\d+)$", r"\1f\2", dtype)
    return re.sub(r"^(u?)int(\d+)$", lambda m: ("u" if m.group(1) else "i") + m.group(2), dtype)


def node_label(v: VisibleNode[GraphNode], saved_bytes: Mapping[str, int]) -> str:
    """The label's first line is the node's id (or the module's path): search and tests rely on it."""
    if v.path is not None:
        count = saved_bytes.get(v.path, 0)
        return f"{v.path} \u25b8\n{v.size} nodes" + (f" \u00b7 {format_bytes(count)} saved" if count else "")
    n = v.node
    assert n is not None
    if n["kind"] == "gradient":
        return f"{n['id']}\n\u2207 " + ", ".join(n["grad_of"])
    if n["kind"] in ("saved", "tangent"):
        return f"{n['id']}\n[{', '.join(map(str, n['shape']))}] {short_dtype(n['dtype'])}"
    op = n["op"].removeprefix("aten.")
    return n["id"] if n["id"] == op or n["id"].startswith(op + "_") else f"{n['id']}\n{op}"


def node_kind(v: VisibleNode[GraphNode]) -> str:
    if v.path is not None or v.node is None:
        return "group"
    return "recomputed" if v.node["recomputed"] else v.node["kind"]


def _utf16(text: str) -> bytes:
    return text.encode("utf-16-be")


def cluster_paths(graph: VisibleGraph[GraphNode]) -> list[str]:
    """Every open module drawn as a cluster, in JavaScript's sort order: cluster `c<i>` is the i-th."""
    paths = {path for v in graph.nodes if v.cluster for path in _prefixes(v.cluster)}
    return sorted(paths, key=_utf16)


def _prefixes(path: str) -> list[str]:
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def build_dot(
    graph: VisibleGraph[GraphNode], saved_bytes: Mapping[str, int], rankdir: str = "TB", colours: bool = False
) -> str:
    """The visible graph as DOT: collapsed modules as boxes, open ones as nested clusters. Without
    `colours`, exactly js/dot.ts `buildDot`'s text; with them, fill colours for a picture without CSS."""
    index = {v.id: i for i, v in enumerate(graph.nodes)}
    clusters = cluster_paths(graph)
    children: dict[str, list[str]] = {}
    for path in clusters:
        children.setdefault(parent_of(path), []).append(path)
    limits = "nslimit=1, nslimit1=1, mclimit=0.1, " if len(graph.nodes) > QUICK_LAYOUT_ABOVE else ""
    background = "white" if colours else "transparent"
    lines = [
        "digraph backward {",
        f"  graph [rankdir={rankdir}, newrank=true, {limits}ranksep=0.25, nodesep=0.18, "
        f'fontname="Helvetica", fontsize=11, bgcolor="{background}"];',
        '  node [fontname="Helvetica", fontsize=10, margin="0.08,0.03", height=0.2, fillcolor="white", color="gray"];',
        '  edge [arrowsize=0.5, color="gray"];',
    ]

    def emit(cluster: str, indent: str) -> None:
        for v in (v for v in graph.nodes if v.cluster == cluster):
            i, kind = index[v.id], node_kind(v)
            fill = f', fillcolor="{COLOURS[kind]}"' if colours else ""
            label = quote(node_label(v, saved_bytes))
            lines.append(f'{indent}v{i} [id="v{i}", class="k-{kind}", label={label}, {SHAPE[kind]}{fill}];')
        for child in children.get(cluster, []):
            c = clusters.index(child)
            border = ' color="#90caf9";' if colours else ""
            lines.append(f"{indent}subgraph cluster_{c} {{")
            lines.append(f'{indent}  id="c{c}"; label={quote(child)}; style="rounded";{border}')
            emit(child, indent + "  ")
            lines.append(f"{indent}}}")

    emit("", "  ")
    for k, (start, end) in enumerate(graph.edges):
        attributes = [f'id="e{k}"', *edge_attributes(graph, (start, end))]  # e<k>: graph.edges[k]
        if colours and (start, end) in graph.edge_kinds:
            attributes.append(f'color="{EDGE_COLOURS[graph.edge_kinds[start, end]]}"')
        lines.append(f"  v{index[start]} -> v{index[end]} [{', '.join(attributes)}];")
    lines.append("}")
    return "\n".join(lines)


def edge_attributes(graph: VisibleGraph[GraphNode], edge: tuple[str, str]) -> list[str]:
    """An edge's DOT attributes (js/dot.ts `edgeAttributes`' twin): saved values do not rank the layout
    when read out of a collapsed module, nor do recomputed ones; saved-value reads are dashed, recomputed
    ones dotted, and each kind has its CSS class."""
    attributes = ["constraint=false"] if edge in graph.saved_only else []
    kind = graph.edge_kinds.get(edge)
    if kind == "saved":
        attributes += ['class="e-saved"', 'style="dashed"']
    elif kind == "recomputed":
        attributes += ['class="e-recomputed"', 'style="dotted"']
    elif kind == "gradient":
        attributes.append('class="e-gradient"')
    return attributes


def saved_bytes_under(data: GraphData) -> dict[str, int]:
    """Saved activation bytes of the partition inside each module path (the payload's module tree)."""
    return {row["path"]: row["saved_bytes"] for row in data["views"]["modules"] if row["path"]}


def payload_dot(data: GraphData, expanded: set[str], colours: bool = True, rankdir: str = "TB") -> str:
    """The DOT of a payload's graph with `expanded` open, laid out `rankdir` (TB or LR)."""
    graph = visible_graph(data["nodes"], data["edges"], expanded)
    return build_dot(graph, saved_bytes_under(data), rankdir=rankdir, colours=colours)


def to_dot(extraction: BackwardExtraction, graph_index: int = 0) -> str:
    """The backward graph as Graphviz DOT text, every module open."""
    data = graph_payload(extraction, graph_index)
    return payload_dot(data, {row["path"] for row in data["views"]["modules"] if row["path"]})


def existing_folder_for(path: str | Path) -> Path:
    """The path to write, once its folder is known to exist (a missing one is one sentence, not OSError)."""
    path = Path(path)
    if not path.parent.is_dir():
        raise BwdWidgetsError(f"the folder {str(path.parent)!r} does not exist: create it first, or write elsewhere.")
    return path


def save_svg(extraction: BackwardExtraction, path: str | Path, graph_index: int = 0) -> Path:
    """A static SVG through Graphviz's `dot` program (apt install graphviz)."""
    if shutil.which("dot") is None:
        raise BwdWidgetsError(
            "Graphviz's dot program is not installed: install it (apt install graphviz), "
            "or use bw.to_html(extraction, path), which lays out in the browser."
        )
    path = existing_folder_for(path)
    path.write_bytes(graphviz.Source(to_dot(extraction, graph_index)).pipe(format="svg"))
    return path
