"""A placeholder in the cell's output while the kernel works for long: a 48-layer model takes tens of
seconds to extract and seconds more to become a widget, and the work is torch's, which reports nothing.

So a thread looks, a few times a second, at where the kernel's main thread is (its Python stack: the
innermost frame of a known module names the stage) and rewrites the placeholder with the stage now, the
seconds each stage has taken so far and the time elapsed. The thread runs in a copy of the cell's
context, so its updates go to the cell that started the work.
"""

from __future__ import annotations

import contextvars
import sys
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ..extraction.extract import ROUTE_BY_THREAD

if TYPE_CHECKING:
    from collections.abc import Iterator

# (module prefix, stage), the more specific first: the innermost frame of a module listed decides.
STAGES = (
    ("torch._functorch.partitioners", "partitioning forward and backward (torch's partitioner)"),
    ("torch._functorch", "AOT Autograd tracing the joint forward and backward graph"),
    ("torch._dynamo", "Dynamo tracing the forward"),
    ("torch.fx", "torch.fx tracing the forward"),
    ("bwd_widgets.views", "building the view (graph, saved table, code)"),
    ("bwd_widgets.jupyter", "building the view (graph, saved table, code)"),
    ("bwd_widgets.extraction.cache", "checking the trace cache (Dynamo's guards for the call)"),
    ("bwd_widgets", "recording the graphs, saved values and code"),
)
OTHER = "running the model"
TICK_SECONDS = 0.5
TRACERS = {"torch._dynamo": "dynamo", "torch.fx": "fx"}
"""The two tracers' modules, by the capture route that uses each (`extraction/extract.py` ROUTE_BY_THREAD)."""
CALLERS = ("torch._functorch", "bwd_widgets.views", "bwd_widgets.extraction.cache")
"""Stages whose code calls the tracers' modules as helpers: AOT Autograd traces with torch.fx's tracer and calls
Dynamo's utilities on either route, the trace cache runs Dynamo for its guards (on the torch.fx route too), the
views read code torch.fx generates. A tracer's frame below one of theirs is their stage; elsewhere the route the
capture took names the tracer (Dynamo builds its graphs with torch.fx): else every extraction showed both."""


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _stage(module: str) -> str | None:
    return next((stage for prefix, stage in STAGES if _within(module, prefix)), None)


def stage_of(frame: object, route: str | None = None) -> str:
    """The stage a thread whose innermost frame is `frame` is in: the innermost frame of a module listed; for a
    tracer's frame, the stage of a caller outside it (`CALLERS`), else the tracer of the capture's `route`.

    A Dynamo frame with neither, outside any capture, is Dynamo's own bookkeeping (a cleanup callback the garbage
    collector runs when compiled code of an earlier call dies, wherever the thread is), not tracing the forward:
    the frames around it say the stage. (A torch.fx frame outside a capture is a trace of the user's own.)"""
    modules = []
    while frame is not None:
        modules.append(getattr(frame, "f_globals", {}).get("__name__", ""))
        frame = getattr(frame, "f_back", None)
    for index, module in enumerate(modules):
        stage = _stage(module)
        if stage is None:
            continue
        if not any(_within(module, tracer) for tracer in TRACERS):
            return stage
        caller = next((_stage(m) for m in modules[index + 1 :] if any(_within(m, c) for c in CALLERS)), None)
        by_route = next((_stage(t) for t, r in TRACERS.items() if r == route), None)
        if caller or by_route:
            return caller or by_route or stage
        if route is None and _within(module, "torch._dynamo"):
            continue
        return stage
    return OTHER


