"""The Jupyter widget: documented traits over the typed payload of `views.payload`."""

from __future__ import annotations

import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, cast, get_origin, get_type_hints

import anywidget
import traitlets
from anywidget.experimental import command

from ..core.errors import BwdWidgetsError, one_line
from ..extraction.extract import extract
from ..extraction.result import BackwardExtraction
from ..studio.advisor import Advice
from ..studio.compare import DEFAULT_BUDGETS, Comparison, Sweep, SweepPoint, sweep
from ..views.html import STATIC as STATIC  # where the built front end lies
from ..views.html import fallback_html, front_end
from ..views.payload import (
    STATE_DEFAULTS,
    GraphData,
    WidgetState,
    comparison_rows,
    encode_payload,
    graph_payload,
    since,
    sweep_points,
)
from ..views.plot import timeline
from ..views.static import Drawing, fallback_svg, first_view, headline
from .advising import Advising, ModelSource, first_shown, model_source
from .ahead import MadeAhead, same_trace
from .progress import extracting_status

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from IPython.display import DisplayHandle

    from ..core.measure import MeasuredMemory

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


_DEFAULTS: Mapping[str, object] = STATE_DEFAULTS
_KINDS: dict[object, type[traitlets.TraitType]] = {
    str: traitlets.Unicode,
    float: traitlets.Float,
    int: traitlets.Int,
    bool: traitlets.Bool,
    list: traitlets.List,
}


def _synced(name: str, help: str) -> traitlets.TraitType:
    """A synced trait as `views.payload.WidgetState` declares it (the one list of traits): its kind
    from the annotation (a TypedDict is a Dict), its default from `STATE_DEFAULTS`."""
    hint = get_type_hints(WidgetState)[name]
    kind = _KINDS.get(get_origin(hint) or hint, traitlets.Dict)
    trait = kind(default_value=_DEFAULTS[name], help=help) if name in _DEFAULTS else kind(help=help)
    return trait.tag(sync=True)


