"""The typed kernel-to-browser contract: what the widget and the HTML export draw.

`js/types.ts` mirrors every TypedDict here one to one; `tests/test_contract.py` writes a real payload
as a JSON fixture that the front-end tests check against both. No IPython, no ipywidgets.
"""

from __future__ import annotations

import re
from typing import TypedDict

import torch.fx

from ..core.analysis import SavedTensor, node_module, op_name, tensor_info
from ..core.naming import source_line
from ..core.partitioners import registered_partitioners
from ..extraction import BackwardExtraction
from ..studio import Comparison, Sweep, diff

ARGS_TEXT_LIMIT = 240
TIMELINE_POINTS = 1000
OVERLAY_POINTS = 120


class GraphNode(TypedDict):
    id: str
    op: str
    kind: str
    """`saved`, `tangent`, `gradient` or `op`."""
    module: str
    shape: list[int]
    dtype: str
    args: str
    source: str
    line: int
    """1-based line of its definition in the backward code, 0 if none."""
    grad_of: list[str]
    saved_kind: str
    recomputed: bool
    bytes: int
    """Bytes of the tensor it computes (0 for tuples and symbols)."""


class SavedRow(TypedDict):
    name: str
    kind: str
    source: str
    shape: list[int]
    dtype: str
    bytes: int
    activation_bytes: int
    producer: str
    module: str
    alias_of: str
    alias_kind: str
    """What `alias_of` is: `parameter`, `buffer`, `input` (views of forward inputs add 0 B), `activation`, or ""."""
    storage_op: str
    why: str


class Totals(TypedDict):
    saved: int
    saved_activation_bytes: int
    saved_input_bytes: int
    recomputed: int


class Diff(TypedDict):
    against: str
    recomputed_now: list[str]
    recomputed_rows: list[SavedRow]
    newly_saved: list[str]


class PartitionerOption(TypedDict):
    name: str
    takes_budget: bool
    description: str


class Code(TypedDict):
    backward: str
    forward: str


class MemoryPoint(TypedDict):
    step: int
    """Index of the op in the whole timeline."""
    phase: str
    node: str
    graph: int
    live_bytes: int


class MemoryPeak(TypedDict):
    step: int
    phase: str
    node: str
    graph: int
    live_bytes: int
    module: str


class ModuleBytes(TypedDict):
    module: str
    bytes: int


class Memory(TypedDict):
    """The memory picture: activation memory over the run, its peak, saved bytes by module."""

    timeline: list[MemoryPoint]
    """At most TIMELINE_POINTS points: the highest of each stretch of ops, so the peak is always in."""
    steps: int
    forward_steps: int
    """Ops before the first backward op."""
    peak: MemoryPeak
    by_module: list[ModuleBytes]
    """Saved activation bytes per module, largest first; they sum to the saved activation bytes."""


class GraphData(TypedDict):
    model: str
    partitioner: str
    memory_budget: float | None
    mode: str
    graph_index: int
    graph_count: int
    partitioners: list[PartitionerOption]
    nodes: list[GraphNode]
    edges: list[list[str]]
    saved: list[SavedRow]
    totals: Totals
    code: Code
    notes: list[str]
    diff: Diff
    memory: Memory


class ComparisonRow(TypedDict):
    partition: str
    partitioner: str
    memory_budget: float | None
    saved: int
    saved_activation_bytes: int
    recomputed: int
    recomputed_ops: list[str]
    forward_nodes: int
    backward_nodes: int
    backward_flops: int
    recompute_flops: int
    peak_activation_bytes: int


class SweepPoint(TypedDict):
    budget: float
    saved_activation_bytes: int
    recompute_flops: int
    saved: int
    pareto: bool
    peak_activation_bytes: int
    timeline: list[int]
    """Live bytes over the run in OVERLAY_POINTS stretches (each the highest), to overlay budgets."""


class Previous(TypedDict, total=False):
    saved: int
    saved_activation_bytes: int


class WidgetState(TypedDict):
    """Every synced trait of the widget; the HTML export starts from the same defaults."""

    data: GraphData
    selected: str
    partitioner: str
    memory_budget: float
    graph_index: int
    busy: bool
    error: str
    previous: Previous
    can_rerun: bool
    comparison_rows: list[ComparisonRow]
    compare_index: int
    sweep_points: list[SweepPoint]
    sweep_index: int
    sweep_progress: str


