"""The Jupyter widget: documented traits over the typed payload of `views.payload`."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from pathlib import Path

import anywidget
import traitlets
from anywidget.experimental import command

from ..core.errors import BwdWidgetsError
from ..extraction import BackwardExtraction
from ..extractor import extract
from ..studio import Comparison, Sweep, sweep
from ..views.payload import STATE_DEFAULTS, comparison_rows, graph_payload, sweep_points
from ..views.static import fallback_svg

STATIC = Path(__file__).resolve().parents[1] / "static"


_drawn: dict[int, tuple[weakref.ref, int | None]] = {}
"""id of an object drawn as a widget -> (the object, weakly; the execution count of the cell that drew it).
The weak reference tells a live object from a new one that reuses a freed one's id."""


def _execution_count() -> int | None:
    from IPython import get_ipython

    shell = get_ipython()
    return None if shell is None else shell.execution_count


def _note_drawn(*objects: object) -> None:
    count = _execution_count()
    for key in [key for key, (ref, drawn_in) in _drawn.items() if drawn_in != count or ref() is None]:
        del _drawn[key]  # only this cell's live objects matter
    for obj in objects:
        if obj is not None:
            _drawn[id(obj)] = (weakref.ref(obj), count)


def keep_as_text(obj: object) -> None:
    """Show `obj` as text if it ends this cell (`%bwd_extract model(x) --no-display`)."""
    _note_drawn(obj)


def drawn_in_this_cell(obj: object) -> bool:
    """Whether this cell already drew `obj` as a widget (`%bwd_extract model(x)` draws the widget and
    returns the extraction): its display as the cell's result is then left as text."""
    ref, count = _drawn.get(id(obj), (None, None))
    return ref is not None and ref() is obj and count == _execution_count()


def _synced(kind: type[traitlets.TraitType], name: str, help: str) -> traitlets.TraitType:
    """A synced trait whose default lives in `views.payload.STATE_DEFAULTS`."""
    return kind(STATE_DEFAULTS[name], help=help).tag(sync=True)


