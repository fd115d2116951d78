"""Partitions and payloads the widget makes ahead of a slider move: each swept budget's after a sweep, the
two budgets one slider step either side after a move; and the same payloads sent to the browser
(js/ahead.ts), so a move to one is drawn at once while the kernel's own payload, with its diff, follows.
`MadeAhead` owns them; its work runs as the widget's `neighbours` and `prepare` jobs (jupyter/jobs.py)."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..extraction.result import BackwardExtraction
from ..views.payload import GraphData, encode_payload, encode_without_diff, graph_payload, since
from .jobs import NEIGHBOURS, PREPARE, SWEEP, Job, JobRunner

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..studio.compare import SweepPoint

SLIDER_STEP = 0.05
"""The budget slider's step (js/panes/header.ts): a move's neighbours are this far either side."""
NEIGHBOURS_AFTER_SECONDS = 0.5
"""A move's neighbours are partitioned this long after it: on two cores, partitioning at once competes
with the browser drawing the move itself (bench/slider_speed.py, docs/benchmarks.md)."""
AHEAD_BYTES = 64 << 20
"""The most payload bytes sent ahead to the browser for one shown model (js/ahead.ts keeps them, so a slider
move to a budget made ahead repaints without a kernel round trip); beyond it a move waits for the kernel."""


@dataclass(frozen=True, eq=False)
class BuiltAhead:
    """One payload built ahead, with what it was built for: it holds while the graph index and the
    measurement are still those."""

    extraction: BackwardExtraction
    graph_index: int
    measured: object
    """The extraction's measurement when the payload was built (a later `measure()` makes it stale)."""
    payload: GraphData
    """The payload without a diff."""
    without_diff: bytes
    """That payload's `encode_without_diff`: the bytes the move sends with its own diff added."""

    @classmethod
    def build(cls, extraction: BackwardExtraction, graph_index: int) -> BuiltAhead:
        payload = graph_payload(extraction, graph_index)
        return cls(extraction, graph_index, extraction.measured, payload, encode_without_diff(payload))

    def holds(self, graph_index: int) -> bool:
        return self.graph_index == graph_index and self.measured is self.extraction.measured