class BackwardGraphWidget(Advising, MadeAhead, anywidget.AnyWidget):
    """Backward graph, saved tensors and code, linked; partitioner controls, comparisons
    and memory-budget sweeps partition the same joint graph again."""

    _esm, _css = (path.read_text() for path in front_end())  # FrontEndNotBuiltError where `npm run build` has not run
    """The front end as text, not as paths: anywidget turns a path into a `FileContents` whose change signal each
    widget connects a closure over itself to (its hot reload), which kept every widget, and every extraction it
    showed, alive until the kernel ended."""

    data = _synced("data", "the GraphData payload of the partition shown").tag(
        to_json=lambda value, widget: BackwardGraphWidget._data_to_json(widget, value)
    )
    selected = _synced("selected", "id of the selected backward node; set it to select")
    partitioner = _synced("partitioner", "registered partitioner; setting it reruns")
    memory_budget = _synced("memory_budget", "budget for a partitioner that takes one")
    graph_index = _synced("graph_index", "which compiled region to show")
    busy = _synced("busy", "true while the kernel partitions or sweeps")
    error = _synced("error", "the last rerun's error, one line")
    previous = _synced("previous", "totals of the partition shown before")
    can_rerun = _synced("can_rerun", "whether a joint graph is kept to partition again")
    comparison_rows = _synced("comparison_rows", "ComparisonRow per compared partition")
    compare_index = _synced("compare_index", "comparison row shown; -1 for none")
    sweep_points = _synced("sweep_points", "SweepPoint per memory budget swept")
    sweep_index = _synced("sweep_index", "sweep point shown; -1 for none")
    sweep_progress = _synced("sweep_progress", "`done/total` while a sweep runs")
    can_advise = _synced("can_advise", "whether the model is kept, so the advisor can trace its plans")
    advice_rows = _synced("advice_rows", "AdvicePlanRow per plan of the last bw.advise")
    advice_index = _synced("advice_index", "advice row shown; -1 for none")
    advice_summary = _synced("advice_summary", "the advice's best plan or why none fits, one line")
    advice_progress = _synced("advice_progress", "the advisor's step while it runs")

    def __init__(
        self,
        extraction: BackwardExtraction | None = None,
        comparison: Comparison | None = None,
        sweep: Sweep | None = None,
        advice: Advice | None = None,
        source: ModelSource | None = None,
        **kwargs: object,
    ) -> None:
        self._updating = True
        self._sending: tuple[object, bytes | None, bytes | None] = (None, None, None)
        """(the `data` shown, its `encode_without_diff` when built ahead, its `encode_payload` once sent);
        set before the traits, which ipywidgets may send while they are made."""
        super().__init__(**kwargs)
        self._comparison = comparison
        self._swept = sweep
        self._start_advising(advice, source)
        self._sweep_lock = threading.Lock()
        self._sweeping = False
        self._cancel = threading.Event()
        self._start_ahead()
        if comparison is not None:
            self.comparison_rows = comparison_rows(comparison)
            self.compare_index = 0
            extraction = comparison.extractions[0]
        if sweep is not None:
            if not sweep.points:
                raise BwdWidgetsError("the sweep has no points to show: run it again and let it finish a budget.")
            self._set_sweep(sweep, len(sweep.points) - 1)
            extraction = extraction or sweep.points[-1].extraction
        extraction = extraction or (first_shown(advice) if advice is not None else None)
        if extraction is None:
            raise BwdWidgetsError("nothing to show: pass an extraction, a comparison, a non-empty sweep or advice.")
        self._adopt_source(extraction)
        self.extraction = extraction
        self._show(extraction)

    def _show(self, extraction: BackwardExtraction, previous: BackwardExtraction | None = None) -> None:
        self._updating = True
        try:
            with self.hold_sync():  # one message: the panes see the new partition and its traits together
                if getattr(self, "extraction", None) is not None and not same_trace(self.extraction, extraction):
                    self._forget_ahead()  # another model's partitions: the browser's are not for it
                if previous is not None:
                    shown = self.payload["partition"]
                    self.previous = {"saved": shown["saved"], "saved_activation_bytes": shown["saved_activation_bytes"]}
                self.extraction = extraction
                self.partitioner = extraction.partitioner
                if extraction.memory_budget is not None:
                    self.memory_budget = extraction.memory_budget
                self.graph_index = min(self.graph_index, len(extraction.partitions) - 1)
                self.sweep_index = self._sweep_point_of(extraction)
                self.advice_index = self._advice_row_of(extraction)
                data, without_diff = self._payload(extraction, previous)
                if self.selected and self.selected not in {n["id"] for n in data["nodes"]}:
                    self.selected = ""
                sent = dict(data)
                self._sending = (sent, without_diff, None)
                self.data = sent
        finally:
            self._updating = False

    def _payload(
        self, extraction: BackwardExtraction, previous: BackwardExtraction | None
    ) -> tuple[GraphData, bytes | None]:
        """`graph_payload` for the graph shown, with the diff against `previous`: the one `_prepare` built
        ahead when it still holds (same graph, same measurement), with its encoding without the diff."""
        with self._building:
            kept = self._prepared.get(id(extraction))
            if (
                kept is not None
                and kept[0] is extraction
                and kept[1] == self.graph_index
                and kept[2] is extraction.measured
            ):
                return since(kept[3], extraction, previous), kept[4]
            return graph_payload(extraction, self.graph_index, previous), None

    def _data_to_json(self, value: object) -> memoryview:
        """The `data` trait on the wire: `encode_payload`, from the encoding made ahead when there is one."""
        shown, without_diff, encoded = self._sending
        if shown is not value:
            return memoryview(encode_payload(cast("GraphData", value)))
        if encoded is None:
            encoded = encode_payload(cast("GraphData", value), without_diff)
            self._sending = (shown, without_diff, encoded)
        return memoryview(encoded)

    def _sweep_point_of(self, extraction: BackwardExtraction) -> int:
        """The sweep point the shown partition is (min-cut at that point's budget), or -1: the chart's
        "current" marker follows the slider instead of staying where it was last clicked."""
        points = self._swept.points if self._swept is not None else []
        for index, point in enumerate(points):
            same_plan = extraction.partitioner == "min_cut" and extraction.memory_budget == point.budget
            if point.extraction_made is extraction or same_plan:
                return index
        return -1

    def measure(self) -> MeasuredMemory:
        """Measure the partition shown (`BackwardExtraction.measure`: it runs the model, so only when
        asked) and redraw, so the memory pane draws the measured curve over the predicted one with the
        error in percent. `g.measure()` on an extraction already shown needs this, or a new `bw.show(g)`."""
        measured = self.extraction.measure()
        self._show(self.extraction)
        self._forget_ahead()
        self._send_ahead()  # all but the one measured, whose payload built ahead no longer holds
        return measured

    @property
    def payload(self) -> GraphData:
        """The `data` trait as what it is: the GraphData of the partition shown."""
        return cast("GraphData", self.data)

    def _switch(self, make: Callable[[], BackwardExtraction]) -> None:
        """Show another partition, with the busy flag up and errors as one line."""
        self.busy = True
        self.error = ""
        try:
            self._show(make(), previous=self.extraction)
        except BwdWidgetsError as error:
            self.error = str(error)
        finally:
            self.busy = self._sweeping or self._advising
        if not self.error and self.extraction.partitioner == "min_cut" and self.memory_budget is not None:
            self._partition_neighbours(self.extraction)

    @traitlets.observe("partitioner", "memory_budget")
    def _rerun(self, change: traitlets.Bunch) -> None:
        if self._updating:
            return
        takes_budget = {p["name"]: p["takes_budget"] for p in self.payload["partitioners"]}
        budget = self.memory_budget if takes_budget.get(self.partitioner) else None
        self._switch(lambda: self._partitioned(self.partitioner, budget))

    def _partitioned(self, partitioner: str, budget: float | None) -> BackwardExtraction:
        """The extraction under (partitioner, budget): a swept budget's own partition when the sweep has it,
        or one made ahead beside the last move, else partitioned again from the kept joint graph
        (partitions do not change once built)."""
        if partitioner == "min_cut" and budget is not None:
            swept = [p.extraction for p in self._swept.points if p.budget == budget] if self._swept else []
            for kept in [*swept, self._neighbours.get(round(budget, 4))]:
                if kept is not None and same_trace(kept, self.extraction):
                    return kept
        return self.extraction.rerun(partitioner, budget)

    @traitlets.observe("compare_index")
    def _pick_comparison(self, change: traitlets.Bunch) -> None:
        comparison, index = self._comparison, change["new"]
        if not self._updating and comparison is not None and 0 <= index < len(comparison.extractions):
            self._switch(lambda: comparison.extractions[index])

    @traitlets.observe("sweep_index")
    def _pick_sweep_point(self, change: traitlets.Bunch) -> None:
        swept, index = self._swept, change["new"]
        if self._updating or index == self._sweep_point_of(self.extraction):
            return  # the plan shown already (a sweep point arriving marks it current)
        if swept is not None and 0 <= index < len(swept.points):
            extraction = swept.points[index].extraction
            if extraction is not None:
                self._switch(lambda: extraction)

    @traitlets.observe("graph_index")
    def _switch_graph(self, change: traitlets.Bunch) -> None:
        if not self._updating:
            self._show(self.extraction)

    @command
    def _sweep(self, message: dict, buffers: list) -> tuple[dict, list]:
        """The front end's Sweep button: `{"budgets": [...] | null}` starts the sweep in a thread and answers at
        once (`{"started": bool, "error": str}`): the kernel stays free for the cancel button, and the points
        arrive one by one as the sweep_* traits."""
        budgets = message.get("budgets") if isinstance(message, dict) else None
        started = self.start_sweep(budgets)
        return {"started": started is not None, "error": self.error}, []

    @command
    def _cancel_sweep(self, message: dict, buffers: list) -> tuple[dict, list]:
        """The front end's Cancel button: the sweep stops before its next budget (`{"cancelled": bool}`)."""
        return {"cancelled": self.cancel_sweep()}, []

    def start_sweep(self, budgets: list[float] | None = None) -> threading.Thread | None:
        """`run_sweep` in a thread of its own (None when a sweep already runs): the busy flag is up before
        this returns."""
        with self._sweep_lock:
            if self._sweeping or self._advising:
                return None
            self._sweeping, self.busy = True, True
        thread = threading.Thread(target=self.run_sweep, args=(budgets,), name="bwd-widgets-sweep", daemon=True)
        thread.start()
        return thread

    def cancel_sweep(self) -> bool:
        """Stop the running sweep before its next budget; the points done stay. False when none runs."""
        if not self._sweeping:
            return False
        self._cancel.set()
        return True

    def run_sweep(self, budgets: list[float] | None = None) -> Sweep | None:
        """Sweep min-cut's memory budget from this extraction's joint graph; each point is drawn as it comes."""
        self._sweeping, self.busy = True, True
        self._cancel.clear()
        self.error = ""
        listed = DEFAULT_BUDGETS if budgets is None else budgets if isinstance(budgets, (list, tuple)) else ()
        self.sweep_progress = f"0/{len(listed)}"  # the Cancel button shows from now on
        done: list = []
        order = {budget: index for index, budget in reversed(list(enumerate(listed)))}

        def progress(point: SweepPoint, count: int, total: int) -> None:
            done.append(point)
            done.sort(key=lambda p: order.get(p.budget, len(order)))  # workers' points come out of order
            self.sweep_progress = f"{count}/{total}"  # before the point: a chart of n points reads n/total
            self._set_sweep(Sweep(list(done)))

        try:
            result = sweep(
                self.extraction, budgets=budgets, progress=False, on_point=progress, should_stop=self._cancel.is_set
            )
        except BwdWidgetsError as error:
            self.error, self.sweep_progress = str(error), ""
            return None
        except Exception as error:  # noqa: BLE001 - in the sweep's thread nothing else would say it
            self.error, self.sweep_progress = f"the sweep failed: {one_line(error)}", ""
            return None
        finally:
            self._sweeping = False
            self.busy = self._advising
        if result.interrupted:
            self.sweep_progress += " (cancelled)" if self._cancel.is_set() else " (interrupted)"
        if result.points:
            self._set_sweep(result)
            self._prepare(result.points)
        return result

    def _set_sweep(self, result: Sweep, index: int | None = None) -> None:
        """Show `result` in the chart, its current point the partition shown (or `index`)."""
        self._swept = result
        self.sweep_points = sweep_points(result)
        self.sweep_index = self._sweep_point_of(self.extraction) if index is None else index

    def first_view(self) -> Drawing | None:
        """The static drawing of the first view of the partition shown (laid out once per payload)."""
        return self._drawing_of(self.data)

    def _drawing_of(self, data: object) -> Drawing | None:
        """`first_view` of payload `data` (the one shown, or one a thread took before the next move), kept for
        the payload shown last."""
        cached = getattr(self, "_first_view", None)
        if cached is None or cached[0] is not data:
            cached = (data, first_view(cast("GraphData", data)))
            self._first_view = cached
        return cached[1]

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict, dict]:
        """The widget, and beside it a static SVG (the first view and the headline numbers) that a
        saved notebook keeps for GitHub and nbviewer, and an empty HTML part: what an untrusted notebook
        shows here (the picture after it, `jupyter/display.py`, says it all). Returns (data, metadata).

        The SVG is the partition shown when the widget was displayed: it does not follow the widget. Its
        output holds the widget's view, and a front end draws that output again from scratch when its data
        changes (ipywidgets' renderer makes a new view: zoom, selection and opened groups would be lost at
        every move); the picture after it follows instead (`_ipython_display_`)."""
        bundle = super()._repr_mimebundle_(**kwargs)
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        data = {**(data or {}), "image/svg+xml": fallback_svg(self.payload, drawing=self.first_view()), "text/html": ""}
        _note_drawn(self.extraction, self._comparison, self._swept)
        return data, metadata or {}

    def _ipython_display_(self) -> None:
        """`display(widget)`, or a widget that ends a cell: the widget, then its static picture (shown
        instead when the widget cannot be drawn: `jupyter/display.py`). The picture is published under a
        display id and follows the partition the widget shows (`follow_picture`), so a saved notebook
        keeps the partition its author left on screen."""
        from IPython.display import display

        self.publish()
        handle = display(self.picture_bundle(), raw=True, display_id=True)
        if handle is not None:
            self.follow_picture(handle)

    def publish(self, text: str | None = None) -> None:
        """Publish the widget's own output (its text `text`, if given)."""
        from IPython.display import display

        data, metadata = self._repr_mimebundle_()
        display({**data, "text/plain": text} if text is not None else data, metadata=metadata, raw=True)

    def picture_bundle(self, text: str | None = None, data: object = None) -> dict:
        """The static picture's output that follows the widget's: HTML, shown trusted or not (a style rule
        in it hides it beside a drawn widget), and as text `text` or the headline numbers. Of the partition
        shown, or of payload `data`."""
        shown = cast("GraphData", self.data if data is None else data)
        chart = timeline({shown["model"]: shown["run"]["memory"]["timeline"]}, title="Activation memory over time")
        return {
            "text/html": fallback_html(shown, self._drawing_of(shown), chart.svg),
            "text/plain": text if text is not None else "\n".join(headline(shown)),
        }

    # the picture follows the partition shown ---------------------------------------------------------------------

    PICTURE_PAUSE_S = 0.6
    """How long the partition shown must stay before its picture is made: a slider dragged across ten budgets
    makes one picture, of where it stopped."""

    def follow_picture(self, handle: DisplayHandle, text: str | None = None) -> None:
        """Keep the picture published under `handle` (its text `text`, else the headline numbers) showing the
        partition the widget shows: each change of the `data` trait redraws it, in a thread of its own once the
        widget has paused for PICTURE_PAUSE_S (the latest partition only), and sends it as an update of that
        display id, which the front end puts in place of the output (so a save keeps it). Every display of the
        widget follows; a closed widget stops."""
        if getattr(self, "_pictures", None) is None:
            self._picture_lock = threading.Condition()
            self._picture_thread: threading.Thread | None = None
            self._picture_wanted = 0  # changes of `data` since the widget was made: a new one restarts the pause
            self._picture_due = 0.0
            self._picture_sent: object = self.data
            self._pictures: list[tuple[DisplayHandle, str | None]] = []
        with self._picture_lock:
            self._pictures.append((handle, text))

    @traitlets.observe("data")
    def _picture_follows(self, change: traitlets.Bunch) -> None:
        if not getattr(self, "_pictures", None) or self.comm is None:
            return
        with self._picture_lock:
            self._picture_wanted += 1
            self._picture_due = time.monotonic() + self.PICTURE_PAUSE_S
            self._picture_lock.notify_all()
            if self._picture_thread is None:
                self._picture_thread = threading.Thread(
                    target=self._redraw_pictures, name="bwd-widgets-picture", daemon=True
                )
                self._picture_thread.start()

    def _redraw_pictures(self) -> None:
        """The picture thread: wait for a pause, draw the partition shown, update every display of it; again
        while the widget moved meanwhile; then end (no thread, so no reference to the widget, stays behind)."""
        while True:
            with self._picture_lock:
                while (wait := self._picture_due - time.monotonic()) > 0:
                    self._picture_lock.wait(wait)
                wanted, data, pictures = self._picture_wanted, self.data, list(self._pictures)
            if self.comm is not None and data is not self._picture_sent:  # a closed widget draws no more
                try:
                    bundles = {text: self.picture_bundle(text, data) for text in {text for _, text in pictures}}
                    for handle, text in pictures:
                        handle.update(bundles[text], raw=True)
                    self._picture_sent = data
                except Exception as error:  # noqa: BLE001 - in this thread nothing else would say it
                    self.error = f"the static picture was not redrawn: {one_line(error)}"
            with self._picture_lock:
                if self._picture_wanted == wanted or self.comm is None:
                    self._picture_thread = None
                    return

    def wait_for_picture(self, timeout: float | None = None, pause: bool = True) -> bool:
        """Wait until every picture shows the partition shown (True), or `timeout` seconds (False); with
        `pause=False`, draw it now instead of after the pause."""
        if not pause and getattr(self, "_pictures", None) is not None:
            with self._picture_lock:
                self._picture_due = 0.0
                self._picture_lock.notify_all()
        thread = getattr(self, "_picture_thread", None)
        while thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                return False
            thread = self._picture_thread
        return True

    def __repr__(self) -> str:
        shown = self.payload["partition"]
        return (
            f"BackwardGraph(bw_nodes={shown['backward_nodes']}, saved={shown['saved']}, "
            f"saved_activation_bytes={shown['saved_activation_bytes']})"
        )


def show(target: Any, *example_inputs: object, **extract_kwargs: Any) -> BackwardGraphWidget:
    """`show(extraction)`, `show(comparison)`, `show(sweep)`, `show(advice)`, or `show(model, *inputs, ...)`."""
    if isinstance(target, BackwardExtraction):
        return BackwardGraphWidget(target)
    if isinstance(target, Comparison):
        return BackwardGraphWidget(comparison=target)
    if isinstance(target, Sweep):
        return BackwardGraphWidget(sweep=target)
    if isinstance(target, Advice):
        return BackwardGraphWidget(advice=target)
    with extracting_status(target, extract_kwargs.get("mode", "real")):
        extraction = extract(target, *example_inputs, **extract_kwargs)
    return BackwardGraphWidget(extraction, source=model_source(target, example_inputs, extract_kwargs))
