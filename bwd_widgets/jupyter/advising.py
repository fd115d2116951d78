"""What the widget's advisor works from and how it runs: the model a widget was opened with (`model_source`,
remembered per joint graph while the model lives), `bw.advise` on it out of the kernel's thread (`advised`), and
the plans a row of the partitions tab shows. The widget runs it as its `advise` job (jupyter/jobs.py);
`show(model, x)` and `%bwd_extract` hand it the model."""

from __future__ import annotations

import threading
import types
import weakref
from typing import TYPE_CHECKING, Any, cast

from ..core.errors import BwdWidgetsError
from ..studio.advisor import Advice, Plan, advise, parse_bytes, remade_here
from ..studio.spawned import in_spawned_process

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..core.kinds import Mode
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


def advised(
    source: ModelSource,
    mode: Mode,
    target: int | str,
    measure_time: bool,
    step: Callable[[str, int, int], None],
    should_stop: Callable[[], bool],
) -> Advice:
    """`bw.advise` on the model a widget was opened with (`source`), in extraction mode `mode`: here when called
    on the kernel's own thread (the user's call of `run_advise`), else in a Python process of its own
    (`studio/spawned.py`), so that nothing its traces patch, seed or configure reaches the kernel's thread;
    that process's plans are extracted again here, from their own code, when one is shown."""
    model, inputs, kwargs = source
    keywords = {"target": target, "measure_time": measure_time, "mode": mode, **kwargs}
    if threading.current_thread() is threading.main_thread():
        return advise(model, *inputs, progress=False, on_step=step, should_stop=should_stop, **keywords)
    advice = in_spawned_process(
        "bwd_widgets.studio.advisor:advise_in_process", (model, inputs, keywords),
        lambda message: step(*cast("tuple", message)), should_stop, "the advisor",
    )  # fmt: skip
    return remade_here(advice, model, inputs, mode, kwargs)


def advice_plans(advice: Advice | None) -> list[Plan]:
    """The plans of `advice` in the order of its rows (`Advice.listed`)."""
    return advice.listed if advice is not None else []


def unusable_target(target: str, measure_time: bool, mode: Mode, source: ModelSource | None) -> str:
    """Why the advisor cannot run for `target` (one sentence), or "" when it can."""
    try:
        parse_bytes(target)
    except BwdWidgetsError as error:
        return str(error)
    if measure_time and mode != "real":
        return "timing runs each plan's real graphs, and this widget's extraction is fake: untick it."
    if source is None:
        return NEEDS_SOURCE
    return ""


NEEDS_SOURCE = "the advisor traces the model with each plan: open the widget with bw.show(model, inputs)."
"""Why a widget opened on a result alone cannot advise: the Advise box and `run_advise` say it alike."""


def model_source(model: Any, inputs: tuple, extract_kwargs: Mapping[str, Any]) -> ModelSource:
    """What the advisor needs to trace `model` again: its inputs and the keywords of the extraction, less
    the partitioner and mode (each plan names its own; the mode is the extraction's)."""
    chosen = {k: v for k, v in extract_kwargs.items() if k not in ("partitioner", "memory_budget", "mode")}
    return model, tuple(inputs), chosen


def plan_extraction(plan: Plan) -> BackwardExtraction:
    """A plan's partition (a worker's plan extracts it here, from its own code)."""
    extraction = plan.extraction
    if extraction is None:
        raise BwdWidgetsError(f"{plan.label} has no extraction to show.")
    return extraction


def first_shown(advice: Advice) -> BackwardExtraction | None:
    """What `show(advice)` opens on: the best plan's partition, else the Pareto plan of lowest peak."""
    plans = [p for p in ([advice.best] if advice.best else []) + advice.plans if p.shows_partition]
    return plans[0].extraction if plans else None
