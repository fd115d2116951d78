"""The widget's advisor: `bw.advise` from the partitions tab's target field, in a thread, its steps and plans
as traits, and a plan row that shows the plan's partition. A mixin of `BackwardGraphWidget` (jupyter/widget.py
declares the traits); `show(model, x)` and `%bwd_extract` hand it the model (`model_source`)."""

from __future__ import annotations

import threading
import types
import weakref
from typing import TYPE_CHECKING, Any, cast

from anywidget.experimental import command

from ..core.errors import BwdWidgetsError, one_line
from ..studio.advisor import Advice, Plan, advise, parse_bytes, remade_here
from ..studio.spawned import in_spawned_process
from ..views.payload import advice_rows, advice_summary

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    import traitlets

    from ..core.trace import Trace
    from ..extraction.result import BackwardExtraction

ModelSource = tuple[Any, tuple, dict]
"""(model, example inputs, extract keywords) a widget was opened with: what the advisor traces again."""

_SOURCES: weakref.WeakKeyDictionary[Trace, tuple[Callable[[], Any], tuple, dict]] = weakref.WeakKeyDictionary()
"""The joint graph of each extraction a widget was opened on with its model -> that model (weakly where it can
be) and its inputs: a later widget of the same extraction (`g` on the next line after `g = %bwd_extract ...`),
of a partition made again from it, or of advice on it, offers the advisor too, while the model lives."""


def _weakly(model: Any) -> Callable[[], Any]:
    """A reference to `model` that does not keep it alive, where Python allows one."""
    if isinstance(model, types.MethodType):
        return weakref.WeakMethod(model)
    try:
        return weakref.ref(model)
    except TypeError:  # a builtin or a functools.partial of one: kept as it is
        return lambda: model


def remembered_source(extraction: BackwardExtraction, source: ModelSource | None) -> ModelSource | None:
    """`source` remembered for `extraction`'s joint graph, or, when None, the one remembered for it (None
    where none was, or its model is gone)."""
    trace = extraction.partitions[0].trace
    if source is not None:
        model, inputs, kwargs = source
        _SOURCES[trace] = (_weakly(model), inputs, kwargs)
        return source
    kept = _SOURCES.get(trace)
    model = kept[0]() if kept is not None else None
    return None if kept is None or model is None else (model, kept[1], kept[2])


