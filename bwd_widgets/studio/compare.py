"""Trace once, partition many: compare partitioners, sweep memory budgets, diff two partitions."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..core.errors import BwdWidgetsError
from ..core.kinds import BACKENDS
from ..core.partitioners import allowed_on, resolve_partitioner
from ..core.trace import TORCH_WORK
from ..extraction.display_hook import RichDisplay
from ..extraction.extract import extract
from ..extraction.result import BackwardExtraction
from ..graphnet.sample import GraphNetSample

DEFAULT_BUDGETS = tuple(i / 10 for i in range(11))


# --- compare ------------------------------------------------------------------


PartitionerSpec = object
"""A registered name, a budget, (name, budget), or a partition_fn."""


def listed(values: object, what: str, example: str) -> tuple:
    """A non-empty sequence of choices; one string or number is a mistake worth one sentence."""
    if isinstance(values, (str, bytes, int, float)) or not isinstance(values, Sequence):
        raise BwdWidgetsError(f"{what}= takes a list, e.g. {what}={example}; got {values!r}: wrap it in a list.")
    if not values:
        raise BwdWidgetsError(f"{what}= is empty: name at least one, e.g. {what}={example}.")
    return tuple(values)


_listed = listed
"""The old private name, kept for callers that still use it."""


def _spec(entry: PartitionerSpec) -> tuple:
    return entry if isinstance(entry, tuple) else (entry, None)


def row(extraction: BackwardExtraction) -> dict:
    """Plain numbers for one partition."""
    recomputed = extraction.recomputed
    backend = extraction.backend
    return {
        "partition": extraction.label if backend == "aot_eager" else f"{backend} {extraction.label}",
        "backend": backend,
        "partitioner": extraction.partitioner,
        "memory_budget": extraction.memory_budget,
        "saved": len(extraction.saved_tensors),
        "saved_activation_bytes": extraction.saved_activation_bytes,
        "recomputed": len(recomputed),
        "recomputed_ops": sorted({op for _, op in recomputed}),
        "forward_nodes": extraction.forward_node_count,
        "backward_nodes": extraction.backward_node_count,
        "backward_flops": extraction.backward_flops,
        "recompute_flops": extraction.recompute_flops,
        "torch_budget_ratio": torch_budget_ratio(extraction),
    }


@dataclass
class Comparison(RichDisplay):
    """Partitions of one joint graph, side by side."""

    extractions: list[BackwardExtraction]
    rows: list[dict] = field(default_factory=list)

    def diff(self, a: int = 0, b: int = 1) -> dict[str, list[str]]:
        return diff(self.extractions[a], self.extractions[b])

    def __repr__(self) -> str:
        columns = ("partition", "saved", "saved_activation_bytes", "recomputed", "backward_nodes", "backward_flops")
        lines = ["  ".join(f"{c:>22}" for c in columns)]
        lines += ["  ".join(f"{str(r[c]):>22}" for c in columns) for r in self.rows]
        return "\n".join(lines)


def _base(model_or_extraction: object, inputs: tuple, extract_kwargs: dict) -> BackwardExtraction:
    if isinstance(model_or_extraction, BackwardExtraction):
        return model_or_extraction
    if isinstance(model_or_extraction, GraphNetSample) or callable(model_or_extraction):
        return extract(model_or_extraction, *inputs, **extract_kwargs)
    raise BwdWidgetsError(
        f"expected a model, a GraphNet sample or an extraction, got {type(model_or_extraction).__name__}: "
        "pass the model and its inputs, or the result of bw.extract."
    )


COMPARED = ("default", "min_cut", 0.5, 0.0)
"""What `compare` sets side by side unless told: of these, each backend's own (Inductor splits with min-cut only)."""


