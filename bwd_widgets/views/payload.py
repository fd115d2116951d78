"""The typed kernel-to-browser contract: what the widget and the HTML export draw.

`js/types.ts` mirrors every TypedDict here one to one; `tests/test_contract.py` writes a real payload
as a JSON fixture that the front-end tests check against both. No IPython, no ipywidgets.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, TypedDict, cast

from ..core.errors import BwdWidgetsError
from ..core.kinds import DEFAULT_BACKEND, Backend, Mode, NodeKind
from ..core.nodes import BackwardNode, definition_lines
from ..core.partitioners import allowed_on, registered_partitioners
from ..core.units import format_seconds
from ..studio.compare import Comparison, Sweep, diff
from .grouping import Views, view_rules

# the memory picture's types live with their builder; named here, as the contract's (tests/test_contract.py)
from .memory_payload import TIMELINE_POINTS as TIMELINE_POINTS
from .memory_payload import MeasuredMemory as MeasuredMemory
from .memory_payload import Memory, memory_payload
from .memory_payload import MemoryBand as MemoryBand
from .memory_payload import MemoryPeak as MemoryPeak
from .memory_payload import MemoryPoint as MemoryPoint
from .memory_payload import ModuleBytes as ModuleBytes
from .stretches import stretch_maxima

if TYPE_CHECKING:
    from ..core.analysis import SavedTensor
    from ..extraction.result import BackwardExtraction
    from ..studio.advisor import Advice

OVERLAY_POINTS = 120


class GraphNode(TypedDict):
    id: str
    op: str
    kind: NodeKind
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
    why_recomputed: str
    """For a recomputed forward op, torch's reason it is computed again here (with torch's phrase); else ""."""
    bytes: int
    """Bytes of the tensor it computes (0 for tuples and symbols)."""


class SavedRow(TypedDict):
    name: str
    kind: str
    source: str
    source_aliases: list[str]
    """The other names the parameter or buffer `source` goes by (tied weights: `lm_head.weight`)."""
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
    torch_reason: str
    """torch's own phrase for `why` ("cannot recompute: materialized in backward"), "" where torch has none."""
    kind_label: str
    """What the value is, as every view says it (`kind_label`): "parameter view" (adds 0 B), "activation (view)"."""


class PartitionTotals(TypedDict):
    """Numbers of the compiled region shown: one partition, one of `graph_count`."""

    saved: int
    saved_activation_bytes: int
    saved_input_bytes: int
    recomputed: int
    backward_nodes: int
    torch_budget_ratio: float | None
    """The budget as torch measures this plan (`Partition.torch_budget_ratio`); None where min-cut did not run."""


class Diff(TypedDict):
    against: str
    recomputed_now: list[str]
    recomputed_rows: list[SavedRow]
    newly_saved: list[str]


class PartitionerOption(TypedDict):
    name: str
    takes_budget: bool
    description: str


class CodeLines(TypedDict):
    """Line (1-based) of each name's definition in the code; placeholders on the `def` line."""

    backward: dict[str, int]
    forward: dict[str, int]


class Code(TypedDict):
    backward: str
    forward: str
    lines: CodeLines


class RunTotals(TypedDict):
    """Numbers of the whole run: every compiled region, forward and backward."""

    saved: int
    saved_activation_bytes: int
    saved_input_bytes: int
    memory: Memory


class GraphData(TypedDict):
    model: str
    partitioner: str
    memory_budget: float | None
    mode: Mode
    backend: Backend
    """Whose partition this is ("aot_eager", or "inductor": the joint graph after Inductor's passes); the header
    names it, and `partitioners` lists only those the backend splits with."""
    graph_index: int
    graph_count: int
    partitioners: list[PartitionerOption]
    nodes: list[GraphNode]
    edges: list[list[str]]
    saved: list[SavedRow]
    partition: PartitionTotals
    run: RunTotals
    views: Views
    code: Code
    notes: list[str]
    diff: Diff


