"""The widget's one runner of background work: the Sweep button, the Advise box, the partitions and payloads
made ahead of a slider move, and the static picture that follows the partition shown all run here, each in a
thread named `bwd-widgets-<kind>`. The runner owns what they share: one job of a kind at a time (refused,
replaced or run once more, as the kind says), a stop flag per job, its progress line, the busy flag, and an
error as one sentence. It never touches torch: what a job does in its thread (partitioning is invisible to
the kernel's thread; the advisor's tracing runs in a process of its own) is the job's own business
(tests/test_background_invisible.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from ..core.errors import BwdWidgetsError, one_line

T = TypeVar("T")


@dataclass(frozen=True)
class JobKind:
    """One kind of background work and what the runner does when it is asked for while one runs."""

    name: str
    """The thread's name is `bwd-widgets-<name>` (tests and benchmarks join them by it)."""
    label: str
    """What it is, in a sentence."""
    failure: str
    """How an unexpected error's sentence begins (`the sweep failed: ValueError: ...`)."""
    exclusive: bool = False
    """Shows the busy flag, and is refused while another exclusive job runs (the sweep and the advisor share
    the kernel's cores and the busy flag)."""
    when_running: Literal["refuse", "replace", "again"] = "refuse"
    """A second request while one runs: refused; or the running one told to stop and a new one started (work
    for a shown partition that a newer move made stale); or run once more after the one under way ends (a
    redraw of whatever is latest)."""


SWEEP = JobKind("sweep", "the sweep", "the sweep failed", exclusive=True)
ADVISE = JobKind("advise", "the advisor", "the advisor failed", exclusive=True)
NEIGHBOURS = JobKind(
    "neighbours", "the neighbouring budgets", "the neighbouring budgets were not partitioned", when_running="replace"
)
PREPARE = JobKind("prepare", "the swept payloads", "the swept payloads were not built", when_running="replace")
PICTURE = JobKind("picture", "the static picture", "the static picture was not redrawn", when_running="again")
KINDS = (SWEEP, ADVISE, NEIGHBOURS, PREPARE, PICTURE)
"""Every kind of work the widget does in the background."""


@dataclass(eq=False)
class Job:
    """One run of a kind of work: its stop flag, its progress line, its thread (None when run in the caller's)."""

    kind: JobKind
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    again: bool = False
    reported: str = ""
    """The last progress line reported."""
    show: Callable[[str], None] | None = None
    """Where progress lines go (a trait of the widget), set by the run that reports them."""

    def cancelled(self) -> bool:
        """Whether this job was asked to stop (Cancel, or a newer job of its kind)."""
        return self.stop.is_set()

    def report(self, line: str) -> None:
        """Show `line` as this job's progress."""
        self.reported = line
        if self.show is not None:
            self.show(line)


