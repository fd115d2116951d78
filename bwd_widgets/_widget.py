"""The Jupyter widget: a thin layer of synced traits over an extraction."""

from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets

from ._errors import BwdWidgetsError
from ._graph_data import graph_payload

STATIC = Path(__file__).parent / "static"


class BackwardGraphWidget(anywidget.AnyWidget):
    """Backward graph, saved tensors and code, linked; partitioner controls, comparisons
    and memory-budget sweeps partition the same joint graph again."""

    _esm = STATIC / "widget.js"
    _css = STATIC / "widget.css"

    data = traitlets.Dict().tag(sync=True)
    selected = traitlets.Unicode("").tag(sync=True)
    partitioner = traitlets.Unicode("default").tag(sync=True)
    memory_budget = traitlets.Float(1.0).tag(sync=True)
    graph_index = traitlets.Int(0).tag(sync=True)
    busy = traitlets.Bool(False).tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    previous = traitlets.Dict().tag(sync=True)
    can_rerun = traitlets.Bool(True).tag(sync=True)
    comparison_rows = traitlets.List().tag(sync=True)
    compare_index = traitlets.Int(-1).tag(sync=True)
    sweep_points = traitlets.List().tag(sync=True)
    sweep_index = traitlets.Int(-1).tag(sync=True)
    sweep_progress = traitlets.Unicode("").tag(sync=True)

    def __init__(self, extraction=None, comparison=None, sweep=None, **kwargs):
        self._updating = True
        super().__init__(**kwargs)
        self._comparison = comparison
        self._sweep = sweep
        if comparison is not None:
            self.comparison_rows = [dict(row) for row in comparison.rows]
            self.compare_index = 0
            extraction = comparison.extractions[0]
        if sweep is not None:
            if not sweep.points:
                raise BwdWidgetsError("the sweep has no points to show: run it again and let it finish a budget.")
            self._set_sweep(sweep, len(sweep.points) - 1)
            extraction = extraction or sweep.points[-1].extraction
        if extraction is None:
            raise BwdWidgetsError("nothing to show: pass an extraction, a comparison or a non-empty sweep.")
        self.can_rerun = bool(extraction.graphs[0].joint is not None)
        self.extraction = None
        self._show(extraction)
        self.on_msg(self._on_message)

    def _show(self, extraction, previous=None) -> None:
        self._updating = True
        try:
            if previous is not None:
                self.previous = {
                    "saved": self.data["totals"]["saved"],
                    "saved_activation_bytes": self.data["totals"]["saved_activation_bytes"],
                }
            self.extraction = extraction
            self.partitioner = extraction.partitioner if extraction.partitioner in ("default", "min_cut") else "default"
            if extraction.memory_budget is not None:
                self.memory_budget = extraction.memory_budget
            self.graph_index = min(self.graph_index, len(extraction.graphs) - 1)
            data = graph_payload(extraction, self.graph_index, previous)
            if self.selected and self.selected not in {n["id"] for n in data["nodes"]}:
                self.selected = ""
            self.data = data
        finally:
            self._updating = False

    def _switch(self, make) -> None:
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
    def _rerun(self, change) -> None:
        if self._updating:
            return
        budget = self.memory_budget if self.partitioner == "min_cut" else None
        self._switch(lambda: self.extraction.rerun(self.partitioner, budget))

    @traitlets.observe("compare_index")
    def _pick_comparison(self, change) -> None:
        if not self._updating and self._comparison is not None and 0 <= change.new < len(self._comparison.extractions):
            self._switch(lambda: self._comparison.extractions[change.new])

    @traitlets.observe("sweep_index")
    def _pick_sweep_point(self, change) -> None:
        if not self._updating and self._sweep is not None and 0 <= change.new < len(self._sweep.points):
            self._switch(lambda: self._sweep.points[change.new].extraction)

    @traitlets.observe("graph_index")
    def _switch_graph(self, change) -> None:
        if not self._updating:
            self._show(self.extraction)

    def _on_message(self, widget, content, buffers) -> None:
        if isinstance(content, dict) and content.get("type") == "sweep":
            self.run_sweep()

    def run_sweep(self, budgets=None):
        """Sweep min-cut's memory budget from this extraction's joint graph; the chart fills in."""
        from ._studio import sweep

        self.busy = True
        self.error = ""

        def progress(point, done, total):
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

    def _set_sweep(self, result, index=-1) -> None:
        from ._studio import sweep_payload

        self._sweep = result
        updating, self._updating = self._updating, True
        try:
            self.sweep_index = index
            self.sweep_points = sweep_payload(result)
        finally:
            self._updating = updating

    def __repr__(self) -> str:
        totals = self.data["totals"]
        return (
            f"BackwardGraph(bw_nodes={len(self.data['nodes'])}, saved={totals['saved']}, "
            f"saved_activation_bytes={totals['saved_activation_bytes']})"
        )


def show(extraction_or_model, *example_inputs, **extract_kwargs) -> BackwardGraphWidget:
    """`show(extraction)`, `show(comparison)`, `show(sweep)`, or `show(model, *inputs, ...)`."""
    from ._extraction import BackwardExtraction
    from ._studio import Comparison, Sweep

    if isinstance(extraction_or_model, BackwardExtraction):
        return BackwardGraphWidget(extraction_or_model)
    if isinstance(extraction_or_model, Comparison):
        return BackwardGraphWidget(comparison=extraction_or_model)
    if isinstance(extraction_or_model, Sweep):
        return BackwardGraphWidget(sweep=extraction_or_model)
    from ._extract import extract

    return BackwardGraphWidget(extract(extraction_or_model, *example_inputs, **extract_kwargs))