class BackwardGraphWidget(anywidget.AnyWidget):
    """Backward graph, saved tensors and code, linked; partitioner controls, comparisons
    and memory-budget sweeps partition the same joint graph again."""

    _esm = STATIC / "widget.js"
    _css = STATIC / "widget.css"

    data = traitlets.Dict(help="the GraphData payload of the partition shown").tag(sync=True)
    selected = _synced(traitlets.Unicode, "selected", "id of the selected backward node; set it to select")
    partitioner = _synced(traitlets.Unicode, "partitioner", "registered partitioner; setting it reruns")
    memory_budget = _synced(traitlets.Float, "memory_budget", "budget for a partitioner that takes one")
    graph_index = _synced(traitlets.Int, "graph_index", "which compiled region to show")
    busy = _synced(traitlets.Bool, "busy", "true while the kernel partitions or sweeps")
    error = _synced(traitlets.Unicode, "error", "the last rerun's error, one line")
    previous = _synced(traitlets.Dict, "previous", "totals of the partition shown before")
    can_rerun = _synced(traitlets.Bool, "can_rerun", "whether a joint graph is kept to partition again")
    comparison_rows = _synced(traitlets.List, "comparison_rows", "ComparisonRow per compared partition")
    compare_index = _synced(traitlets.Int, "compare_index", "comparison row shown; -1 for none")
    sweep_points = _synced(traitlets.List, "sweep_points", "SweepPoint per memory budget swept")
    sweep_index = _synced(traitlets.Int, "sweep_index", "sweep point shown; -1 for none")
    sweep_progress = _synced(traitlets.Unicode, "sweep_progress", "`done/total` while a sweep runs")

    def __init__(
        self,
        extraction: BackwardExtraction | None = None,
        comparison: Comparison | None = None,
        sweep: Sweep | None = None,
        **kwargs: object,
    ) -> None:
        self._updating = True
        super().__init__(**kwargs)
        self._comparison = comparison
        self._sweep = sweep
        if comparison is not None:
            self.comparison_rows = comparison_rows(comparison)
            self.compare_index = 0
            extraction = comparison.extractions[0]
        if sweep is not None:
            if not sweep.points:
                raise BwdWidgetsError("the sweep has no points to show: run it again and let it finish a budget.")
            self._set_sweep(sweep, len(sweep.points) - 1)
            extraction = extraction or sweep.points[-1].extraction
        if extraction is None:
            raise BwdWidgetsError("nothing to show: pass an extraction, a comparison or a non-empty sweep.")
        self.extraction = extraction
        self._show(extraction)

    def _show(self, extraction: BackwardExtraction, previous: BackwardExtraction | None = None) -> None:
        self._updating = True
        try:
            if previous is not None:
                totals = self.data["totals"]
                self.previous = {"saved": totals["saved"], "saved_activation_bytes": totals["saved_activation_bytes"]}
            self.extraction = extraction
            self.partitioner = extraction.partitioner
            if extraction.memory_budget is not None:
                self.memory_budget = extraction.memory_budget
            self.graph_index = min(self.graph_index, len(extraction.partitions) - 1)
            data = graph_payload(extraction, self.graph_index, previous)
            if self.selected and self.selected not in {n["id"] for n in data["nodes"]}:
                self.selected = ""
            self.data = data
        finally:
            self._updating = False

    def _switch(self, make: Callable[[], BackwardExtraction]) -> None:
        """Show another partition, with the busy flag up and errors as one line."""
        self.busy = True
        self.error = ""
        try:
            self._show(make(), previous=self.extraction)
        except BwdWidgetsError as error:
            self.error = str(error)
        finally:
            self.busy = False

    @traitlets.observe("partitioner", "memory_budget")
    def _rerun(self, change: dict) -> None:
        if self._updating:
            return
        takes_budget = {p["name"]: p["takes_budget"] for p in self.data["partitioners"]}
        budget = self.memory_budget if takes_budget.get(self.partitioner) else None
        self._switch(lambda: self.extraction.rerun(self.partitioner, budget))

    @traitlets.observe("compare_index")
    def _pick_comparison(self, change: dict) -> None:
        if not self._updating and self._comparison is not None and 0 <= change.new < len(self._comparison.extractions):
            self._switch(lambda: self._comparison.extractions[change.new])

    @traitlets.observe("sweep_index")
    def _pick_sweep_point(self, change: dict) -> None:
        if not self._updating and self._sweep is not None and 0 <= change.new < len(self._sweep.points):
            self._switch(lambda: self._sweep.points[change.new].extraction)

    @traitlets.observe("graph_index")
    def _switch_graph(self, change: dict) -> None:
        if not self._updating:
            self._show(self.extraction)

    @command
    def _sweep(self, message: dict, buffers: list) -> tuple[dict, list]:
        """The front end's Sweep button: `{"budgets": [...] | null}` -> `{"points": n, "interrupted": bool}`."""
        result = self.run_sweep(message.get("budgets") if isinstance(message, dict) else None)
        if result is None:
            return {"points": 0, "interrupted": False, "error": self.error}, []
        return {"points": len(result.points), "interrupted": result.interrupted, "error": ""}, []

    def run_sweep(self, budgets: list[float] | None = None) -> Sweep | None:
        """Sweep min-cut's memory budget from this extraction's joint graph; the chart fills in."""
        self.busy = True
        self.error = ""

        def progress(point: object, done: int, total: int) -> None:
            self.sweep_progress = f"{done}/{total}"

        try:
            result = sweep(self.extraction, budgets=budgets, progress=False, on_point=progress)
        except BwdWidgetsError as error:
            self.error = str(error)
            return None
        finally:
            self.busy = False
        if result.interrupted:
            self.sweep_progress += " (interrupted)"
        self._set_sweep(result)
        return result

    def _set_sweep(self, result: Sweep, index: int = -1) -> None:
        self._sweep = result
        updating, self._updating = self._updating, True
        try:
            self.sweep_index = index
            self.sweep_points = sweep_points(result)
        finally:
            self._updating = updating

    def _repr_mimebundle_(self, **kwargs: object) -> tuple[dict, dict]:
        """The widget, and beside it a static SVG (the first view and the headline numbers) that a
        saved notebook keeps for GitHub and nbviewer. Returns (data, metadata)."""
        bundle = super()._repr_mimebundle_(**kwargs)
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        data = {**data, "image/svg+xml": fallback_svg(self.data)}
        _note_drawn(self.extraction, self._comparison, self._sweep)
        return data, metadata

    def __repr__(self) -> str:
        totals = self.data["totals"]
        return (
            f"BackwardGraph(bw_nodes={len(self.data['nodes'])}, saved={totals['saved']}, "
            f"saved_activation_bytes={totals['saved_activation_bytes']})"
        )


def show(target: object, *example_inputs: object, **extract_kwargs: object) -> BackwardGraphWidget:
    """`show(extraction)`, `show(comparison)`, `show(sweep)`, or `show(model, *inputs, ...)`."""
    if isinstance(target, BackwardExtraction):
        return BackwardGraphWidget(target)
    if isinstance(target, Comparison):
        return BackwardGraphWidget(comparison=target)
    if isinstance(target, Sweep):
        return BackwardGraphWidget(sweep=target)
    return BackwardGraphWidget(extract(target, *example_inputs, **extract_kwargs))
