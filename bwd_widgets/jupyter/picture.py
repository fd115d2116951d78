"""The static picture after a widget's output: what a saved notebook keeps (GitHub, nbviewer, an untrusted
notebook), published under a display id and redrawn, once the widget pauses, with the partition it shows (the
widget's `picture` job, jupyter/jobs.py)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, NamedTuple, cast

from ..views.html import fallback_html
from ..views.plot import timeline
from ..views.static import Drawing, first_view, headline
from .jobs import PICTURE, Job, JobRunner

if TYPE_CHECKING:
    from collections.abc import Callable

    from IPython.display import DisplayHandle

    from ..views.payload import GraphData


class _Drawn(NamedTuple):
    payload: object
    drawing: Drawing | None


class FollowingPictures:
    """The pictures of one widget: its first view's drawing (laid out once per payload), the displays that
    follow it, and the redraw after a pause.

    `shown()` is the payload shown (the `data` trait), `open()` whether the widget is still open (a closed one
    draws no more), `pause()` the seconds the partition shown must stay before its picture is made."""

    def __init__(
        self, shown: Callable[[], object], open: Callable[[], bool], pause: Callable[[], float], jobs: JobRunner
    ) -> None:
        self._shown, self._open, self._pause, self._jobs = shown, open, pause, jobs
        self._drawn: _Drawn | None = None
        """The last first view drawn (one object, so a redraw's thread and the kernel's never mix two)."""
        self._handles: list[tuple[DisplayHandle, str | None]] = []
        """Each display of the picture that follows: (its handle, its text, or None for the headline numbers)."""
        self._pause_ends = threading.Condition()
        self._due = 0.0
        """When (time.monotonic) the pause before the next redraw ends; a change of the payload moves it on."""
        self._sent: object = None
        """The payload the pictures show now."""

    def drawing_of(self, data: object) -> Drawing | None:
        """`first_view` of payload `data` (the one shown, or one a redraw took before the next move)."""
        drawn = self._drawn
        if drawn is None or drawn.payload is not data:
            drawn = self._drawn = _Drawn(data, first_view(cast("GraphData", data)))
        return drawn.drawing

    def bundle(self, text: str | None = None, data: object = None) -> dict:
        """The picture's output: HTML, shown trusted or not (a style rule in it hides it beside a drawn widget),
        and as text `text` or the headline numbers. Of the payload shown, or of payload `data`."""
        shown = cast("GraphData", self._shown() if data is None else data)
        chart = timeline({shown["model"]: shown["run"]["memory"]["timeline"]}, title="Activation memory over time")
        return {
            "text/html": fallback_html(shown, self.drawing_of(shown), chart.svg),
            "text/plain": text if text is not None else "\n".join(headline(shown)),
        }

    def follow(self, handle: DisplayHandle, text: str | None = None) -> None:
        """Keep the picture published under `handle` showing the payload shown, from now on."""
        with self._pause_ends:
            if not self._handles:
                self._sent = self._shown()
            self._handles.append((handle, text))

    def shown_changed(self) -> None:
        """The payload shown changed: redraw after a pause (a slider dragged across ten budgets makes one
        picture, of where it stopped)."""
        if not self._handles or not self._open():
            return
        with self._pause_ends:
            self._due = time.monotonic() + self._pause()
            self._pause_ends.notify_all()
        self._jobs.start(PICTURE, self._redraw)

    def _redraw(self, job: Job) -> None:
        """Wait for the pause, draw the payload shown, update every display of it. The runner runs it again
        when the payload changed meanwhile; then the job ends (no thread, so no reference to the widget, stays)."""
        with self._pause_ends:
            while (wait := self._due - time.monotonic()) > 0:
                self._pause_ends.wait(wait)
            data, handles = self._shown(), list(self._handles)
        if not self._open() or data is self._sent:
            return
        bundles = {text: self.bundle(text, data) for text in {text for _, text in handles}}
        for handle, text in handles:
            handle.update(bundles[text], raw=True)
        self._sent = data

    def wait(self, timeout: float | None = None, pause: bool = True) -> bool:
        """Wait until every picture shows the payload shown (True), or `timeout` seconds (False); with
        `pause=False`, draw it now instead of after the pause."""
        if not pause:
            with self._pause_ends:
                self._due = 0.0
                self._pause_ends.notify_all()
        return self._jobs.wait(PICTURE, timeout)
