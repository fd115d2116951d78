"""Partitions and payloads the widget makes ahead of a slider move: each swept budget's after a sweep, the
two budgets one slider step either side after a move; and the same payloads sent to the browser
(js/ahead.ts), so a move to one is drawn at once while the kernel's own payload, with its diff, follows.
A mixin of `BackwardGraphWidget` (jupyter/widget.py moves the slider and sends the payload shown)."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any

from ..views.payload import GraphData, encode_payload, encode_without_diff, graph_payload

if TYPE_CHECKING:
    from ..extraction.result import BackwardExtraction
    from ..studio.compare import Sweep, SweepPoint

SLIDER_STEP = 0.05
"""The budget slider's step (js/panes/header.ts): a move's neighbours are this far either side."""
NEIGHBOURS_AFTER_SECONDS = 0.5
"""A move's neighbours are partitioned this long after it: on two cores, partitioning at once competes
with the browser drawing the move itself (bench/slider_speed.py, docs/benchmarks.md)."""
AHEAD_BYTES = 64 << 20
"""The most payload bytes sent ahead to the browser for one shown model (js/ahead.ts keeps them, so a slider
move to a budget made ahead repaints without a kernel round trip); beyond it a move waits for the kernel."""


class MadeAhead:
    """What the widget builds ahead of a move (`_prepare`, `_partition_neighbours`) and sends the browser
    ahead (`_send_ahead`); `_start_ahead` sets it up."""

    if TYPE_CHECKING:  # the widget's traits and what it sets up (jupyter/widget.py)
        extraction: BackwardExtraction
        graph_index: int
        _swept: Sweep | None
        _sweeping: bool

        def send(self, content: dict, buffers: list | None = None) -> None: ...
        def on_msg(self, callback: Any, remove: bool = False) -> None: ...

    def _start_ahead(self) -> None:
        self._building = threading.Lock()  # one payload built at a time: the slider's, or one prepared ahead
        self._preparing: object = None  # the preparation running (`_prepare`); a newer one stops it
        self._neighbours: dict[float, BackwardExtraction] = {}
        """min-cut budget -> its partition of the joint graph shown, made ahead around the last slider move."""
        self._prepared: dict[int, tuple[BackwardExtraction, int, object, GraphData, bytes]] = {}
        """id of an extraction -> (it, graph index, its measurement, its payload without a diff and that
        payload's `encode_without_diff`), built ahead."""
        self._ahead_sent: dict[int, int] = {}
        """id of an extraction in `_prepared` -> bytes of its payload sent to the browser (`_send_ahead`)."""
        self._ahead_lock = threading.Lock()
        """Held while `_ahead_sent` is read and written: the sweep's preparation, the neighbours' thread and the
        kernel's own (a view's request, a forget) all send, and each payload goes once, within the cap."""
        self.on_msg(self._on_browser_message)

    def _partition_neighbours(self, shown: BackwardExtraction) -> threading.Thread:
        """Partition the slider's two neighbouring budgets of `shown` (min-cut) in a thread and build their
        payloads, so the next step either way repaints without partitioning. Partitions of the joint graph
        are made one at a time (`Trace.split`), so a move meanwhile waits for at most the one under way."""
        budget = shown.memory_budget
        kept = {b: e for b, e in self._neighbours.items() if same_trace(e, shown)}
        kept[round(budget or 0.0, 4)] = shown
        self._neighbours = kept
        swept = {p.budget for p in self._swept.points} if self._swept is not None else set()
        steps = [round((budget or 0.0) + step, 4) for step in (SLIDER_STEP, -SLIDER_STEP)]
        wanted = [b for b in steps if 0.0 <= b <= 1.0 and b not in kept and b not in swept]
        graph_index = self.graph_index

        def partition() -> None:
            # here, not in the move: the lock may be held while the sweep's preparation builds a payload
            with self._building:  # payloads made ahead for another joint graph can no longer be shown
                self._prepared = {k: v for k, v in self._prepared.items() if same_trace(v[0], shown)}
            time.sleep(NEIGHBOURS_AFTER_SECONDS)
            for neighbour in wanted:
                if self._sweeping or self.extraction is not shown:
                    return  # a sweep makes its own; a newer move asks for its own neighbours
                with contextlib.suppress(Exception):  # a move there partitions it again and says why
                    extraction = shown.rerun("min_cut", neighbour)
                    self._neighbours[neighbour] = extraction
                    with self._building:
                        self._prepared[id(extraction)] = _built_ahead(extraction, graph_index)
                    self._send_ahead(extraction)

        thread = threading.Thread(target=partition, name="bwd-widgets-neighbours", daemon=True)
        thread.start()
        return thread

    def _prepare(self, points: list[SweepPoint]) -> threading.Thread:
        """Build the payloads of the swept partitions for the graph shown, in a thread, those made already
        first, then those a worker process swept (partitioned here first): a slider move to a swept budget
        then sends its payload without building it. A newer sweep's preparation replaces this one."""
        graph_index, generation = self.graph_index, object()
        with self._building, self._ahead_lock:  # ids of the old may come again
            self._preparing, self._prepared, self._ahead_sent = generation, {}, {}
        ordered = sorted(points, key=lambda p: p.extraction_made is None)

        def build() -> None:
            for point in ordered:
                extraction = None
                with contextlib.suppress(Exception):  # a move there partitions it and says why
                    extraction = point.extraction  # a worker's point is partitioned here, once
                if self._preparing is not generation or extraction is None:
                    return
                if graph_index >= len(extraction.partitions):
                    return
                with self._building, contextlib.suppress(Exception):  # the move would build it and say why
                    kept = _built_ahead(extraction, graph_index)
                    if self._preparing is generation:
                        self._prepared[id(extraction)] = kept
                self._send_ahead(extraction)

        thread = threading.Thread(target=build, name="bwd-widgets-prepare", daemon=True)
        thread.start()
        return thread

    def _send_ahead(self, only: BackwardExtraction | None = None) -> None:
        """Send the browser the payloads built ahead (`only`'s, or all) that still hold for the graph shown:
        js/ahead.ts keeps them, and a slider move to one draws it at once while the kernel's own payload,
        with its diff, follows. At most `AHEAD_BYTES` per shown model; each payload is sent once."""
        with self._building:
            kept = [k for k in self._prepared.values() if only is None or k[0] is only]
        with self._ahead_lock:
            for extraction, graph_index, measured, built, without_diff in kept:
                holds = graph_index == self.graph_index and measured is extraction.measured
                if id(extraction) in self._ahead_sent or not holds or not same_trace(extraction, self.extraction):
                    continue
                wire = encode_payload(built, without_diff)
                if sum(self._ahead_sent.values()) + len(wire) > AHEAD_BYTES:
                    return
                self._ahead_sent[id(extraction)] = len(wire)
                key = {name: built[name] for name in ("partitioner", "memory_budget", "graph_index")}
                self.send({"ahead": key}, buffers=[wire])

    def _forget_ahead(self) -> None:
        """Have the browser drop the payloads sent ahead (another model shown, a measurement taken)."""
        with self._ahead_lock:
            if self._ahead_sent:
                self._ahead_sent = {}
                self.send({"forget_ahead": True})

    def _on_browser_message(self, widget: object, content: object, buffers: list) -> None:
        """`{"send_ahead": true}`: a view loaded afresh (a page reload) asks for the payloads made ahead."""
        if isinstance(content, dict) and content.get("send_ahead"):
            with self._ahead_lock:
                self._ahead_sent = {}
            self._send_ahead()


def same_trace(a: BackwardExtraction, b: BackwardExtraction) -> bool:
    """Whether `a` and `b` are partitions of one joint graph (the slider's moves stay within one)."""
    return a.partitions[0].trace is b.partitions[0].trace


def _built_ahead(
    extraction: BackwardExtraction, graph_index: int
) -> tuple[BackwardExtraction, int, object, GraphData, bytes]:
    """What `_prepared` keeps for `extraction`: it, the graph index and measurement the payload was built for,
    the payload without a diff and that payload's `encode_without_diff`."""
    built = graph_payload(extraction, graph_index)
    return extraction, graph_index, extraction.measured, built, encode_without_diff(built)
