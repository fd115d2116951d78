"""A sweep's budgets shared with worker processes forked from this one, one point's numbers sent back each.

A fork copies the joint graph, its working copy and what the trace shares between partitions
(`core/reuse.py`) without pickling any of it, and a 2-core machine partitions two budgets at once. The
processes take budgets in order from one shared counter, each the next when it is free, so none waits
while budgets are left. Only the numbers come back (a `SweepPoint` without its partition, which holds
fake tensors that do not pickle): the point's partition is made again in this process when it is read.

Fake-mode traces only: a real-mode partition replays the forward on real tensors, and a forked child
would inherit torch's CPU thread pool from a process that has used it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import multiprocessing
import multiprocessing.connection
import os
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from .core.trace import TORCH_WORK

if TYPE_CHECKING:
    from .extraction import BackwardExtraction
    from .studio import SweepPoint

PointOf = Callable[[float, "BackwardExtraction"], "SweepPoint"]

STALLED_AFTER_SECONDS = 60.0
"""A worker silent this long (or five times the slowest point so far, if longer) is given up on: its budgets
are partitioned here. A fork can copy a lock another thread held at that moment; this keeps that a delay."""


def default_workers(base: BackwardExtraction) -> int:
    """One worker per core beyond the first that this process may run on, where fork exists and the trace
    is fake; none otherwise."""
    if base.mode != "fake" or "fork" not in multiprocessing.get_all_start_methods():
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(cores - 1, 0)


class _Counter:
    """The next budget's index, shared by this process and its workers; who took each index."""

    def __init__(self, size: int, shared: bool) -> None:
        self.size = size
        if shared:
            context = multiprocessing.get_context("fork")
            self.next: Any = context.Value("i", 0)
            self.taken: Any = context.Array("i", [-1] * size)
        else:
            self.next, self.taken = _Local(), [-1] * size

    def take(self, owner: int) -> int | None:
        with self.next.get_lock():
            index = self.next.value
            if index >= self.size:
                return None
            self.next.value = index + 1
            self.taken[index] = owner
            return index


class _Local:
    """The counter of a sweep without workers: nothing to share."""

    value = 0

    def get_lock(self) -> contextlib.nullcontext:
        return contextlib.nullcontext()


class SweepWorkers:
    """The budgets' indices this process partitions (`next_own`) and the points the workers send
    (`arrivals`). `start` forks the workers; from then on every process takes the next budget when it is
    free. A budget a worker fails on, or leaves undone, comes back to this process, which partitions it
    and raises its error as a sweep without workers would."""

    def __init__(self, base: BackwardExtraction, budgets: Sequence[float], count: int, point_of: PointOf) -> None:
        self.base, self.budgets, self.point_of = base, list(budgets), point_of
        self.count = count if len(self.budgets) >= 3 else 0  # a worker for one or two budgets would not pay its fork
        self.counter = _Counter(len(self.budgets), shared=self.count > 0)
        self.redo: deque[int] = deque()
        self.arrived: set[int] = set()
        self.workers: dict[int, tuple[Any, multiprocessing.connection.Connection]] = {}
        self.started = False
        self.slowest = 0.0
        self._own_since: float | None = None
        self._heard = time.monotonic()

    def next_own(self) -> int | None:
        now = time.monotonic()
        if self._own_since is not None:
            self.slowest = max(self.slowest, now - self._own_since)
        self._own_since = now
        return self.redo.popleft() if self.redo else self.counter.take(0)

    @property
    def busy(self) -> bool:
        return bool(self.workers)

    def start(self) -> None:
        """Fork the workers, once; each starts on the next budget this process has not taken."""
        if self.started:
            return
        self.started = True
        context = multiprocessing.get_context("fork")
        for owner in range(1, self.count + 1):
            receiving, sending = context.Pipe(duplex=False)
            args = (owner, self.base, self.budgets, self.counter, sending, self.point_of)
            process = context.Process(target=_work, args=args, daemon=True)
            with TORCH_WORK, warnings.catch_warnings():  # no thread of ours is inside torch at the fork
                warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12's "multi-threaded, fork()"
                process.start()
            sending.close()
            self.workers[owner] = (process, receiving)
        self._heard = time.monotonic()

    def arrivals(self, wait: bool) -> Iterator[tuple[int, SweepPoint]]:
        """The points the workers have sent (waiting up to 0.1 s for one when `wait`), each with its
        budget's index and made to partition itself from this process's extraction when read."""
        owners = {id(connection): owner for owner, (_, connection) in self.workers.items()}
        ready = multiprocessing.connection.wait([c for _, c in self.workers.values()], 0.1 if wait else 0)
        now = time.monotonic()
        if not ready and wait and now - self._heard > max(STALLED_AFTER_SECONDS, 5 * self.slowest):
            self.close()  # stalled: what they took is this process's again
            return
        for connection in ready:
            owner = owners[id(connection)]
            try:
                index, point = self.workers[owner][1].recv()
            except (EOFError, OSError):  # the worker ended: what it had taken is this process's again
                self._end(owner)
                continue
            self.slowest = max(self.slowest, now - self._heard)
            self._heard = now
            self.arrived.add(index)
            if point is None:
                self.redo.append(index)
            else:
                yield index, dataclasses.replace(point, _source=self.base)

    def _end(self, owner: int) -> None:
        process, connection = self.workers.pop(owner)
        connection.close()
        if process.is_alive():
            process.kill()  # it holds nothing of the user's: it writes no file, it only sends
        process.join()
        left = [i for i in range(len(self.budgets)) if self.counter.taken[i] == owner and i not in self.arrived]
        self.redo.extend(left)

    def close(self) -> None:
        for owner in list(self.workers):
            self._end(owner)


def _fresh_cached_property_locks() -> None:
    """In a forked worker: Python 3.11's `functools.cached_property` holds one lock per attribute of a class,
    which another thread of the parent may have held at the fork; the worker's own copies start free."""
    if sys.version_info >= (3, 12):  # its cached_property has no lock
        return
    for module in list(sys.modules.values()):
        for value in list(getattr(module, "__dict__", {}).values()):
            if isinstance(value, type):
                for attribute in list(vars(value).values()):
                    if isinstance(attribute, functools.cached_property):
                        attribute.lock = threading.RLock()  # type: ignore[attr-defined]


def _work(
    owner: int,
    base: BackwardExtraction,
    budgets: list[float],
    counter: _Counter,
    connection: multiprocessing.connection.Connection,
    point_of: PointOf,
) -> None:
    """In the forked worker: the next budget's point while any is left, its numbers sent; nothing printed
    into the kernel's streams, which belong to the parent."""
    index = counter.take(owner)  # first, so the worker has its budget before this process takes the next
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the process ends with it)
    warnings.simplefilter("ignore")
    _fresh_cached_property_locks()
    torch.set_num_threads(1)  # the parent's OpenMP pool is not in the fork: a parallel region would hang
    while index is not None:
        point = None
        with contextlib.suppress(Exception):  # the parent partitions it again and says why
            extraction = base.rerun("min_cut", budgets[index])
            with TORCH_WORK:
                point = dataclasses.replace(point_of(budgets[index], extraction), _extraction=None)
        connection.send((index, point))
        index = counter.take(owner)
    connection.close()