class ComparisonRow(TypedDict):
    partition: str
    backend: Backend
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
    torch_budget_ratio: float | None
    """The budget as torch measures the plan (studio.torch_budget_ratio); None where min-cut did not run."""
    peak_activation_bytes: int


class SweepPoint(TypedDict):
    budget: float
    saved_activation_bytes: int
    recompute_flops: int
    saved: int
    pareto: bool
    torch_budget_ratio: float | None
    """The budget as torch measures its plan (studio.SweepPoint.torch_budget_ratio)."""
    peak_above_budget: float | None
    """A larger budget whose peak is lower (studio.flag_peaks): the browser flags, it does not decide."""
    peak_activation_bytes: int
    timeline: list[int]
    """Live bytes over the run in OVERLAY_POINTS stretches (each the highest), to overlay budgets."""


class AdvicePlanRow(TypedDict):
    """One plan of `bw.advise`: the Pareto set, then the offload plans (verified eagerly, no partition to show)."""

    label: str
    kind: str
    code: str
    """The code to paste, as text (the browser shows it as text, never HTML)."""
    predicted_peak_bytes: int
    verified_peak_bytes: int | None
    measured_peak_bytes: int | None
    """The best plan's graphs run in real mode (`Plan.measured_peak_bytes`, from g.measure()); None otherwise."""
    recompute_flops: int
    measured_seconds: float | None
    """`advise(..., measure_time=True)`: one forward and backward of the plan's graphs here (`Plan.measured_seconds`)."""
    fits: bool
    best: bool
    note: str
    selectable: bool
    """Whether the widget can show the plan's partition (an offload plan has none)."""


class Previous(TypedDict, total=False):
    saved: int
    saved_activation_bytes: int


class TraitDefaults(TypedDict):
    """Every synced trait but `data`, which has no default: its value is the partition shown."""

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
    can_advise: bool
    advice_rows: list[AdvicePlanRow]
    advice_index: int
    advice_summary: str
    advice_progress: str


class WidgetState(TraitDefaults):
    """Every synced trait of the widget, the one list of them: the widget's traits, js/model.ts
    `Traits` and the HTML export are checked against it (tests/test_contract.py)."""

    data: GraphData


STATE_DEFAULTS = TraitDefaults(
    selected="",
    partitioner="default",
    memory_budget=1.0,
    graph_index=0,
    busy=False,
    error="",
    previous={},
    can_rerun=True,
    comparison_rows=[],
    compare_index=-1,
    sweep_points=[],
    sweep_index=-1,
    sweep_progress="",
    can_advise=False,
    advice_rows=[],
    advice_index=-1,
    advice_summary="",
    advice_progress="",
)
"""Trait defaults, in one place: the widget's traits and the HTML export both start here."""

NO_DIFF: Diff = {"against": "", "recomputed_now": [], "recomputed_rows": [], "newly_saved": []}


def partitioner_options(backend: Backend = DEFAULT_BACKEND) -> list[PartitionerOption]:
    """The registered partitioners a partition by `backend` may be switched to (`core.partitioners.allowed_on`)."""
    return [
        PartitionerOption(name=p.name, takes_budget=p.takes_budget, description=p.description)
        for p in registered_partitioners()
        if allowed_on(backend, p)
    ]


def graph_node(row: BackwardNode) -> GraphNode:
    """A row of the core's table of backward nodes, as the front end reads it."""
    return GraphNode(
        id=row.name,
        op=row.op,
        kind=row.kind,
        module=row.module,
        shape=list(row.shape),
        dtype=row.dtype,
        args=row.args,
        source=row.source_line,
        line=row.code_line,
        grad_of=list(row.grad_of),
        saved_kind=row.saved_kind,
        recomputed=row.recomputed,
        why_recomputed=row.why if row.recomputed else "",
        bytes=row.bytes,
    )


