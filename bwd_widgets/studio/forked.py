"""Work on one fake-mode trace shared with worker processes forked from this one, a result sent back per task.

A fork copies the traces, their working copies and what they share between partitions (`core/reuse.py`)
without pickling any of it, and a 2-core machine then runs two of torch's partitions or captures at once.
The processes take tasks from one shared counter, each the next when it is free (this process from the end:
`_Counter`), so none waits while tasks are left. Only plain results come back (numbers, text): what holds
fake tensors does not pickle, so the caller makes it again in this process when it is wanted (a sweep point's
partition, a plan's extraction).

The sweep (`studio.sweep`) shares its budgets this way in either mode: a point's numbers come from the graphs'
shapes, so a worker reads no real tensor (and runs on one CPU thread, `_as_a_quiet_worker`). The
advisor (`advisor.advise`) shares its plans in fake mode only: in real mode a plan replays the forward on the real
tensors, which would then be made again in every worker's memory.
"""

from __future__ import annotations

import contextlib
import functools
import math
import multiprocessing
import multiprocessing.connection
import os
import sys
import threading
import time
import warnings
from collections import deque
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from ..core.cores import cores
from ..core.trace import TORCH_WORK

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

T = TypeVar("T")

STALLED_AFTER_SECONDS = 60.0
"""A worker silent this long (or five times the slowest task so far, if longer) is given up on: its tasks
are done here. A fork can copy a lock another thread held at that moment; this keeps that a delay."""