STATE_DEFAULTS = {
    "selected": "",
    "partitioner": "default",
    "memory_budget": 1.0,
    "graph_index": 0,
    "busy": False,
    "error": "",
    "previous": {},
    "can_rerun": True,
    "comparison_rows": [],
    "compare_index": -1,
    "sweep_points": [],
    "sweep_index": -1,
    "sweep_progress": "",
}
"""Trait defaults, in one place: the widget's traits and the HTML export both start here."""

NO_DIFF: Diff = {"against": "", "recomputed_now": [], "recomputed_rows": [], "newly_saved": []}


def partitioner_options() -> list[PartitionerOption]:
    return [
        PartitionerOption(name=p.name, takes_budget=p.takes_budget, description=p.description)
        for p in registered_partitioners()
    ]


def _arg_text(value: object) -> str:
    if isinstance(value, torch.fx.Node):
        return value.name
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_arg_text(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    return repr(value)


def _code_lines(code: str) -> dict[str, int]:
    """Line (1-based) of each node's definition in the generated code."""
    lines: dict[str, int] = {}
    for number, line in enumerate(code.splitlines(), start=1):
        match = re.match(r"\s+(\w+) = ", line)
        if match and match.group(1) not in lines:
            lines[match.group(1)] = number
        if line.lstrip().startswith("def forward("):
            for name in re.findall(r"\b(\w+)\b", line.split("(", 1)[1]):
                lines.setdefault(name, number)
    return lines


def graph_payload(
    extraction: BackwardExtraction, graph_index: int = 0, previous: BackwardExtraction | None = None
) -> GraphData:
    """Everything the front end shows for one partition of an extraction.

    With `previous` (the partition shown before), it also says what changed.
    """
    partition = extraction.partitions[graph_index]
    saved = {s.name: s for s in partition.saved_tensors}
    gradients: dict[str, list[str]] = {}
    for gradient in partition.gradients:
        gradients.setdefault(gradient.name, []).append(gradient.grad_of)
    code = partition.backward_code
    lines = _code_lines(code)
    recomputed = {name for name, _ in partition.recomputed}
    input_kinds = _input_kinds(extraction)
    nodes: list[GraphNode] = []
    edges: list[list[str]] = []
    for node in partition.backward.graph.nodes:
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
        module = entry.module if entry is not None else node_module(node, partition.inputs)
        nodes.append(
            GraphNode(
                id=node.name,
                op=op,
                kind=kind,
                module=module or "",
                shape=list(info.shape),
                dtype=info.dtype.replace("torch.", ""),
                args=", ".join(_arg_text(a) for a in node.args)[:ARGS_TEXT_LIMIT],
                source=_source(node, entry),
                line=lines.get(node.name, 0),
                grad_of=gradients.get(node.name, []),
                saved_kind=entry.kind if entry is not None else "",
                recomputed=node.name in recomputed,
                bytes=info.bytes,
            )
        )
        edges.extend([arg.name, node.name] for arg in node.all_input_nodes)
    place_unowned_ops(nodes, edges)
    return GraphData(
        model=extraction.model_name,
        partitioner=extraction.partitioner,
        memory_budget=extraction.memory_budget,
        mode=extraction.mode,
        graph_index=graph_index,
        graph_count=len(extraction.partitions),
        partitioners=partitioner_options(),
        nodes=nodes,
        edges=edges,
        saved=[saved_row(s, input_kinds) for s in partition.saved_tensors],
        totals=Totals(
            saved=len(partition.saved_tensors),
            saved_activation_bytes=partition.saved_activation_bytes,
            saved_input_bytes=partition.saved_input_bytes,
            recomputed=len(partition.recomputed),
        ),
        code=Code(backward=code, forward=partition.forward_code),
        notes=list(extraction.notes),
        diff=NO_DIFF if previous is None or previous is extraction else diff_payload(previous, extraction),
        memory=memory_payload(extraction),
    )


def _common_module(paths: list[str]) -> str:
    parts = [path.split(".") for path in paths]
    shared = []
    for segments in zip(*parts):
        if len(set(segments)) > 1:
            break
        shared.append(segments[0])
    return ".".join(shared)


def place_unowned_ops(nodes: list[GraphNode], edges: list[list[str]]) -> None:
    """Backward ops no forward module owns (the gradient sums of residual connections) go in the
    innermost module their neighbours share, so that a collapsed module hides them with the rest.

    Two sweeps, in graph order and back, so that a run of such ops takes its module from both ends."""
    neighbours: dict[str, list[str]] = {}
    for source, target in edges:
        neighbours.setdefault(source, []).append(target)
        neighbours.setdefault(target, []).append(source)
    by_id = {n["id"]: n for n in nodes}
    unowned = [n for n in nodes if not n["module"] and n["op"] != "placeholder"]
    for sweep in (unowned, unowned[::-1]):
        for node in sweep:
            modules = [by_id[m]["module"] for m in neighbours.get(node["id"], []) if by_id[m]["module"]]
            if modules:
                node["module"] = _common_module(modules)


def _source(node: torch.fx.Node, entry: SavedTensor | None) -> str:
    if entry is not None and entry.source_line:
        return entry.source_line
    return source_line(node.meta.get("stack_trace")) or ""


def _input_kinds(extraction: BackwardExtraction) -> dict[str, str]:
    """Forward inputs by human name -> `parameter`, `buffer` or `input`."""
    return {source.name: source.kind for p in extraction.partitions for source in p.inputs}


def saved_row(saved: SavedTensor, input_kinds: dict[str, str]) -> SavedRow:
    """A saved value; `input_kinds` (forward input name -> kind) says what a view shares memory with."""
    alias_kind = ""
    if saved.alias_of:
        alias_kind = "activation" if saved.storage_op else input_kinds.get(saved.alias_of, "input")
    return SavedRow(
        name=saved.name,
        kind=saved.kind,
        source=saved.source or "",
        shape=list(saved.shape),
        dtype=saved.dtype.replace("torch.", ""),
        bytes=saved.bytes,
        activation_bytes=saved.activation_bytes,
        producer=saved.producer or "",
        module=saved.module or "",
        alias_of=saved.alias_of or "",
        alias_kind=alias_kind,
        storage_op=saved.storage_op or "",
        why=saved.why,
    )


def diff_payload(previous: BackwardExtraction, current: BackwardExtraction) -> Diff:
    """What the widget highlights after a switch: values now recomputed, values newly saved."""
    d = diff(previous, current)
    before = {s.name: s for s in previous.saved_tensors}
    return Diff(
        against=previous.label,
        recomputed_now=d["saved_in_a_recomputed_in_b"],
        recomputed_rows=[saved_row(before[name], _input_kinds(previous)) for name in d["saved_in_a_recomputed_in_b"]],
        newly_saved=d["saved_only_in_b"],
    )


def stretch_maxima(values: list[int], count: int) -> list[int]:
    """Indices of the highest value in each of `count` equal stretches (all indices when fewer)."""
    if len(values) <= count:
        return list(range(len(values)))
    bounds = [round(i * len(values) / count) for i in range(count + 1)]
    return [max(range(a, b), key=lambda i: (values[i], -i)) for a, b in zip(bounds, bounds[1:]) if b > a]


def memory_payload(extraction: BackwardExtraction) -> Memory:
    timeline = extraction.memory_timeline()
    live = [s["live_bytes"] for s in timeline]
    peak = extraction.peak
    by_module = extraction.memory_by_module()
    return Memory(
        timeline=[
            MemoryPoint(step=i, phase=s["phase"], node=s["node"], graph=s["graph"], live_bytes=s["live_bytes"])
            for i in stretch_maxima(live, TIMELINE_POINTS)
            for s in (timeline[i],)
        ],
        steps=len(timeline),
        forward_steps=sum(1 for s in timeline if s["phase"] == "forward"),
        peak=MemoryPeak(
            step=peak.step,
            phase=peak.phase,
            node=peak.node,
            graph=peak.graph,
            live_bytes=peak.live_bytes,
            module=peak.module,
        ),
        by_module=[ModuleBytes(module=m, bytes=b) for m, b in by_module.items()],
    )


def comparison_rows(comparison: Comparison) -> list[ComparisonRow]:
    return [
        ComparisonRow(**row, peak_activation_bytes=extraction.peak_activation_bytes)
        for row, extraction in zip(comparison.rows, comparison.extractions)
    ]


def sweep_points(result: Sweep) -> list[SweepPoint]:
    front = {id(p) for p in result.pareto()}
    points = []
    for p in result.points:
        live = [s["live_bytes"] for s in p.extraction.memory_timeline()] if p.extraction is not None else []
        points.append(
            SweepPoint(
                budget=p.budget,
                saved_activation_bytes=p.saved_activation_bytes,
                recompute_flops=p.recompute_flops,
                saved=p.saved,
                pareto=id(p) in front,
                peak_activation_bytes=max(live, default=0),
                timeline=[live[i] for i in stretch_maxima(live, OVERLAY_POINTS)],
            )
        )
    return points