class JobRunner:
    """Starts, runs, cancels and waits for the widget's background jobs; `on_error(sentence)` and
    `on_busy(flag)` are how it speaks to the widget."""

    def __init__(self, on_error: Callable[[str], None], on_busy: Callable[[bool], None]) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}
        """kind name -> the job of that kind that runs now."""
        self._on_error = on_error
        self._on_busy = on_busy

    def running(self, kind: JobKind) -> Job | None:
        """The job of `kind` that runs now, if one does."""
        return self._jobs.get(kind.name)

    @property
    def busy(self) -> bool:
        """Whether an exclusive job (the sweep, the advisor) runs."""
        return any(job.kind.exclusive for job in list(self._jobs.values()))

    def start(self, kind: JobKind, work: Callable[[Job], object]) -> threading.Thread | None:
        """`work(job)` in a thread of its own, started before this returns; None when the kind refuses (one
        runs already) or it was folded into the one running (`again`)."""
        with self._lock:
            job = self._claim(kind)
            if job is None:
                return None
            job.thread = threading.Thread(
                target=self._in_thread, args=(job, work), name=f"bwd-widgets-{kind.name}", daemon=True
            )
        self._claimed(job)
        job.thread.start()
        return job.thread

    def run(self, kind: JobKind, work: Callable[[Job], T], show: Callable[[str], None] | None = None) -> T | None:
        """`work(job)` here, in the caller's thread: within the job `start` made for this thread, else as a job of
        its own (a BwdWidgetsError when the kind refuses: one runs already). An error in the work becomes one
        sentence (`on_error`) and the progress line is emptied; returns None then."""
        with self._lock:
            job = self._jobs.get(kind.name)
            owned = job is None or job.thread is not threading.current_thread()
            if owned:
                job = self._claim(kind)
        if job is None:
            running = " and ".join(
                j.kind.label for j in list(self._jobs.values()) if j.kind.exclusive or j.kind == kind
            )
            raise BwdWidgetsError(f"{kind.label} cannot start while {running} runs in this widget: wait, or cancel it.")
        if owned:
            self._claimed(job)
        job.show = show
        try:
            return self._guarded(job, work)
        finally:
            if owned:
                self._release(job)

    def cancel(self, kind: JobKind) -> bool:
        """Ask the running job of `kind` to stop at its next check; False when none runs."""
        job = self._jobs.get(kind.name)
        if job is not None:
            job.stop.set()
        return job is not None

    def wait(self, kind: JobKind, timeout: float | None = None) -> bool:
        """Wait until no started job of `kind` runs (True), or `timeout` seconds for each (False)."""
        while (job := self._jobs.get(kind.name)) is not None and job.thread is not None:
            if job.thread.ident is None:  # registered, its thread about to start
                time.sleep(0.001)
                continue
            job.thread.join(timeout)
            if job.thread.is_alive():
                return False
        return True

    def _claim(self, kind: JobKind) -> Job | None:
        """Under the lock: the new job of `kind`, registered, or None when it is not to run."""
        running = self._jobs.get(kind.name)
        if running is not None and kind.when_running == "again":
            running.again = True
            return None
        if kind.exclusive and self.busy or running is not None and kind.when_running == "refuse":
            return None
        if running is not None:
            running.stop.set()  # replaced: it stops at its next check and writes nothing after
        job = self._jobs[kind.name] = Job(kind)
        return job

    def _claimed(self, job: Job) -> None:
        """Out of the lock, once `job` is registered: the busy flag is up before the caller goes on."""
        if job.kind.exclusive:
            self._on_busy(True)

    def _in_thread(self, job: Job, work: Callable[[Job], object]) -> None:
        """A started job's thread: the work, again while asked for meanwhile, then the job is released (in the
        same hold of the lock as the last look at `again`, so no request falls between)."""
        while True:
            try:
                self._guarded(job, work)
            except BaseException:  # an interrupt or an exit: the job ends all the same
                self._release(job)
                raise
            with self._lock:
                if job.again and not job.cancelled():
                    job.again = False
                    continue
                busy = self._unregister(job)
            break
        if job.kind.exclusive:
            self._on_busy(busy)

    def _guarded(self, job: Job, work: Callable[[Job], T]) -> T | None:
        """`work(job)`, an error turned into one sentence and the progress line emptied."""
        try:
            return work(job)
        except BwdWidgetsError as error:
            self._failed(job, str(error))
        except Exception as error:  # noqa: BLE001 - in a job's thread nothing else would say it
            self._failed(job, f"{job.kind.failure}: {one_line(error)}")
        return None

    def _release(self, job: Job) -> None:
        with self._lock:
            busy = self._unregister(job)
        if job.kind.exclusive:
            self._on_busy(busy)

    def _unregister(self, job: Job) -> bool:
        """Under the lock: `job` no longer runs (a newer job of its kind may); whether the widget is still busy."""
        if self._jobs.get(job.kind.name) is job:
            del self._jobs[job.kind.name]
        return self.busy

    def _failed(self, job: Job, sentence: str) -> None:
        job.report("")
        self._on_error(sentence)
