"""The JSON the widget and the HTML export draw: nodes, edges, saved tensors, code.

Pure torch and fx: no IPython, no ipywidgets.
"""

from __future__ import annotations

import re

import torch.fx

from ._analysis import node_module, op_name, tensor_info

ARGS_TEXT_LIMIT = 240


def _arg_text(value) -> str:
    if isinstance(value, torch.fx.Node):
        return value.name
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_arg_text(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    return repr(value)


def _code_lines(code: str) -> dict:
    """Line (1-based) of each node's definition in the generated code."""
    lines = {}
    for number, line in enumerate(code.splitlines(), start=1):
        match = re.match(r"\s+(\w+) = ", line)
        if match and match.group(1) not in lines:
            lines[match.group(1)] = number
        if line.lstrip().startswith("def forward("):
            for name in re.findall(r"\b(\w+)\b", line.split("(", 1)[1]):
                lines.setdefault(name, number)
    return lines


def graph_payload(extraction, graph_index: int = 0, previous=None) -> dict:
    """Everything the front end shows for one graph pair of an extraction.

    With `previous` (the partition shown before), it also says what changed.
    """
    pair = extraction.graphs[graph_index]
    backward = pair.backward
    saved = {s.name: s for s in pair.saved_tensors}
    gradients = {}
    for gradient in pair.gradients:
        gradients.setdefault(gradient.name, []).append(gradient.grad_of)
    code = pair.backward_code
    lines = _code_lines(code)
    nodes, edges = [], []
    for node in backward.graph.nodes:
        if node.op == "output":
            continue
        info = tensor_info(node.name, node.meta.get("val"))
        if node.op == "placeholder":
            kind = "tangent" if node.name.startswith("tangents_") else "saved"
            op = "placeholder"
        else:
            kind = "gradient" if node.name in gradients else "op"
            op = op_name(node)
        entry = saved.get(node.name)
        module = entry.module if entry is not None else node_module(node, pair.inputs)
        nodes.append({
            "id": node.name,
            "op": op,
            "kind": kind,
            "module": module or "",
            "shape": list(info.shape),
            "dtype": info.dtype.replace("torch.", ""),
            "args": ", ".join(_arg_text(a) for a in node.args)[:ARGS_TEXT_LIMIT],
            "source": _source(node, entry),
            "line": lines.get(node.name, 0),
            "grad_of": gradients.get(node.name, []),
            "saved_kind": entry.kind if entry is not None else "",
            "recomputed": node.meta.get("partitioner_tag") == "is_forward" and node.op == "call_function",
        })
        edges.extend([arg.name, node.name] for arg in node.all_input_nodes)
    summary = extraction.summary()
    return {
        "model": extraction.model_name,
        "partitioner": extraction.partitioner,
        "memory_budget": extraction.memory_budget,
        "mode": extraction.mode,
        "graph_index": graph_index,
        "graph_count": len(extraction.graphs),
        "nodes": nodes,
        "edges": edges,
        "saved": [saved_row(s) for s in pair.saved_tensors],
        "totals": {
            "saved": len(pair.saved_tensors),
            "saved_activation_bytes": pair.saved_activation_bytes,
            "saved_input_bytes": pair.saved_input_bytes,
            "recomputed": len(pair.recomputed),
            "all_graphs_saved": summary["saved"],
            "all_graphs_activation_bytes": summary["saved_activation_bytes"],
        },
        "code": {"backward": code, "forward": pair.forward_code},
        "notes": list(extraction.notes),
        "diff": _diff(previous, extraction),
    }


def _diff(previous, extraction) -> dict:
    from ._studio import diff_payload

    if previous is None or previous is extraction:
        return {"against": "", "recomputed_now": [], "recomputed_rows": [], "newly_saved": []}
    return diff_payload(previous, extraction)


def _source(node, entry) -> str:
    from ._naming import source_line

    if entry is not None and entry.source_line:
        return entry.source_line
    return source_line(node.meta.get("stack_trace")) or ""


def saved_row(saved) -> dict:
    return {
        "name": saved.name,
        "kind": saved.kind,
        "source": saved.source or "",
        "shape": list(saved.shape),
        "dtype": saved.dtype.replace("torch.", ""),
        "bytes": saved.bytes,
        "activation_bytes": saved.activation_bytes,
        "producer": saved.producer or "",
        "module": saved.module or "",
        "alias_of": saved.alias_of or "",
        "storage_op": saved.storage_op or "",
        "why": saved.why,
    }


def to_dot(extraction, graph_index: int = 0) -> str:
    """The backward graph as Graphviz DOT, clustered by module (python `graphviz` package)."""
    import graphviz

    payload = graph_payload(extraction, graph_index)
    dot = graphviz.Digraph("backward", graph_attr={"rankdir": "TB", "nslimit": "1", "nslimit1": "1", "mclimit": "0.1"})
    colours = {"saved": "#fde68a", "tangent": "#bfdbfe", "gradient": "#bbf7d0", "op": "#f3f4f6"}
    clusters = {}
    for node in payload["nodes"]:
        target = clusters.setdefault(node["module"], graphviz.Digraph(f"cluster_{node['module']}")) if node["module"] else dot
        label = node["id"] if node["kind"] != "op" else f"{node['id']}\n{node['op']}"
        if node["grad_of"]:
            label += "\ngrad of " + ", ".join(node["grad_of"])
        target.node(node["id"], label=label, shape="box", style="rounded,filled", fillcolor=colours[node["kind"]])
    for module, cluster in clusters.items():
        cluster.attr(label=module)
        dot.subgraph(cluster)
    for source, target in payload["edges"]:
        dot.edge(source, target)
    return dot.source


def save_svg(extraction, path, graph_index: int = 0):
    import shutil
    from pathlib import Path

    import graphviz

    from ._errors import BwdWidgetsError

    if shutil.which("dot") is None:
        raise BwdWidgetsError(
            "Graphviz's dot program is not installed: install it (apt install graphviz), "
            "or use extraction.to_html(path), which lays out in the browser."
        )
    path = Path(path)
    path.write_bytes(graphviz.Source(to_dot(extraction, graph_index)).pipe(format="svg"))
    return path
