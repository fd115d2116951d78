"""The table of backward nodes: one row per node of a partition's backward graph, with everything a view
shows about it (kind, module, source line, code line, bytes, why it is saved).

Every classification of backward nodes is made here, once; the payload only serialises the rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Protocol

import torch.fx

from .analysis import GradientOutput, SavedTensor, graph_modules, op_name, tensor_info
from .kinds import NodeKind, SavedKind, is_tangent
from .naming import source_line
from .partition_view import PartitionView
from .why import why_recomputed


class AnalysedPartition(PartitionView, Protocol):
    """A partition with its saved values and gradients read (what `trace.Partition` caches)."""

    @property
    def saved_tensors(self) -> list[SavedTensor]: ...

    @property
    def gradients(self) -> list[GradientOutput]: ...


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


def backward_nodes(partition: AnalysedPartition) -> list[BackwardNode]:
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
    modules = backward_modules(partition)
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


def backward_modules(partition: AnalysedPartition) -> dict[str, str]:
    """The module of each backward node: a saved value's from its tensor, an op's from torch's module
    stack, and a sum of a tied parameter's gradients (no module's own op) the parameter's module."""
    nodes = [n for n in partition.backward_with_nones.graph.nodes if n.op != "output"]  # `backward`'s, uncopied
    saved = {entry.name: entry.module or "" for entry in partition.saved_tensors}
    parameters = {g.name: g.grad_of.rpartition(".")[0] for g in partition.gradients if g.kind == "parameter"}
    return graph_modules(nodes, partition.inputs, saved, parameters)


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