def compare(
    model_or_extraction: object,
    *inputs: object,
    partitioners: Sequence[PartitionerSpec] | None = None,
    backends: Sequence[str] | None = None,
    **extract_kwargs: object,
) -> Comparison:
    """Trace once per backend, then one row per partitioner: saved count and bytes, recomputed ops, node counts,
    estimated backward FLOPs. backends: ("aot_eager", "inductor") sets AOT Autograd's partitions beside Inductor's,
    each traced once (a model and its inputs, not an extraction, which holds one backend's joint graph); None: the
    extraction's, or `backend=` among the extract options. partitioners: None compares `COMPARED`, those each
    backend splits with."""
    if partitioners is not None:
        partitioners = listed(partitioners, "partitioners", "('default', 'min_cut', 0.5)")
    bases = _bases(model_or_extraction, inputs, extract_kwargs, backends)
    extractions = [
        base.rerun(*_spec(entry))
        for base in bases
        for entry in (partitioners or [e for e in COMPARED if allowed_on(base.backend, resolve_partitioner(e))])
    ]
    return Comparison(extractions, [row(e) for e in extractions])


def _bases(
    model_or_extraction: object, inputs: tuple, extract_kwargs: dict, backends: Sequence[str] | None
) -> list[BackwardExtraction]:
    """One extraction per backend compared: the one given, or the model traced by each."""
    if backends is None:
        return [_base(model_or_extraction, inputs, extract_kwargs)]
    backends = listed(backends, "backends", "('aot_eager', 'inductor')")
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        raise BwdWidgetsError(f"unknown backend {unknown[0]!r}: compare takes {' and '.join(map(repr, BACKENDS))}.")
    if isinstance(model_or_extraction, BackwardExtraction):
        if set(backends) != {model_or_extraction.backend}:
            raise BwdWidgetsError(
                f"this extraction holds {model_or_extraction.backend}'s joint graph only: to compare backends, pass "
                "the model and its inputs (bw.compare(model, x, backends=[...]))."
            )
        return [model_or_extraction]
    return [_base(model_or_extraction, inputs, {**extract_kwargs, "backend": b}) for b in backends]


def diff(a: BackwardExtraction, b: BackwardExtraction) -> dict[str, list[str]]:
    """What one partition saves that the other recomputes (or does not need), and back."""
    saved_a = {s.name for s in a.saved_tensors if s.is_activation}
    saved_b = {s.name for s in b.saved_tensors if s.is_activation}
    recomputed_a = {name for name, _ in a.recomputed}
    recomputed_b = {name for name, _ in b.recomputed}
    return {
        "saved_in_a_recomputed_in_b": sorted(saved_a & recomputed_b),
        "saved_in_b_recomputed_in_a": sorted(saved_b & recomputed_a),
        "saved_only_in_a": sorted(saved_a - saved_b),
        "saved_only_in_b": sorted(saved_b - saved_a),
    }


# --- sweep --------------------------------------------------------------------


@dataclass
class SweepPoint:
    budget: float
    saved_activation_bytes: int
    recompute_flops: int
    backward_flops: int
    saved: int
    _extraction: BackwardExtraction | None = field(repr=False, default=None, compare=False)
    torch_budget_ratio: float | None = None
    """The budget as torch measures the plan it chose (`Partition.torch_budget_ratio`): at or under `budget`."""
    peak_activation_bytes: int = 0
    peak_above_budget: float | None = None
    """A larger budget of the sweep whose peak is lower than this point's: this budget's extra recomputation
    buys no peak memory (torch's plans are not monotonic in peak); None when no larger budget peaks lower."""
    live_bytes: list[int] = field(repr=False, default_factory=list, compare=False)
    """The memory timeline's live bytes, step by step (the sweep chart's overlay)."""
    _source: BackwardExtraction | None = field(repr=False, default=None, compare=False)
    """The extraction a worker process partitioned this point from, to partition it again here when read."""

    @property
    def extraction(self) -> BackwardExtraction | None:
        """This budget's partition. A point a worker process swept carries only its numbers: its partition
        is made here (from the same joint graph) the first time it is read."""
        if self._extraction is None and self._source is not None:
            self._extraction = self._source.rerun("min_cut", self.budget)
        return self._extraction

    @extraction.setter
    def extraction(self, extraction: BackwardExtraction | None) -> None:
        self._extraction = extraction

    @property
    def numbers(self) -> SweepPoint:
        """This point without its partition or where to make it from: what pickles out of a worker process."""
        return dataclasses.replace(self, _extraction=None, _source=None)

    def partitioned_from(self, source: BackwardExtraction) -> SweepPoint:
        """This point's numbers, its partition made from `source`'s joint graph when first read."""
        return dataclasses.replace(self, _extraction=None, _source=source)

    @property
    def extraction_made(self) -> BackwardExtraction | None:
        """The partition if it is made already: None where reading `extraction` would partition."""
        return self._extraction