def spare_cores() -> int:
    """One worker per core beyond the first that this process may run on, where fork exists; none otherwise.
    For work that runs no backward (a sweep's points, made from shapes in either mode): a CUDA build's autograd,
    which refuses to run in a fork, is never asked."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 0
    return max(cores() - 1, 0)


def default_workers(mode: str) -> int:
    """`spare_cores()` for work on fake tensors that may run a backward (the advisor's plans verify theirs),
    where autograd runs in a fork; none for real-mode work, which replays the forward on the real tensors:
    each worker would hold a copy of their activations."""
    return spare_cores() if mode == "fake" and autograd_survives_fork() else 0


def autograd_survives_fork() -> bool:
    """Whether autograd runs in a process forked from this one, now. Once autograd has started its device
    threads (CUDA builds of torch do at the first backward, with or without a GPU), it refuses to run in any
    fork ("Unable to handle autograd's threading in combination with fork-based multiprocessing"): a worker
    would fail every task, each then done again here. A forked probe asks, each time (a fork is cheap)."""
    with TORCH_WORK, warnings.catch_warnings():  # no thread of ours is inside torch at the fork
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12's "multi-threaded, fork()"
        pid = os.fork()
    if pid == 0:  # the probe: one tiny backward, nothing printed, no cleanup of the parent's state
        code = 1
        try:
            with contextlib.redirect_stderr(None), contextlib.redirect_stdout(None):
                torch.ones(1, requires_grad=True).sum().backward()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


class _Counter:
    """The tasks not yet taken, shared by this process and its workers; who took each index.

    With workers, this process takes its first task from the front (the first task, where it takes one before
    the workers start) and then the last ones downwards, and the workers take theirs upwards: neighbouring tasks
    stay in one process, which shares what they make alike (a sweep's neighbouring budgets often choose one saved
    set, whose graphs are then built once: `core/reuse.py` `Splits`). Without workers, in order."""

    def __init__(self, size: int, shared: bool) -> None:
        self.size, self.shared = size, shared
        self.first_taken = False  # by this process (a worker's copy is never read: workers take from the front)
        if shared:
            context = multiprocessing.get_context("fork")
            self.low: Any = context.Value("i", 0)
            self.high: Any = context.Value("i", size - 1, lock=False)
            self.taken: Any = context.Array("i", [-1] * size)
        else:
            self.low, self.high, self.taken = _Local(0), _Local(size - 1), [-1] * size

    def take(self, owner: int) -> int | None:
        with self.low.get_lock():
            if self.low.value > self.high.value:
                return None
            if owner == 0 and self.first_taken and self.shared:
                index: int = self.high.value
                self.high.value = index - 1
            else:
                index = self.low.value
                self.low.value = index + 1
            self.first_taken = self.first_taken or owner == 0
            self.taken[index] = owner
            return index


class _Local:
    """A shared value in work without workers (a counter's end, an awaited number): nothing to share."""

    def __init__(self, value: float) -> None:
        self.value = value

    def get_lock(self) -> contextlib.nullcontext:
        return contextlib.nullcontext()


class ForkedTasks:
    """Tasks 0 .. size-1: the indices this process does (`next_own`) and the results the workers send
    (`arrivals`). `start` forks the workers; from then on every process takes the next task when it is
    free, a worker running `work(index)` and sending its result. A task a worker fails on (its `work`
    raised or returned None), or leaves undone, comes back to this process, which does it itself and so
    raises its error as work without workers would."""

    def __init__(self, size: int, count: int, work: Callable[[int], object], least: int = 3) -> None:
        self.size, self.work = size, work
        self.count = count if size >= least else 0  # a worker for one or two tasks would not pay its fork
        self.counter = _Counter(size, shared=self.count > 0)
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
        """Fork the workers, once; each starts on the next task this process has not taken."""
        if self.started:
            return
        self.started = True
        context = multiprocessing.get_context("fork")
        for owner in range(1, self.count + 1):
            receiving, sending = context.Pipe(duplex=False)
            process = context.Process(target=_serve, args=(owner, self.counter, sending, self.work), daemon=True)
            with TORCH_WORK, warnings.catch_warnings():  # no thread of ours is inside torch at the fork
                warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12's "multi-threaded, fork()"
                process.start()
            sending.close()
            self.workers[owner] = (process, receiving)
        self._heard = time.monotonic()

    def arrivals(self, wait: bool) -> Iterator[tuple[int, Any]]:
        """The results the workers have sent (waiting up to 0.1 s for one when `wait`), each with its task's
        index."""
        owners = {id(connection): owner for owner, (_, connection) in self.workers.items()}
        ready = multiprocessing.connection.wait([c for _, c in self.workers.values()], 0.1 if wait else 0)
        now = time.monotonic()
        if not ready and wait and now - self._heard > max(STALLED_AFTER_SECONDS, 5 * self.slowest):
            self.close()  # stalled: what they took is this process's again
            return
        for connection in ready:
            owner = owners[id(connection)]
            try:
                index, result = self.workers[owner][1].recv()
            except (EOFError, OSError):  # the worker ended: what it had taken is this process's again
                self._end(owner)
                continue
            self.slowest = max(self.slowest, now - self._heard)
            self._heard = now
            self.arrived.add(index)
            if result is None:
                self.redo.append(index)
            else:
                yield index, result

    def run(
        self,
        do: Callable[[int], T],
        done: Callable[[int, T, bool], None],
        should_stop: Callable[[], bool] | None = None,
    ) -> bool:
        """Start the workers once this process holds its first task, do this process's tasks with `do`, and
        hand every result to `done(index, result, here)` as it comes (`here`: made by `do`, else a worker's
        `work`), until every task is done (False) or `should_stop()` says so between tasks (True). The workers
        end with it, also on an error or Ctrl-C."""
        try:
            while not (should_stop is not None and should_stop()):
                index = self.next_own()
                self.start()
                if index is not None:
                    done(index, do(index), True)
                elif not self.busy:
                    return False
                for theirs, result in self.arrivals(wait=index is None):
                    done(theirs, result, False)
            return True
        finally:
            self.close()

    def _end(self, owner: int) -> None:
        process, connection = self.workers.pop(owner)
        connection.close()
        if process.is_alive():
            process.kill()  # it holds nothing of the user's: it writes no file, it only sends
        process.join()
        self.redo.extend(i for i in range(self.size) if self.counter.taken[i] == owner and i not in self.arrived)

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


def _as_a_quiet_worker() -> None:
    """Set up a forked process: nothing printed into the kernel's streams, which belong to the parent (its
    Python streams and its file descriptors 1 and 2, which ipykernel shows in the notebook; torch's logging
    holds the first stderr object), its locks its own, one CPU thread."""
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    sys.stdout = sys.stderr = open(quiet, "w")  # noqa: SIM115 (the process ends with it)
    warnings.simplefilter("ignore")
    _fresh_cached_property_locks()
    torch.set_num_threads(1)  # the parent's OpenMP pool is not in the fork: a parallel region would hang


def _serve(
    owner: int, counter: _Counter, connection: multiprocessing.connection.Connection, work: Callable[[int], object]
) -> None:
    """In the forked worker: the next task's result while any is left, each sent."""
    index = counter.take(owner)  # first, so the worker has its task before this process takes the next
    _as_a_quiet_worker()
    while index is not None:
        result = None
        with contextlib.suppress(Exception):  # the parent does it again and says why
            result = work(index)
        connection.send((index, result))
        index = counter.take(owner)
    connection.close()


class Awaited:
    """A number this process sets once (`put`) that forked workers wait for (`get`); None is a number too.
    Work that needs a result this process makes while the workers already run (the advisor's lowest budget)."""

    def __init__(self, shared: bool) -> None:
        context = multiprocessing.get_context("fork") if shared else None
        self._value: Any = context.Value("d", math.nan) if context else _Local(math.nan)
        self._set: Any = context.Event() if context else threading.Event()

    def put(self, value: float | None) -> None:
        self._value.value = math.nan if value is None else value
        self._set.set()

    def get(self) -> float | None:
        self._set.wait()
        value = float(self._value.value)
        return None if math.isnan(value) else value
