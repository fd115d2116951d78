"""Static Graphviz DOT and SVG of a backward graph, clustered by module.

Kernel text (module and node names) goes into labels as plain text: never an HTML-like label.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import graphviz

from ..core.errors import BwdWidgetsError
from ..extraction import BackwardExtraction
from .payload import graph_payload

COLOURS = {"saved": "#fde68a", "tangent": "#bfdbfe", "gradient": "#bbf7d0", "op": "#f3f4f6"}


def _text(value: str) -> str:
    """A DOT label that Graphviz reads as text: backslashes kept, `<...>` never taken as HTML."""
    return graphviz.nohtml(value.replace("\\", "\\\\"))


def to_dot(extraction: BackwardExtraction, graph_index: int = 0) -> str:
    """The backward graph as Graphviz DOT text."""
    payload = graph_payload(extraction, graph_index)
    dot = graphviz.Digraph("backward", graph_attr={"rankdir": "TB", "nslimit": "1", "nslimit1": "1", "mclimit": "0.1"})
    clusters: dict[str, graphviz.Digraph] = {}
    for node in payload["nodes"]:
        module = node["module"]
        target = clusters.setdefault(module, graphviz.Digraph(f"cluster_{len(clusters)}")) if module else dot
        lines = [node["id"]] if node["kind"] != "op" else [node["id"], node["op"]]
        if node["grad_of"]:
            lines.append("grad of " + ", ".join(node["grad_of"]))
        target.node(
            _text(node["id"]),
            label=_text("\n".join(lines)),
            shape="box",
            style="rounded,filled",
            fillcolor=COLOURS[node["kind"]],
        )
    for module, cluster in clusters.items():
        cluster.attr(label=_text(module))
        dot.subgraph(cluster)
    for source, target in payload["edges"]:
        dot.edge(_text(source), _text(target))
    return dot.source


def save_svg(extraction: BackwardExtraction, path: str | Path, graph_index: int = 0) -> Path:
    """A static SVG through Graphviz's `dot` program (apt install graphviz)."""
    if shutil.which("dot") is None:
        raise BwdWidgetsError(
            "Graphviz's dot program is not installed: install it (apt install graphviz), "
            "or use bw.to_html(extraction, path), which lays out in the browser."
        )
    path = Path(path)
    path.write_bytes(graphviz.Source(to_dot(extraction, graph_index)).pipe(format="svg"))
    return path
