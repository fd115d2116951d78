"""The memory picture's part of the kernel-to-browser contract (`views/payload.py` carries it in each
`RunTotals`): live activation memory over the run at most TIMELINE_POINTS points, stacked by the liveness
walk's kind of each storage and by module, the node each point selects, and `g.measure()`'s curve (or the one a
memory snapshot gave, `TraceRegion.attach_snapshot`, with its peak reserved)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from ..core import memory
from ..core.units import nice_ticks
from .stretches import stretch_maxima

if TYPE_CHECKING:
    from ..extraction.result import BackwardExtraction

TIMELINE_POINTS = 1000
TIMELINE_TICKS = 4
"""Ticks the widget's memory timeline asks for on each axis (its chart is small)."""
MODULE_BANDS = 10
"""Most modules the timeline stacks by name; the rest are one band."""
KIND_LABELS = {"saved": "saved activations", "gradient": "gradients", "temporary": "temporaries"}


class MemoryPoint(TypedDict):
    step: int
    """Index of the op in the whole timeline."""
    phase: str
    node: str
    graph: int
    live_bytes: int


class MemoryPeak(MemoryPoint):
    module: str


class ModuleBytes(TypedDict):
    module: str
    bytes: int


class MemoryBand(TypedDict):
    """Live bytes of one kind of storage, or of one module's storages, at each point of the timeline."""

    key: str | None
    """The kind ("saved", "gradient", "temporary") or the module path ("" for the top level); None for
    the modules past the MODULE_BANDS largest, together."""
    label: str
    bytes: list[int]


class MeasuredMemory(TypedDict):
    """`g.measure()`'s live bytes, at the same steps as the prediction, and how far its peak is off."""

    timeline: list[MemoryPoint]
    """At most TIMELINE_POINTS points: the highest of each stretch of ops, so the measured peak is in."""
    peak: MemoryPoint
    predicted_peak_bytes: int
    error_percent: float
    """(predicted peak - measured peak) / measured peak, in percent."""
    device: str
    reserved_peak_bytes: int | None
    """The most the allocator's segments held during the run, apart from `peak` (allocated): from a memory
    snapshot (`TraceRegion.attach_snapshot`) that records segment events; None where nothing says."""


class Memory(TypedDict):
    """The memory picture: activation memory over the run, its peak, saved bytes by module."""

    timeline: list[MemoryPoint]
    """At most TIMELINE_POINTS points: the highest of each stretch of ops, so the peak is always in."""
    steps: int
    forward_steps: int
    """Ops before the first backward op."""
    peak: MemoryPeak
    by_module: list[ModuleBytes]
    """Saved activation bytes per module, largest first; they sum to the run's saved activation bytes."""
    x_ticks: list[float]
    """Ops, within the run's steps."""
    y_ticks: list[float]
    """Bytes, from 0 to at or above the peak; the browser recomputes them (`niceTicks`) only when a
    budget overlaid peaks higher."""
    tick_count: int
    """How many ticks the timeline asks for on each axis (TIMELINE_TICKS; its chart is small)."""
    measured: MeasuredMemory | None
    """What the last `g.measure()` saw (None until the extraction is measured: measuring runs the model)."""
    kinds: list[MemoryBand]
    """The timeline stacked by the liveness walk's kind of each storage; at each point they add up to it."""
    modules: list[MemoryBand]
    """The timeline stacked by the module allocating each storage, at `module_depth`; they add up to it."""
    module_depth: int
    """How deep `modules` cut the module paths: the deepest level with at most MODULE_BANDS modules."""
    selects: list[str]
    """The backward node each timeline point selects in its region's graph ("" for none): a backward op
    itself, a forward op the saved value it computes or else the first backward op torch built for it."""


def memory_payload(extraction: BackwardExtraction) -> Memory:
    timeline = extraction.memory_timeline()
    measured = measured_payload(extraction)
    live = [s["live_bytes"] for s in timeline]
    peak = extraction.peak
    by_module = extraction.memory_by_module()
    shown = stretch_maxima(live, TIMELINE_POINTS)
    kinds = memory.live_by_kind(extraction.partitions)
    depth, modules = _module_bands(extraction, shown)
    selects = memory.counterpart_steps(extraction.partitions)
    return Memory(
        timeline=[
            MemoryPoint(step=i, phase=s["phase"], node=s["node"], graph=s["graph"], live_bytes=s["live_bytes"])
            for i in shown
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
        x_ticks=[t for t in nice_ticks(max(len(timeline) - 1, 1), TIMELINE_TICKS) if t <= len(timeline) - 1],
        y_ticks=nice_ticks(max(peak.live_bytes, measured["peak"]["live_bytes"] if measured else 0, 1), TIMELINE_TICKS),
        tick_count=TIMELINE_TICKS,
        measured=measured,
        kinds=[MemoryBand(key=k, label=KIND_LABELS[k], bytes=[v[i] for i in shown]) for k, v in kinds.items()],
        modules=modules,
        module_depth=depth,
        selects=[selects[i] for i in shown],
    )


def _cut(module: str, depth: int) -> str:
    return ".".join(module.split(".")[:depth]) if module else ""


def _module_bands(extraction: BackwardExtraction, shown: list[int]) -> tuple[int, list[MemoryBand]]:
    """The timeline by module at the deepest level with at most MODULE_BANDS modules (at least 1): the
    largest by peak bytes first, the rest as one band."""
    found = {s.module for p in extraction.partitions for s in p.memory.storages}
    deepest = max((m.count(".") + 1 for m in found if m), default=1)
    depth = max([d for d in range(1, deepest + 1) if len({_cut(m, d) for m in found}) <= MODULE_BANDS] or [1])
    bands = memory.live_by(extraction.partitions, lambda s: _cut(s.module, depth))
    ranked = sorted(bands, key=lambda m: -max(bands[m], default=0))
    rows = [
        MemoryBand(key=m, label=m or "(top level)", bytes=[bands[m][i] for i in shown]) for m in ranked[:MODULE_BANDS]
    ]
    rest = ranked[MODULE_BANDS:]
    if rest:
        rows.append(
            MemoryBand(
                key=None, label=f"{len(rest)} other modules", bytes=[sum(bands[m][i] for m in rest) for i in shown]
            )
        )
    return depth, rows


def measured_payload(extraction: BackwardExtraction) -> MeasuredMemory | None:
    """The extraction's last measurement as the pane draws it; None when never measured."""
    result = extraction.measured
    if result is None:
        return None
    curve = result.curve
    points = [
        MemoryPoint(step=i, phase=p["phase"], node=p["node"], graph=p["graph"], live_bytes=p["live_bytes"])
        for i in stretch_maxima([p["live_bytes"] for p in curve], TIMELINE_POINTS)
        for p in (curve[i],)
    ]
    top = result.peak_step
    at: dict[str, Any] = curve[top] if top >= 0 else {"phase": "", "node": "", "graph": 0}
    peak = MemoryPoint(step=top, phase=at["phase"], node=at["node"], graph=at["graph"], live_bytes=result.peak_bytes)
    return MeasuredMemory(
        timeline=points,
        peak=peak,
        predicted_peak_bytes=result.predicted_peak_bytes,
        error_percent=round(result.error_percent, 3),
        device=result.device,
        reserved_peak_bytes=result.reserved_peak_bytes,
    )