def checked_graph_index(extraction: BackwardExtraction, graph_index: int) -> int:
    """`graph_index` when the extraction has that compiled region; else one sentence saying which it has."""
    count = len(extraction.partitions)
    if isinstance(graph_index, bool) or not isinstance(graph_index, int) or not -count <= graph_index < count:
        raise BwdWidgetsError(
            f"graph_index={graph_index!r} is out of range: {extraction.model_name} has {count} compiled "
            f"region{'s' if count != 1 else ''} (graph_index 0 to {count - 1})."
        )
    return graph_index


def graph_payload(
    extraction: BackwardExtraction, graph_index: int = 0, previous: BackwardExtraction | None = None
) -> GraphData:
    """Everything the front end shows for one partition of an extraction.

    With `previous` (the partition shown before), it also says what changed.
    """
    partition = extraction.partitions[checked_graph_index(extraction, graph_index)]
    code = partition.backward_code
    lines = definition_lines(code)
    input_kinds = _input_kinds(extraction)
    nodes = [graph_node(row) for row in partition.nodes]
    edges = [[source, row.name] for row in partition.nodes for source in row.inputs]
    saved_rows = [saved_row(s, input_kinds) for s in partition.saved_tensors]
    data = GraphData(
        model=extraction.model_name,
        partitioner=extraction.partitioner,
        memory_budget=extraction.memory_budget,
        mode=extraction.mode,
        backend=extraction.backend,
        graph_index=graph_index,
        graph_count=len(extraction.partitions),
        partitioners=partitioner_options(extraction.backend),
        nodes=nodes,
        edges=edges,
        saved=saved_rows,
        partition=PartitionTotals(
            saved=len(partition.saved_tensors),
            saved_activation_bytes=partition.saved_activation_bytes,
            saved_input_bytes=partition.saved_input_bytes,
            recomputed=len(partition.recomputed),
            backward_nodes=len(nodes),
            torch_budget_ratio=partition.torch_budget_ratio,
        ),
        run=run_totals(extraction),
        views=view_rules(nodes, [(row["module"], row["activation_bytes"]) for row in saved_rows]),
        code=Code(
            backward=code,
            forward=partition.forward_code,
            lines=CodeLines(backward=lines, forward=definition_lines(partition.forward_code)),
        ),
        notes=list(extraction.notes),
        diff=NO_DIFF,
    )
    return since(data, extraction, previous)


def since(data: GraphData, extraction: BackwardExtraction, previous: BackwardExtraction | None) -> GraphData:
    """`data`, the payload of `extraction`, saying what changed since `previous` (the partition shown
    before; None for nothing to compare): a payload built ahead is shown after whichever partition."""
    diff = NO_DIFF if previous is None or previous is extraction else diff_payload(previous, extraction)
    return data if data["diff"] is diff else cast("GraphData", {**data, "diff": diff})


