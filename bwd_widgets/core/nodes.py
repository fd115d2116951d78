"""The table of backward nodes: one row per node of a partition's backward graph, with everything a view
shows about it (kind, module, source line, code line, bytes, why it is saved).

Every classification of backward nodes is made here, once; the payload only serialises the rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch.fx

from .analysis import SavedTensor, node_module, op_name, tensor_info
from .kinds import NodeKind, SavedKind, is_tangent
from .naming import source_line
from .why import why_recomputed

if TYPE_CHECKING:
    from .trace import Partition

ARGS_TEXT_LIMIT = 240


@dataclass(frozen=True)
class BackwardNode:
    """One node of a backward graph, as the views show it."""

    name: str
    op: str
    """`placeholder`, or the op (`aten.mm`, `aten.native_batch_norm[1]`)."""
    kind: NodeKind
    module: str
    """The forward module it belongs to ("" for none); ops no module owns take their neighbours'."""
    shape: tuple[int, ...]
    dtype: str
    """Without the `torch.` prefix."""
    args: str
    """Its arguments as text, at most ARGS_TEXT_LIMIT characters."""
    source_line: str
    """The user's source line it comes from ("" if unknown)."""
    code_line: int
    """1-based line of its definition in the backward code, 0 if none."""
    grad_of: tuple[str, ...]
    """For a gradient: the inputs or parameters it is the gradient of."""
    saved_kind: SavedKind | Literal[""]
    """For a saved value, what it is; "" for any other node."""
    recomputed: bool
    """A forward op the partitioner placed in backward to recompute it."""
    bytes: int
    """Bytes of the tensor it computes (0 for tuples and symbols)."""
    why: str
    """For a saved value, why it is saved; for a recomputed one, why it is recomputed: torch's reason, in one sentence."""
    inputs: tuple[str, ...]
    """The nodes it reads: the graph's edges end here."""


def backward_nodes(partition: Partition) -> list[BackwardNode]:
    """The rows of `partition.backward`, in graph order (the output node left out)."""
    saved = {s.name: s for s in partition.saved_tensors}
    gradients: dict[str, list[str]] = {}
    for gradient in partition.gradients:
        gradients.setdefault(gradient.name, []).append(gradient.grad_of)
    lines = definition_lines(partition.backward_code)
    recomputed = {name for name, _ in partition.recomputed}
    joint_nodes = {n.name: n for n in partition.joint.graph.nodes}
    in_forward = {n.name for n in partition.forward.graph.nodes}
    recomputed_why = {
        name: why_recomputed(name, partition.partitioner, joint_nodes, partition.decisions, name in in_forward)
        for name in recomputed
    }
    nodes = [n for n in partition.backward.graph.nodes if n.op != "output"]
    modules = _modules(nodes, saved, partition)
    rows = []
    for node in nodes:
        info = tensor_info(node.name, node.meta.get("val"))
        entry = saved.get(node.name)
        rows.append(
            BackwardNode(
                name=node.name,
                op="placeholder" if node.op == "placeholder" else op_name(node),
                kind=_kind(node, gradients),
                module=modules[node.name],
                shape=tuple(info.shape),
                dtype=info.dtype.replace("torch.", ""),
                args=", ".join(_arg_text(a) for a in node.args)[:ARGS_TEXT_LIMIT],
                source_line=_source(node, entry),
                code_line=lines.get(node.name, 0),
                grad_of=tuple(gradients.get(node.name, [])),
                saved_kind=entry.kind if entry is not None else "",
                recomputed=node.name in recomputed,
                bytes=info.bytes,
                why=entry.why if entry is not None else recomputed_why.get(node.name, ""),
                inputs=tuple(arg.name for arg in node.all_input_nodes),
            )
        )
    return rows


def _kind(node: torch.fx.Node, gradients: dict[str, list[str]]) -> NodeKind:
    if node.op == "placeholder":
        return "tangent" if is_tangent(node.name) else "saved"
    return "gradient" if node.name in gradients else "op"


def _modules(nodes: list[torch.fx.Node], saved: dict[str, SavedTensor], partition: Partition) -> dict[str, str]:
    own = {}
    for node in nodes:
        entry = saved.get(node.name)
        own[node.name] = (entry.module if entry is not None else node_module(node, partition.inputs)) or ""
    unowned = [n.name for n in nodes if not own[n.name] and n.op != "placeholder"]
    edges = [(arg.name, node.name) for node in nodes for arg in node.all_input_nodes]
    return place_unowned(own, unowned, edges)


def place_unowned(modules: dict[str, str], unowned: list[str], edges: list[tuple[str, str]]) -> dict[str, str]:
    """Backward ops no forward module owns (the gradient sums of residual connections) go in the
    innermost module their neighbours share, so that a collapsed module hides them with the rest.

    Two sweeps, in graph order and back, so that a run of such ops takes its module from both ends."""
    result = dict(modules)
    neighbours: dict[str, list[str]] = {}
    for source, target in edges:
        neighbours.setdefault(source, []).append(target)
        neighbours.setdefault(target, []).append(source)
    for sweep in (unowned, unowned[::-1]):
        for name in sweep:
            around = [result[m] for m in neighbours.get(name, []) if result.get(m)]
            if around:
                result[name] = common_module(around)
    return result


def common_module(paths: list[str]) -> str:
    """The innermost module path that every one of `paths` is inside ("" for none)."""
    shared = []
    for segments in zip(*(path.split(".") for path in paths)):
        if len(set(segments)) > 1:
            break
        shared.append(segments[0])
    return ".".join(shared)


def definition_lines(code: str) -> dict[str, int]:
    """Line (1-based) of each node's definition in generated fx code; the arguments of `forward` are
    defined on its `def` line."""
    lines: dict[str, int] = {}
    for number, line in enumerate(code.splitlines(), start=1):
        match = re.match(r"\s+(\w+) = ", line)
        if match and match.group(1) not in lines:
            lines[match.group(1)] = number
        if line.lstrip().startswith("def forward("):
            for name in re.findall(r"\b(\w+)\b", line.split("(", 1)[1]):
                lines.setdefault(name, number)
    return lines


def _arg_text(value: object) -> str:
    if isinstance(value, torch.fx.Node):
        return value.name
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_arg_text(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    return repr(value)


def _source(node: torch.fx.Node, entry: SavedTensor | None) -> str:
    if entry is not None and entry.source_line:
        return entry.source_line
    return source_line(node.meta.get("stack_trace")) or ""
