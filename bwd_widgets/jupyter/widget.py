"""The Jupyter widget: documented traits over the typed payload of `views.payload`."""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast, get_origin, get_type_hints

import anywidget
import traitlets
from anywidget.experimental import command

from ..core.errors import BwdWidgetsError, CallError
from ..extraction.extract import extract
from ..extraction.result import BackwardExtraction
from ..studio.advisor import Advice
from ..studio.compare import Comparison, Sweep
from ..views.html import STATIC as STATIC  # where the built front end lies
from ..views.html import front_end
from ..views.payload import (
    STATE_DEFAULTS,
    GraphData,
    WidgetState,
    advice_rows,
    advice_summary,
    comparison_rows,
    encode_payload,
    sweep_points,
)
from ..views.static import Drawing, fallback_svg
from .advising import ModelSource, advice_plans, model_source, plan_extraction, unusable_target
from .ahead import same_trace
from .jobs import ADVISE, SWEEP, Job, JobRunner
from .picture import FollowingPictures
from .progress import extracting_status
from .session import WidgetSession

if TYPE_CHECKING:
    import threading
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


@dataclass(eq=False)
class _Wire:
    """The `data` trait's bytes on the wire: the payload shown, its `encode_without_diff` when it was built
    ahead, and its `encode_payload` once sent (ipywidgets may serialise it more than once)."""

    shown: object
    without_diff: bytes | None
    encoded: bytes | None


def _synced(name: str, help: str) -> traitlets.TraitType:
    """A synced trait as `views.payload.WidgetState` declares it (the one list of traits): its kind
    from the annotation (a TypedDict is a Dict), its default from `STATE_DEFAULTS`."""
    hint = get_type_hints(WidgetState)[name]
    kind = _KINDS.get(get_origin(hint) or hint, traitlets.Dict)
    trait = kind(default_value=_DEFAULTS[name], help=help) if name in _DEFAULTS else kind(help=help)
    return trait.tag(sync=True)