class MadeAhead:
    """The partitions and payloads made ahead for one widget, and those sent to its browser views.

    `send(content, buffers)` sends a custom message to the browser; `showing()` is (the extraction shown, its
    graph index), read whenever a thread checks whether its work still holds."""

    def __init__(
        self,
        send: Callable[[dict, list | None], None],
        showing: Callable[[], tuple[BackwardExtraction, int]],
        jobs: JobRunner,
    ) -> None:
        self._send, self._showing, self._jobs = send, showing, jobs
        self._building = threading.Lock()
        """One payload built at a time: the slider's, or one built ahead."""
        self.neighbours: dict[float, BackwardExtraction] = {}
        """min-cut budget -> its partition of the joint graph shown, made ahead around the last slider move."""
        self.prepared: dict[int, BuiltAhead] = {}
        """id of an extraction -> its payload built ahead."""
        self.sent: dict[int, int] = {}
        """id of an extraction in `prepared` -> bytes of its payload sent to the browser (`send_ahead`)."""
        self._sent_lock = threading.Lock()
        """Held while `sent` is read and written: the sweep's preparation, the neighbours' job and the kernel's
        own thread (a view's request, a forget) all send, and each payload goes once, within the cap."""

    def payload(
        self, extraction: BackwardExtraction, graph_index: int, previous: BackwardExtraction | None
    ) -> tuple[GraphData, bytes | None]:
        """`graph_payload` of `extraction` with the diff against `previous`: the one built ahead when it still
        holds (same graph, same measurement), with its encoding without the diff; else built now."""
        with self._building:
            kept = self.prepared.get(id(extraction))
            if kept is not None and kept.extraction is extraction and kept.holds(graph_index):
                return since(kept.payload, extraction, previous), kept.without_diff
            return graph_payload(extraction, graph_index, previous), None

    def partition_neighbours(self, shown: BackwardExtraction, swept: set[float]) -> threading.Thread | None:
        """Partition the slider's two neighbouring budgets of `shown` (min-cut, not among the `swept` budgets)
        as the `neighbours` job and build their payloads, so the next step either way repaints without
        partitioning. A newer move's job replaces this one; partitions of the joint graph are made one at a
        time (`Trace.split`), so a move meanwhile waits for at most the one under way."""
        budget = round(shown.memory_budget or 0.0, 4)
        self.neighbours = {b: e for b, e in self.neighbours.items() if same_trace(e, shown)} | {budget: shown}
        steps = [round(budget + step, 4) for step in (SLIDER_STEP, -SLIDER_STEP)]
        wanted = [b for b in steps if 0.0 <= b <= 1.0 and b not in self.neighbours and b not in swept]
        _, graph_index = self._showing()

        def partition(job: Job) -> None:
            with self._building:  # payloads made ahead for another joint graph can no longer be shown
                self.prepared = {k: v for k, v in self.prepared.items() if same_trace(v.extraction, shown)}
            job.stop.wait(NEIGHBOURS_AFTER_SECONDS)
            for neighbour in wanted:
                if job.cancelled() or self._jobs.running(SWEEP) or self._showing()[0] is not shown:
                    return  # a sweep makes its own; a newer move asks for its own neighbours
                with contextlib.suppress(Exception):  # a move there partitions it again and says why
                    extraction = shown.rerun("min_cut", neighbour)
                    self.neighbours[neighbour] = extraction
                    with self._building:
                        self.prepared[id(extraction)] = BuiltAhead.build(extraction, graph_index)
                    self.send_ahead(extraction)

        return self._jobs.start(NEIGHBOURS, partition)

    def prepare(self, points: list[SweepPoint]) -> threading.Thread | None:
        """Build the payloads of the swept partitions for the graph shown as the `prepare` job, those made
        already first, then those a worker process swept (partitioned here first): a slider move to a swept
        budget then sends its payload without building it. A newer sweep's preparation replaces this one."""
        _, graph_index = self._showing()
        ordered = sorted(points, key=lambda p: p.extraction_made is None)

        def build(job: Job) -> None:
            with self._building, self._sent_lock:  # ids of the old may come again
                self.prepared, self.sent = {}, {}
            for point in ordered:
                extraction = None
                with contextlib.suppress(Exception):  # a move there partitions it and says why
                    extraction = point.extraction  # a worker's point is partitioned here, once
                if job.cancelled() or extraction is None or graph_index >= len(extraction.partitions):
                    return
                with self._building, contextlib.suppress(Exception):  # the move would build it and say why
                    kept = BuiltAhead.build(extraction, graph_index)
                    if not job.cancelled():
                        self.prepared[id(extraction)] = kept
                self.send_ahead(extraction)

        return self._jobs.start(PREPARE, build)

    def send_ahead(self, only: BackwardExtraction | None = None) -> None:
        """Send the browser the payloads built ahead (`only`'s, or all) that still hold for the graph shown:
        js/ahead.ts keeps them, and a slider move to one draws it at once while the kernel's own payload,
        with its diff, follows. At most `AHEAD_BYTES` per shown model; each payload is sent once."""
        with self._building:
            kept = [k for k in self.prepared.values() if only is None or k.extraction is only]
        with self._sent_lock:
            shown, graph_index = self._showing()
            for built in kept:
                extraction = built.extraction
                if id(extraction) in self.sent or not built.holds(graph_index) or not same_trace(extraction, shown):
                    continue
                wire = encode_payload(built.payload, built.without_diff)
                if sum(self.sent.values()) + len(wire) > AHEAD_BYTES:
                    return
                self.sent[id(extraction)] = len(wire)
                key = {name: built.payload[name] for name in ("partitioner", "memory_budget", "graph_index")}
                self._send({"ahead": key}, [wire])

    def stop_preparing(self) -> None:
        """Stop building the swept payloads ahead (a benchmark gives its next measurement the cores alone)."""
        self._jobs.cancel(PREPARE)

    def forget(self) -> None:
        """Have the browser drop the payloads sent ahead (another model shown, a measurement taken)."""
        with self._sent_lock:
            if self.sent:
                self.sent = {}
                self._send({"forget_ahead": True}, None)

    def send_again(self) -> None:
        """A view loaded afresh (a page reload) has none of the payloads sent ahead: send them again."""
        with self._sent_lock:
            self.sent = {}
        self.send_ahead()


def same_trace(a: BackwardExtraction, b: BackwardExtraction) -> bool:
    """Whether `a` and `b` are partitions of one joint graph (the slider's moves stay within one)."""
    return a.partitions[0].trace is b.partitions[0].trace