def _json(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def encode_without_diff(data: GraphData) -> bytes:
    """`data` as UTF-8 JSON without its diff: the part of a payload that does not depend on the partition
    shown before, so a payload built ahead is encoded ahead too (`encode_payload`)."""
    return _json({key: value for key, value in data.items() if key != "diff"})


def encode_payload(data: GraphData, without_diff: bytes | None = None) -> bytes:
    """The payload as the widget sends it: UTF-8 JSON in one binary buffer, which ipywidgets sends as it is
    (no walk for buffers, no second JSON encoding); js/model.ts `graphData` decodes it. `without_diff`
    is `encode_without_diff(data)` made ahead; the diff is added to it."""
    if "diff" not in data:  # the trait's empty default, before the first payload
        return _json(data)
    rest = encode_without_diff(data) if without_diff is None else without_diff
    return rest[:-1] + b',"diff":' + _json(data["diff"]) + b"}"


def run_totals(extraction: BackwardExtraction) -> RunTotals:
    return RunTotals(
        saved=len(extraction.saved_tensors),
        saved_activation_bytes=extraction.saved_activation_bytes,
        saved_input_bytes=extraction.saved_input_bytes,
        memory=memory_payload(extraction),
    )


def _input_kinds(extraction: BackwardExtraction) -> dict[str, str]:
    """Forward inputs by human name -> `parameter`, `buffer` or `input`."""
    return {source.name: source.kind for p in extraction.partitions for source in p.inputs}


def kind_label(kind: str, alias_of: str, alias_kind: str) -> str:
    """What a saved value is, in the one wording the widget's table and details, and the static picture, use: a
    view of a parameter, buffer or input is called so (it adds 0 B: its memory is that input's); a view of an
    activation stays an activation."""
    if not alias_of:
        return kind
    if alias_kind and alias_kind != "activation":
        return f"{alias_kind} view"
    return f"{kind} (view)"


def saved_row(saved: SavedTensor, input_kinds: dict[str, str]) -> SavedRow:
    """A saved value; `input_kinds` (forward input name -> kind) says what a view shares memory with."""
    alias_kind = ""
    if saved.alias_of:
        alias_kind = "activation" if saved.storage_op else input_kinds.get(saved.alias_of, "input")
    return SavedRow(
        name=saved.name,
        kind=saved.kind,
        source=saved.source or "",
        source_aliases=list(saved.source_aliases),
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
        torch_reason=saved.torch_reason,
        kind_label=kind_label(saved.kind, saved.alias_of or "", alias_kind),
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


def comparison_rows(comparison: Comparison) -> list[ComparisonRow]:
    """The studio's rows (plain dicts of ComparisonRow's other keys) with each partition's peak."""
    return [
        cast("ComparisonRow", {**row, "peak_activation_bytes": extraction.peak_activation_bytes})
        for row, extraction in zip(comparison.rows, comparison.extractions)
    ]


def advice_rows(advice: Advice) -> list[AdvicePlanRow]:
    """The advisor's plans as the partitions tab lists them (`Advice.listed`)."""
    return [
        AdvicePlanRow(
            label=p.label,
            kind=p.kind,
            code=p.code,
            predicted_peak_bytes=p.predicted_peak_bytes,
            verified_peak_bytes=p.verified_peak_bytes,
            measured_peak_bytes=p.measured_peak_bytes,
            recompute_flops=p.recompute_flops,
            measured_seconds=p.measured_seconds,
            fits=p.fits,
            best=p is advice.best,
            note=p.note,
            selectable=p.shows_partition,
        )
        for p in advice.listed
    ]


def advice_summary(advice: Advice) -> str:
    """One line above the plans: what the target is held against, and the best plan or why there is none."""
    done = f"{len(advice.tried)} plans tried in {format_seconds(advice.seconds)}" + (
        ", stopped" if advice.interrupted else ""
    )
    if advice.best is not None:
        verdict = (
            f"best: {advice.best.label}, of the plans with a partition the one that fits and recomputes least "
            "(offload plans cost copies, not FLOPs: listed, never best)"
        )
    else:
        verdict = f"none fits: {advice.why}"
    return f"{verdict} ({done}). The {advice.target_means}"


def sweep_points(result: Sweep) -> list[SweepPoint]:
    front = {id(p) for p in result.pareto()}
    points = []
    for p in result.points:
        live = p.live_bytes
        points.append(
            SweepPoint(
                budget=p.budget,
                saved_activation_bytes=p.saved_activation_bytes,
                recompute_flops=p.recompute_flops,
                saved=p.saved,
                pareto=id(p) in front,
                torch_budget_ratio=p.torch_budget_ratio,
                peak_above_budget=p.peak_above_budget,
                peak_activation_bytes=max(live, default=0),
                timeline=[live[i] for i in stretch_maxima(live, OVERLAY_POINTS)],
            )
        )
    return points