class Stages:
    """Seconds spent in each stage, in the order they were first seen, and the stage now."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.now = ""
        self.started = time.perf_counter()
        self._last = self.started

    def note(self, stage: str) -> None:
        moment = time.perf_counter()
        # before the first look, the time since the start is the first stage's
        before = self.now or stage
        self.seconds[before] = self.seconds.get(before, 0.0) + moment - self._last
        self.seconds.setdefault(stage, 0.0)
        self.now, self._last = stage, moment

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def text(self, title: str) -> str:
        """The placeholder: the title with the time elapsed, then each stage and its seconds, the one now
        marked."""
        lines = [f"{title} \u00b7 {int(self.elapsed())} s so far (interrupt the kernel to stop)"]
        width = max((len(stage) for stage in self.seconds), default=0)
        for stage, seconds in self.seconds.items():
            mark = "\u25b6" if stage == self.now else "\u2713"
            lines.append(f"  {mark} {stage.ljust(width)}  {seconds:5.1f} s")
        return "\n".join(lines)

    def summary(self) -> str:
        """The stages that took at least a tenth of a second, with their seconds: "a 1.2 s, b 3.4 s"."""
        return ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in self.seconds.items() if seconds >= 0.1)


class Ticker:
    """Rewrites display `handle` with `title` and the stages of the thread that made it, until stopped."""

    def __init__(self, handle: object, title: str) -> None:
        self.handle = handle
        self.title = title
        self.stages = Stages()
        self._watched = threading.get_ident()
        self._stop = threading.Event()
        context = contextvars.copy_context()  # the cell's parent message: updates go to its output
        self._thread = threading.Thread(target=context.run, args=(self._run,), name="bwd-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            frame = sys._current_frames().get(self._watched)  # noqa: SLF001 - CPython's only view of another thread
            if frame is None:
                return
            self.stages.note(stage_of(frame, ROUTE_BY_THREAD.get(self._watched)))
            del frame
            self.show()

    def show(self) -> None:
        update = getattr(self.handle, "update", None)
        if update is not None and not self._stop.is_set():
            update({"text/plain": self.stages.text(self.title)}, raw=True)

    def stop(self) -> str:
        """Stop rewriting; returns the summary of the stages (empty when there is nothing to say)."""
        self._stop.set()
        self._thread.join(timeout=2)
        if self.stages.now:
            self.stages.note(self.stages.now)
        return self.stages.summary()


@contextmanager
def placeholder(handle: object, title: str) -> Iterator[Ticker]:
    """Keep display `handle` telling what the kernel does while the block runs."""
    ticker = Ticker(handle, title)
    try:
        yield ticker
    finally:
        ticker.stop()


@contextmanager
def extracting_status(target: object, mode: object, name: str | None = None) -> Iterator[None]:
    """A line in the cell's output while the extraction runs (a big model takes tens of seconds before
    the widget can appear), then how long it took; outside a kernel, nothing. `name`: the model's name as
    the user gave it, else the target's own."""
    from IPython import get_ipython
    from IPython.display import display

    from ..extraction.display_hook import in_kernel

    if not in_kernel(get_ipython()):
        yield
        return
    name = name or getattr(target, "name", None) or type(target).__name__
    started = time.perf_counter()
    handle = display(
        {
            "text/plain": f"Extracting {name} ({mode} mode): tracing forward and backward through AOT Autograd, then partitioning\u2026 (interrupt the kernel to stop)"
        },
        raw=True,
        display_id=True,
    )
    ticker = Ticker(handle, f"Extracting {name} ({mode} mode)")  # stages and time elapsed, while it runs
    ended = f"Extracting {name} stopped after"  # an error or an interrupt: the error says why
    try:
        yield
        ended = f"Extracted {name} in"
    finally:
        stages = ticker.stop()
        seconds = time.perf_counter() - started
        if handle is not None:
            handle.update({"text/plain": f"{ended} {seconds:.1f} s" + (f": {stages}." if stages else ".")}, raw=True)


@contextmanager
def passing_status(target: object, mode: object, name: str | None = None) -> Iterator[None]:
    """A bare `bw.extract` in a kernel: the same stages and seconds while it runs, in an output that holds no
    data before and after (published empty, rewritten in place, emptied at the end, also on an error or an
    interrupt). The notebook keeps nothing of it, so a saved notebook and nbval's comparison of outputs are
    as without it (nbval reads the first bundle, not the rewrites); JupyterLab draws an empty output as
    nothing. Outside a kernel, nothing: a process that has not imported IPython is not one (a script, the CLI,
    a machine without IPython), and is spared its import."""
    if "IPython" not in sys.modules:
        yield
        return
    from IPython import get_ipython
    from IPython.display import display

    from ..extraction.display_hook import in_kernel

    if not in_kernel(get_ipython()):
        yield
        return
    name = name or getattr(target, "name", None) or type(target).__name__
    handle = display({}, raw=True, display_id=True)
    ticker = Ticker(handle, f"Extracting {name} ({mode} mode)")  # its first line after TICK_SECONDS
    try:
        yield
    finally:
        ticker.stop()
        if handle is not None:
            handle.update({}, raw=True)
