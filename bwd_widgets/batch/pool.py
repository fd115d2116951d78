"""Worker processes on this machine: one sample in each at a time; a crashed or hung one is replaced.

Hand-written rather than pebble or loky: a crash record says why the process died (the signal, the exit
code, the C++ `what():` line it printed for this sample, read from its own log), a worker's imports are
paid before it takes a sample, and the Dask path drives the same `WorkerProcess` from a Dask worker.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Literal, Protocol

import torch

from ..core.cores import cores
from ..core.errors import BatchError
from .scratch import SCRATCH_ENV, ScratchFolder
from .worker import READY, THREADS_ENV, WORKER_COMMAND, run_sample

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .records import SampleRecord, SampleRequest


class Pool(Protocol):
    """Where a batch's samples run: results come back in the order they finish, one per request."""

    def results(self, requests: Iterator[SampleRequest], count: int) -> Iterator[SampleRecord]: ...

    def close(self) -> None: ...


class WorkerProcess:
    """One worker process and its pipes; a sample in it at a time."""

    def __init__(self, threads: int):
        request_read, request_write = os.pipe()
        result_read, result_write = os.pipe()
        self.scratch = ScratchFolder()  # its log and its samples' copies: the next run removes it if we are killed
        self.log_path = str(self.scratch.path / "worker.log")
        handle = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        env = {**os.environ, THREADS_ENV: str(threads), SCRATCH_ENV: str(self.scratch.path)}
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", WORKER_COMMAND], stdin=request_read, stdout=result_write, stderr=handle, env=env
            )
            self.scratch.add(self.process.pid)
        except BaseException:
            self.scratch.remove()
            raise
        finally:
            os.close(request_read)
            os.close(result_write)
            os.close(handle)
        self.requests = Connection(request_write, readable=False)
        self.results = Connection(result_read, writable=False)
        self.ready = False
        self.alive = True
        self.request: SampleRequest | None = None
        self.started = 0.0
        self.deadline = float("inf")
        self.log_offset = 0

    def dispatch(self, request: SampleRequest, timeout: float) -> None:
        self.request, self.started = request, time.monotonic()
        self.deadline = self.started + timeout
        self.log_offset = os.path.getsize(self.log_path)
        self.requests.send(request)

    def receive(self) -> SampleRecord | None:
        """The result of the sample in flight (a crash record if the process died), or None for `ready`."""
        try:
            message = self.results.recv()
        except (EOFError, OSError):
            returncode = self.process.wait()
            self.alive = False
            if self.request is None:
                if self.ready:
                    return None
                detail = self._log_tail(0) or f"exit code {returncode}"
                raise BatchError(f"a worker process could not start: {detail}") from None
            return self.failure("crash", returncode)
        if message == READY:
            self.ready = True
            return None
        self.request = None
        record: SampleRecord = message
        return record

    def failure(
        self, status: Literal["crash", "timeout"], returncode: int | None = None, timeout: float | None = None
    ) -> SampleRecord:
        """The record of the sample in flight when its process crashed or was stopped for its timeout."""
        request, self.request = self.request, None
        assert request is not None, "a failure is the failure of a sample in flight"
        if status == "timeout":
            reason = f"took longer than the {timeout:g} s timeout; its worker process was stopped"
        else:
            reason = _crash_reason(returncode, self._log_tail(self.log_offset), request["files"])
        seconds = round(time.monotonic() - self.started, 3)
        return {"name": request["name"], "status": status, "reason": reason, "seconds": seconds}

    def wait_ready(self) -> None:
        """Block until the worker has imported torch and bwd_widgets (raises BatchError if it cannot start)."""
        while not self.ready:
            self.receive()

    def run(self, request: SampleRequest, timeout: float) -> SampleRecord:
        """Blocking: one sample, with its timeout; the process is stopped if it crashed or hung."""
        self.wait_ready()
        self.dispatch(request, timeout)
        if not wait([self.results], timeout):
            self.close()
            return self.failure("timeout", timeout=timeout)
        result = self.receive()
        assert result is not None, "a ready worker answers a request with its record"
        return result

    def _log_tail(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                text = log.read()[-8192:].decode(errors="replace")
        except OSError:
            return ""
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        chosen = [line for line in lines if "what():" in line] or lines
        return chosen[-1].replace("what():", "").strip()[:200] if chosen else ""

    def close(self) -> None:
        self.alive = False
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.requests.close()
        self.results.close()
        self.scratch.remove()


SIGNAL_CHECK_S = 0.25
"""The longest the client waits on its workers before Python runs a pending signal handler. Ctrl-C may be delivered
to any thread of the process (tqdm's monitor thread, for one); Python runs the handler in the main thread only
when that thread wakes, and a wait on the workers' pipes with no other end would sleep through it (the batch then
ignored Ctrl-C until a sample ended, its timeout at the latest: CI saw it hang 120 s)."""

_SIGNALS = {
    "SIGABRT": "aborted (SIGABRT)",
    "SIGKILL": "was killed (SIGKILL, as the out-of-memory killer does)",
    "SIGSEGV": "crashed (SIGSEGV)",
}


def _crash_reason(returncode: int | None, detail: str, files: dict[str, bytes]) -> str:
    if returncode is not None and returncode < 0:
        try:
            signal_name = signal.Signals(-returncode).name
        except ValueError:
            signal_name = f"signal {-returncode}"
        reason = f"the worker process {_SIGNALS.get(signal_name, f'was killed by {signal_name}')}"
    else:
        reason = f"the worker process exited with code {returncode} (os._exit or a fatal error in the sample's code)"
    if detail:
        reason += f": {detail}"
    if b"cuda" in files.get("model.py", b"") and not torch.cuda.is_available():
        reason += "; model.py mentions cuda, which this machine has not got"
    return " ".join(reason.split())[:300]


class InProcessPool:
    """Samples run in this process, one after another: for callers that are themselves a worker (GraphNet's
    sample-pass driver runs each pass in the process it starts)."""

    def __init__(self) -> None:
        self.scratch = ScratchFolder()

    def results(self, requests: Iterator[SampleRequest], count: int) -> Iterator[SampleRecord]:
        for request in requests:
            yield run_sample(request, self.scratch.path)
            gc.collect()  # what the sample left, once its record is handled (as a worker does after sending)

    def close(self) -> None:
        self.scratch.remove()


class LocalPool:
    """`workers` worker processes on this machine; a crashed or hung one is replaced."""

    def __init__(self, workers: int, timeout: float):
        self.size, self.timeout = workers, timeout
        self.workers: list[WorkerProcess] = []

    def results(self, requests: Iterator[SampleRequest], count: int) -> Iterator[SampleRecord]:
        if count == 0:
            return
        threads = max(1, cores() // self.size)
        self.workers = [WorkerProcess(threads) for _ in range(min(self.size, count))]
        exhausted = False
        while True:
            exhausted = self._dispatch(requests, exhausted)
            busy = [w for w in self.workers if w.request is not None]
            if exhausted and not busy:
                return
            finished = self._collect(busy)
            for worker in [w for w in self.workers if not w.alive]:
                worker.close()  # replaced while samples remain
                self.workers.remove(worker)
                if not exhausted:
                    self.workers.append(WorkerProcess(threads))
            yield from finished

    def _dispatch(self, requests: Iterator[SampleRequest], exhausted: bool) -> bool:
        """A request to each ready, idle worker; returns whether the requests are exhausted."""
        for worker in self.workers:
            if worker.ready and worker.request is None and not exhausted:
                request = next(requests, None)
                if request is None:
                    exhausted = True
                else:
                    worker.dispatch(request, self.timeout)
        return exhausted

    def _collect(self, busy: list[WorkerProcess]) -> list[SampleRecord]:
        """Wait for a worker's message or the nearest deadline; the records of samples that finished."""
        deadline = min((w.deadline for w in busy), default=float("inf"))
        pause = min(SIGNAL_CHECK_S, max(0.0, deadline - time.monotonic()))
        readable = wait([w.results for w in self.workers], pause)
        finished = []
        for worker in self.workers:
            if worker.results in readable:
                result = worker.receive()
                if result is not None:
                    finished.append(result)
            elif worker.request is not None and time.monotonic() >= worker.deadline:
                worker.close()
                finished.append(worker.failure("timeout", timeout=self.timeout))
        return finished

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