def torch_budget_ratio(extraction: BackwardExtraction) -> float | None:
    """torch's ratio over all compiled regions: the sum of each region's saved bytes over its inputs, against
    the same sum for plain min-cut (one region: exactly torch's own ratio)."""
    decisions = [p.decisions for p in extraction.partitions]
    if any(d.budget_ratio is None for d in decisions):
        return None
    span = sum(d.min_cut_bytes - d.input_bytes for d in decisions)
    if span <= 0:
        return decisions[0].budget_ratio if len(decisions) == 1 else None
    return sum(d.saved_bytes - d.input_bytes for d in decisions) / span


def flag_peaks(points: list[SweepPoint]) -> None:
    """Mark each point a larger budget beats on peak memory (the lowest-peaking such budget)."""
    for point in points:
        lower = [q for q in points if q.budget > point.budget and q.peak_activation_bytes < point.peak_activation_bytes]
        best = min(lower, key=lambda q: (q.peak_activation_bytes, q.budget), default=None)
        point.peak_above_budget = best.budget if best is not None else None


_NOT_IN_ROWS = {"_extraction", "_source", "live_bytes"}  # a partition, an extraction, a curve: not numbers


@dataclass
class Sweep(RichDisplay):
    points: list[SweepPoint]
    interrupted: bool = False

    def pareto(self) -> list[SweepPoint]:
        """Points no other point beats on both saved bytes and recompute FLOPs."""
        front = []
        for p in self.points:
            dominated = any(
                q.saved_activation_bytes <= p.saved_activation_bytes
                and q.recompute_flops <= p.recompute_flops
                and (q.saved_activation_bytes, q.recompute_flops) != (p.saved_activation_bytes, p.recompute_flops)
                for q in self.points
            )
            if not dominated:
                front.append(p)
        return sorted(front, key=lambda p: p.saved_activation_bytes)

    def rows(self) -> list[dict]:
        return [
            {f.name: getattr(p, f.name) for f in dataclasses.fields(p) if f.name not in _NOT_IN_ROWS}
            for p in self.points
        ]

    def __repr__(self) -> str:
        lines = [f"Sweep({len(self.points)} points{', interrupted' if self.interrupted else ''})"]
        for p in self.points:
            ratio = f", torch's ratio {p.torch_budget_ratio:.3f}" if p.torch_budget_ratio is not None else ""
            flag = f", peaks above budget {p.peak_above_budget:g}" if p.peak_above_budget is not None else ""
            lines.append(
                f"  budget {p.budget:4.2f}: {p.saved_activation_bytes:>14} B saved, {p.peak_activation_bytes:>14} B peak, "
                f"{p.recompute_flops:>14} recompute FLOPs{ratio}{flag}"
            )
        return "\n".join(lines)


def _point(budget: float, e: BackwardExtraction) -> SweepPoint:
    return SweepPoint(
        budget,
        e.saved_activation_bytes,
        e.recompute_flops,
        e.backward_flops,
        len(e.saved_tensors),
        e,
        torch_budget_ratio(e),
        e.peak_activation_bytes,
        live_bytes=[step["live_bytes"] for step in e.memory_timeline()],
    )