class BackwardGraphWidget(anywidget.AnyWidget):
    """Backward graph, saved tensors and code, linked; partitioner controls, comparisons
    and memory-budget sweeps partition the same joint graph again.

    The traits below are what the browser sees and sets; the commands (`_sweep`, `_advise`, and their
    cancels) are its buttons. What the widget shows and keeps lies in `session` (jupyter/session.py); the work
    it does in the background runs through one runner (jupyter/jobs.py)."""

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
        self._wire = _Wire(None, None, None)  # before the traits, which ipywidgets may send while they are made
        super().__init__(**kwargs)
        shown = WidgetSession.opened_on(extraction, comparison, sweep, advice)
        self._jobs = JobRunner(on_error=functools.partial(setattr, self, "error"), on_busy=self._jobs_busy)
        self.session = WidgetSession(
            shown, comparison=comparison, sweep=sweep, advice=advice, source=source, send=self._to_browser,
            jobs=self._jobs,
        )  # fmt: skip
        """What the widget shows and keeps: the extraction shown, the comparison, sweep and advice, the model
        source, the partitions and payloads made ahead."""
        self._pictures = FollowingPictures(
            lambda: self.data, lambda: self.comm is not None, lambda: self.PICTURE_PAUSE_S, self._jobs
        )
        self.can_advise = self.session.source is not None
        self.on_msg(self._on_browser_message)
        if comparison is not None:
            self.comparison_rows = comparison_rows(comparison)
            self.compare_index = 0
        if sweep is not None:
            self._set_sweep(sweep)
        if advice is not None:
            self._set_advice(advice)
        self._show(shown)

    @property
    def extraction(self) -> BackwardExtraction:
        """The extraction shown."""
        return self.session.shown

    @property
    def payload(self) -> GraphData:
        """The `data` trait as what it is: the GraphData of the partition shown."""
        return cast("GraphData", self.data)

    # what is shown -------------------------------------------------------------------------------------------

    def _show(self, extraction: BackwardExtraction, previous: BackwardExtraction | None = None) -> None:
        session = self.session
        self._updating = True
        try:
            with self.hold_sync():  # one message: the panes see the new partition and its traits together
                if not same_trace(session.shown, extraction):
                    session.ahead.forget()  # another model's partitions: the browser's are not for it
                if previous is not None:
                    shown = self.payload["partition"]
                    self.previous = {"saved": shown["saved"], "saved_activation_bytes": shown["saved_activation_bytes"]}
                session.shown = extraction
                self.can_rerun = extraction.partitions_again
                self._controls_show(extraction)
                self.graph_index = session.graph_index = min(self.graph_index, len(extraction.partitions) - 1)
                self.sweep_index = session.sweep_point_of(extraction)
                self.advice_index = session.advice_row_of(extraction)
                data, without_diff = session.ahead.payload(extraction, session.graph_index, previous)
                if self.selected and self.selected not in {n["id"] for n in data["nodes"]}:
                    self.selected = ""
                sent = dict(data)
                self._wire = _Wire(sent, without_diff, None)
                self.data = sent
        finally:
            self._updating = False

    def _controls_show(self, extraction: BackwardExtraction) -> None:
        """The partitioner and budget controls set to `extraction`'s (the caller holds `_updating`)."""
        self.partitioner = extraction.partitioner
        if extraction.memory_budget is not None:
            self.memory_budget = extraction.memory_budget

    def _data_to_json(self, value: object) -> memoryview:
        """The `data` trait on the wire: `encode_payload`, from the encoding made ahead when there is one."""
        wire = self._wire
        if wire.shown is not value:
            return memoryview(encode_payload(cast("GraphData", value)))
        if wire.encoded is None:
            wire.encoded = encode_payload(cast("GraphData", value), wire.without_diff)
        return memoryview(wire.encoded)

    def measure(self) -> MeasuredMemory:
        """Measure the partition shown (`BackwardExtraction.measure`: it runs the model, so only when
        asked) and redraw, so the memory pane draws the measured curve over the predicted one with the
        error in percent. `g.measure()` on an extraction already shown needs this, or a new `bw.show(g)`."""
        measured = self.extraction.measure()
        self._show(self.extraction)
        self.session.ahead.forget()
        self.session.ahead.send_ahead()  # all but the one measured, whose payload built ahead no longer holds
        return measured

    def _switch(self, make: Callable[[], BackwardExtraction]) -> None:
        """Show another partition, with the busy flag up and errors as one line."""
        self.busy = True
        self.error = ""
        try:
            self._show(make(), previous=self.extraction)
        except BwdWidgetsError as error:
            self.error = str(error)
            self._updating = True
            try:
                self._controls_show(self.extraction)  # the move was refused: the controls say what is shown
            finally:
                self._updating = False
        finally:
            self.busy = self._jobs.busy
        if not self.error and self.extraction.partitioner == "min_cut" and self.memory_budget is not None:
            self._partition_neighbours(self.extraction)

    def _partitioned(self, partitioner: str, budget: float | None) -> BackwardExtraction:
        """The extraction a move to (partitioner, budget) shows (`WidgetSession.partitioned`)."""
        return self.session.partitioned(partitioner, budget)

    def _partition_neighbours(self, shown: BackwardExtraction) -> threading.Thread | None:
        """The slider's two neighbouring budgets of `shown`, partitioned ahead (`MadeAhead.partition_neighbours`)."""
        return self.session.ahead.partition_neighbours(shown, self.session.swept_budgets())

    # the controls ----------------------------------------------------------------------------------------------

    @traitlets.observe("partitioner", "memory_budget")
    def _rerun(self, change: traitlets.Bunch) -> None:
        if self._updating:
            return
        takes_budget = {p["name"]: p["takes_budget"] for p in self.payload["partitioners"]}
        budget = self.memory_budget if takes_budget.get(self.partitioner) else None
        self._switch(lambda: self._partitioned(self.partitioner, budget))

    @traitlets.observe("compare_index")
    def _pick_comparison(self, change: traitlets.Bunch) -> None:
        comparison, index = self.session.comparison, change["new"]
        if not self._updating and comparison is not None and 0 <= index < len(comparison.extractions):
            self._switch(lambda: comparison.extractions[index])

    @traitlets.observe("sweep_index")
    def _pick_sweep_point(self, change: traitlets.Bunch) -> None:
        swept, index = self.session.sweep, change["new"]
        if self._updating or index == self.session.sweep_point_of(self.extraction):
            return  # the plan shown already (a sweep point arriving marks it current)
        if swept is not None and 0 <= index < len(swept.points):
            extraction = swept.points[index].extraction
            if extraction is not None:
                self._switch(lambda: extraction)

    @traitlets.observe("advice_index")
    def _pick_plan(self, change: traitlets.Bunch) -> None:
        plans, index = advice_plans(self.session.advice), change["new"]
        if self._updating or not 0 <= index < len(plans) or not plans[index].shows_partition:
            return
        plan = plans[index]
        self._switch(lambda: plan_extraction(plan))

    @traitlets.observe("graph_index")
    def _switch_graph(self, change: traitlets.Bunch) -> None:
        if not self._updating:
            self._show(self.extraction)

    # the sweep -------------------------------------------------------------------------------------------------

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
        """`run_sweep` in a thread of its own (None when a sweep or the advisor already runs): the busy flag is up
        before this returns."""
        return self._jobs.start(SWEEP, lambda job: self.run_sweep(budgets))

    def cancel_sweep(self) -> bool:
        """Stop the running sweep before its next budget; the points done stay. False when none runs."""
        return self._jobs.cancel(SWEEP)

    def run_sweep(self, budgets: list[float] | None = None) -> Sweep | None:
        """Sweep min-cut's memory budget from this extraction's joint graph; each point is drawn as it comes."""
        shown_as = functools.partial(setattr, self, "sweep_progress")
        return self._jobs.run(SWEEP, lambda job: self._swept_in(job, budgets), shown_as)

    def _swept_in(self, job: Job, budgets: list[float] | None) -> Sweep:
        self.error = ""
        result = self.session.swept(job, budgets, self._set_sweep)
        if result.points:
            self._set_sweep(result)
            self.session.ahead.prepare(result.points)
        return result

    def _set_sweep(self, result: Sweep) -> None:
        """Show `result` in the chart, its current point the partition shown."""
        self.session.sweep = result
        self.sweep_points = sweep_points(result)
        self.sweep_index = self.session.sweep_point_of(self.extraction)

    # the advisor -----------------------------------------------------------------------------------------------

    @command
    def _advise(self, message: dict, buffers: list) -> tuple[dict, list]:
        """The front end's Advise button: `{"target": "24GB", "time": bool}` starts `bw.advise` in a thread and
        answers at once (`{"started": bool, "error": str}`); the steps arrive as `advice_progress`, the plans as
        `advice_rows`. `time` also times each Pareto plan's step here (the step time column)."""
        target = message.get("target", "") if isinstance(message, dict) else ""
        timed = bool(message.get("time", False)) if isinstance(message, dict) else False
        started = self.start_advise(str(target), measure_time=timed)
        return {"started": started is not None, "error": self.error}, []

    @command
    def _cancel_advise(self, message: dict, buffers: list) -> tuple[dict, list]:
        """The front end's Cancel button for the advisor: it stops after the step under way (`{"cancelled": bool}`)."""
        return {"cancelled": self._jobs.cancel(ADVISE)}, []

    def start_advise(self, target: str, measure_time: bool = False) -> threading.Thread | None:
        """`run_advise(target)` in a thread (None, with `error` set, for a bad target, timing asked of a fake-mode
        widget, a widget without its model; None while a sweep or another advice runs)."""
        self.error = unusable_target(target, measure_time, self.extraction.mode, self.session.source)
        if self.error:
            return None
        return self._jobs.start(ADVISE, lambda job: self.run_advise(target, measure_time))

    def run_advise(self, target: int | str, measure_time: bool = False) -> Advice | None:
        """`bw.advise` on the model this widget was opened with, for `target` bytes of activation memory (and
        `measure_time`, as bw.advise takes it); each step is shown as it starts, the plans when it ends (a plan
        row shows its partition)."""
        self.session.needs_source()
        shown_as = functools.partial(setattr, self, "advice_progress")
        return self._jobs.run(ADVISE, lambda job: self._advised_in(job, target, measure_time), shown_as)

    def _advised_in(self, job: Job, target: int | str, measure_time: bool) -> Advice:
        advice = self.session.advised(job, target, measure_time)
        self._set_advice(advice)
        return advice

    def _set_advice(self, advice: Advice) -> None:
        """Show `advice`'s plans in the partitions tab, the plan shown marked when it is one of them."""
        self.session.advice = advice
        with self.hold_sync():
            self.advice_rows = advice_rows(advice)
            self.advice_summary = advice_summary(advice)
            self.advice_index = self.session.advice_row_of(self.extraction)

    # the browser -----------------------------------------------------------------------------------------------

    def _jobs_busy(self, busy: bool) -> None:
        self.busy = busy

    def _to_browser(self, content: dict, buffers: list | None) -> None:
        """A custom message to the browser (`send`, looked up at each call)."""
        self.send(content, buffers=buffers)

    def _on_browser_message(self, widget: object, content: object, buffers: list) -> None:
        """`{"send_ahead": true}`: a view loaded afresh (a page reload) asks for the payloads made ahead."""
        if isinstance(content, dict) and content.get("send_ahead"):
            self.session.ahead.send_again()

    # the static picture ----------------------------------------------------------------------------------------

    def first_view(self) -> Drawing | None:
        """The static drawing of the first view of the partition shown (laid out once per payload)."""
        return self._pictures.drawing_of(self.data)

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
        _note_drawn(self.extraction, self.session.comparison, self.session.sweep)
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
        return self._pictures.bundle(text, data)

    PICTURE_PAUSE_S = 0.6
    """How long the partition shown must stay before its picture is made: a slider dragged across ten budgets
    makes one picture, of where it stopped."""

    def follow_picture(self, handle: DisplayHandle, text: str | None = None) -> None:
        """Keep the picture published under `handle` (its text `text`, else the headline numbers) showing the
        partition the widget shows: each change of the `data` trait redraws it, as the `picture` job once the
        widget has paused for PICTURE_PAUSE_S (the latest partition only), and sends it as an update of that
        display id, which the front end puts in place of the output (so a save keeps it). Every display of the
        widget follows; a closed widget stops."""
        self._pictures.follow(handle, text)

    @traitlets.observe("data")
    def _picture_follows(self, change: traitlets.Bunch) -> None:
        self._pictures.shown_changed()

    def wait_for_picture(self, timeout: float | None = None, pause: bool = True) -> bool:
        """Wait until every picture shows the partition shown (True), or `timeout` seconds (False); with
        `pause=False`, draw it now instead of after the pause."""
        return self._pictures.wait(timeout, pause)

    def __repr__(self) -> str:
        shown = self.payload["partition"]
        return (
            f"BackwardGraph(bw_nodes={shown['backward_nodes']}, saved={shown['saved']}, "
            f"saved_activation_bytes={shown['saved_activation_bytes']})"
        )


def show(target: Any, *example_inputs: object, **extract_kwargs: Any) -> BackwardGraphWidget:
    """`show(extraction)`, `show(comparison)`, `show(sweep)`, `show(advice)`, or `show(model, *inputs, ...)`."""
    shown = (BackwardExtraction, Comparison, Sweep, Advice)
    if isinstance(target, shown) and (example_inputs or extract_kwargs):
        given = ", ".join([*(["inputs"] if example_inputs else []), *extract_kwargs])
        raise CallError(
            f"bw.show({type(target).__name__}) shows a result as it is, so {given} would be ignored: pass the model "
            "and its inputs to extract again, or rerun() to partition again."
        )
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
