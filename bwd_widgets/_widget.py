"""The Jupyter widget: a thin layer of synced traits over an extraction."""

from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets

from ._errors import BwdWidgetsError
from ._graph_data import graph_payload

STATIC = Path(__file__).parent / "static"


class BackwardGraphWidget(anywidget.AnyWidget):
    """Backward graph, saved tensors and code, linked; partitioner controls rerun the extraction."""

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

    def __init__(self, extraction, **kwargs):
        self._updating = True
        super().__init__(**kwargs)
        self.can_rerun = bool(extraction.recipe)
        self._show(extraction)

    def _show(self, extraction) -> None:
        self._updating = True
        try:
            self.extraction = extraction
            self.partitioner = extraction.partitioner if extraction.partitioner in ("default", "min_cut") else "default"
            if extraction.memory_budget is not None:
                self.memory_budget = extraction.memory_budget
            self.graph_index = min(self.graph_index, len(extraction.graphs) - 1)
            data = graph_payload(extraction, self.graph_index)
            if self.selected and self.selected not in {n["id"] for n in data["nodes"]}:
                self.selected = ""
            self.data = data
        finally:
            self._updating = False

    @traitlets.observe("partitioner", "memory_budget")
    def _rerun(self, change) -> None:
        if self._updating:
            return
        self.busy = True
        self.error = ""
        try:
            budget = self.memory_budget if self.partitioner == "min_cut" else None
            extraction = self.extraction.rerun(self.partitioner, budget)
        except BwdWidgetsError as error:
            self.error = str(error)
        else:
            self.previous = {
                "saved": self.data["totals"]["saved"],
                "saved_activation_bytes": self.data["totals"]["saved_activation_bytes"],
            }
            self._show(extraction)
        finally:
            self.busy = False

    @traitlets.observe("graph_index")
    def _switch_graph(self, change) -> None:
        if not self._updating:
            self._show(self.extraction)

    def __repr__(self) -> str:
        totals = self.data["totals"]
        return (
            f"BackwardGraph(bw_nodes={len(self.data['nodes'])}, saved={totals['saved']}, "
            f"saved_activation_bytes={totals['saved_activation_bytes']})"
        )


def show(extraction_or_model, *example_inputs, **extract_kwargs) -> BackwardGraphWidget:
    """`show(extraction)`, or `show(model, *inputs, partitioner=...)` to extract first."""
    from ._extraction import BackwardExtraction

    if isinstance(extraction_or_model, BackwardExtraction):
        return BackwardGraphWidget(extraction_or_model)
    from ._extract import extract

    return BackwardGraphWidget(extract(extraction_or_model, *example_inputs, **extract_kwargs))