def _swept_base(
    model_or_extraction: object, inputs: tuple, budgets: tuple, extract_kwargs: dict
) -> tuple[BackwardExtraction, list[int], int | None]:
    """The extraction a sweep partitions again; the budgets' order of work; and the budget whose partition it is
    already (a model is traced at the largest budget unless a partitioner is named), which goes first."""
    for budget in budgets:
        resolve_partitioner("min_cut", budget)  # a bad budget fails before any work
    if "partitioner" not in extract_kwargs and "memory_budget" not in extract_kwargs:
        extract_kwargs = {**extract_kwargs, "partitioner": "min_cut", "memory_budget": max(budgets)}
    base = _base(model_or_extraction, inputs, extract_kwargs)
    made = next((i for i, b in enumerate(budgets) if base.partitioner == "min_cut" and base.memory_budget == b), None)
    return base, sorted(range(len(budgets)), key=lambda i: i != made), made  # `made` first, the rest in order


def sweep(
    model_or_extraction: object,
    *inputs: object,
    budgets: Sequence[float] | None = None,
    progress: bool = True,
    on_point: Callable[[SweepPoint, int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    workers: int | None = None,
    **extract_kwargs: object,
) -> Sweep:
    """Min-cut across memory budgets (default 0, 0.1, ..., 1), tracing once; the budgets share what
    torch computes alike for each (the flow graphs it cuts, FLOP counts of alike ops: `core/reuse.py`).

    Shows a progress bar; Ctrl-C (or the notebook's interrupt) stops the sweep and
    returns the points done so far. torch's budget is restored after every point.
    `on_point(point, done, total)` is called after each point as it arrives (the widget draws it), and
    `should_stop()` between points: true stops there, as Ctrl-C does (the widget's cancel button).

    The budgets are shared with `workers` processes forked from this one (default: one per further core
    this process may use, in either mode: a point is made from the graphs' shapes; 0 for none), each taking
    the next budget when it is free: a worker sends each point's numbers, and the point's partition is made
    here when first read (`SweepPoint.extraction`). A model is traced at the largest budget, unless a
    partitioner is named: that trace's own partition is that budget's point.
    """
    from tqdm.auto import tqdm

    from .forked import ForkedTasks, spare_cores

    budgets = DEFAULT_BUDGETS if budgets is None else listed(budgets, "budgets", "(0.0, 0.5, 1.0)")
    base, order, made = _swept_base(model_or_extraction, inputs, budgets, extract_kwargs)  # here: order[0] first
    done: dict[int, SweepPoint] = {}
    bar = tqdm(total=len(budgets), desc="memory budget sweep", unit="budget", disable=not progress)

    def here(task: int) -> SweepPoint:
        index = order[task]
        extraction = base if index == made else base.rerun("min_cut", budgets[index])
        with TORCH_WORK:  # its numbers, with the garbage collector paused as for the partition
            return _point(budgets[index], extraction)

    def numbers(task: int) -> SweepPoint:  # in a worker: the point without its partition (it does not pickle)
        return here(task).numbers

    def came(task: int, point: SweepPoint, made_here: bool) -> None:
        index = order[task]
        done[index] = point if made_here else point.partitioned_from(base)  # partitioned when read
        flag_peaks([done[i] for i in sorted(done)])
        bar.update(1)
        if on_point is not None:
            on_point(done[index], len(done), len(budgets))

    pool = ForkedTasks(len(budgets), spare_cores() if workers is None else workers, numbers)
    try:
        pool.run(here, came, should_stop)
    except KeyboardInterrupt:
        pass
    finally:
        bar.close()
    points = [done[i] for i in sorted(done)]
    return Sweep(points, len(points) < len(budgets))