class Advising:
    """The advisor's half of the widget: `start_advise` / `run_advise`, the `_advise` and `_cancel_advise`
    commands, and `advice_index` showing a plan."""

    if TYPE_CHECKING:  # the widget's traits and what it sets up in __init__ (jupyter/widget.py)
        busy: bool
        error: str
        can_advise: bool
        advice_rows: list
        advice_index: int
        advice_summary: str
        advice_progress: str
        extraction: BackwardExtraction
        _updating: bool
        _source: ModelSource | None
        _sweeping: bool
        _sweep_lock: threading.Lock

        def hold_sync(self) -> Any: ...
        def _switch(self, make: Callable[[], BackwardExtraction]) -> None: ...

    def _adopt_source(self, extraction: BackwardExtraction) -> None:
        """Remember the model this widget was opened with for `extraction`, or take the one remembered."""
        self._source = remembered_source(extraction, self._source)
        self.can_advise = self._source is not None

    def _start_advising(self, advice: Advice | None, source: ModelSource | None) -> None:
        """Set up in the widget's __init__, before its first partition is shown."""
        self._advice = advice
        self._source = source
        self._advising = False
        self._stop_advice = threading.Event()
        self.can_advise = source is not None
        self.observe(self._pick_plan, "advice_index")  # type: ignore[attr-defined]
        if advice is not None:
            self._set_advice(advice)

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
        running = self._advising
        self._stop_advice.set()
        return {"cancelled": running}, []

    def start_advise(self, target: str, measure_time: bool = False) -> threading.Thread | None:
        """`run_advise(target)` in a thread (None, with `error` set, for a bad target, timing asked of a fake-mode
        widget, a widget without its model, or while a sweep or another advice runs)."""
        self.error = ""
        try:
            parse_bytes(target)
        except BwdWidgetsError as error:
            self.error = str(error)
            return None
        if measure_time and self.extraction.mode != "real":
            self.error = "timing runs each plan's real graphs, and this widget's extraction is fake: untick it."
            return None
        with self._sweep_lock:
            if self._source is None:
                self.error = "the advisor traces the model with each plan: open the widget with bw.show(model, inputs)."
                return None
            if self._sweeping or self._advising:
                return None
            self._advising, self.busy = True, True
        thread = threading.Thread(
            target=self.run_advise, args=(target, measure_time), name="bwd-widgets-advise", daemon=True
        )
        thread.start()
        return thread

    def run_advise(self, target: int | str, measure_time: bool = False) -> Advice | None:
        """`bw.advise` on the model this widget was opened with, for `target` bytes of activation memory (and
        `measure_time`, as bw.advise takes it); each step is shown as it starts, the plans when it ends (a plan
        row shows its partition)."""
        if self._source is None:
            raise BwdWidgetsError(
                "the advisor traces the model with each plan: open the widget with bw.show(model, x)."
            )
        model, inputs, kwargs = self._source
        self._advising, self.busy = True, True
        self._stop_advice.clear()
        self.advice_progress = "starting"

        def step(label: str, done: int, total: int) -> None:
            self.advice_progress = f"{done}/{total}: {label}" if label else f"{done}/{total}"

        try:
            advice = self._advised(target, measure_time, step)
        except BwdWidgetsError as error:
            self.error, self.advice_progress = str(error), ""
            return None
        except Exception as error:  # noqa: BLE001 - in the advisor's thread nothing else would say it
            self.error, self.advice_progress = f"the advisor failed: {one_line(error)}", ""
            return None
        finally:
            self._advising = False
            self.busy = self._sweeping
        self.advice_progress = "stopped" if advice.interrupted else ""
        self._set_advice(advice)
        return advice

    def _advised(self, target: int | str, measure_time: bool, step: Callable[[str, int, int], None]) -> Advice:
        """`bw.advise` on the widget's model: here when called on the kernel's own thread (the user's call of
        `run_advise`), else in a Python process of its own (`studio/spawned.py`), so that nothing its traces
        patch, seed or configure reaches the kernel's thread; that process's plans are extracted again here,
        from their own code, when one is shown."""
        assert self._source is not None  # checked by run_advise
        model, inputs, kwargs = self._source
        mode = self.extraction.mode
        keywords = {"target": target, "measure_time": measure_time, "mode": mode, **kwargs}
        if threading.current_thread() is threading.main_thread():
            return advise(
                model, *inputs, progress=False, on_step=step, should_stop=self._stop_advice.is_set, **keywords
            )
        advice = in_spawned_process(
            "bwd_widgets.studio.advisor:advise_in_process", (model, inputs, keywords),
            lambda message: step(*cast("tuple", message)), self._stop_advice.is_set, "the advisor",
        )  # fmt: skip
        return remade_here(advice, model, inputs, mode, kwargs)

    def _set_advice(self, advice: Advice) -> None:
        """Show `advice`'s plans in the partitions tab, the plan shown marked when it is one of them."""
        self._advice = advice
        with self.hold_sync():
            self.advice_rows = advice_rows(advice)
            self.advice_summary = advice_summary(advice)
            self.advice_index = self._advice_row_of(getattr(self, "extraction", None))

    def _advice_plans(self) -> list[Plan]:
        return [*self._advice.plans, *self._advice.offload] if self._advice is not None else []

    def _advice_row_of(self, extraction: BackwardExtraction | None) -> int:
        for index, plan in enumerate(self._advice_plans()):
            if extraction is not None and plan.extraction_made is extraction:
                return index
        return -1

    def _pick_plan(self, change: traitlets.Bunch) -> None:
        plans, index = self._advice_plans(), change["new"]
        if self._updating or not 0 <= index < len(plans) or plans[index].kind == "offload":
            return
        plan = plans[index]
        self._switch(lambda: _plan_extraction(plan))


def model_source(model: Any, inputs: tuple, extract_kwargs: Mapping[str, Any]) -> ModelSource:
    """What the advisor needs to trace `model` again: its inputs and the keywords of the extraction, less
    the partitioner and mode (each plan names its own; the mode is the extraction's)."""
    chosen = {k: v for k, v in extract_kwargs.items() if k not in ("partitioner", "memory_budget", "mode")}
    return model, tuple(inputs), chosen


def _plan_extraction(plan: Plan) -> BackwardExtraction:
    """A plan's partition (a worker's plan extracts it here, from its own code)."""
    extraction = plan.extraction
    if extraction is None:
        raise BwdWidgetsError(f"{plan.label} has no extraction to show.")
    return extraction


def first_shown(advice: Advice) -> BackwardExtraction | None:
    """What `show(advice)` opens on: the best plan's partition, else the Pareto plan of lowest peak."""
    plans = [p for p in ([advice.best] if advice.best else []) + advice.plans if p.kind != "offload"]
    return plans[0].extraction if plans else None
