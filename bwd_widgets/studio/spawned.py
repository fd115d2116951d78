"""Work run in a fresh Python process started for it: what the widget does in the background that traces the
model (its advisor) runs there, so that nothing it patches, seeds or configures is seen by the kernel's thread.

Tracing cannot run in a thread of the kernel's process without being seen: torch.fx patches `nn.Module.__call__`
for the whole process while it traces, the capture forks the global random generator (restoring it rewinds the
draws the kernel's thread made meanwhile), and bwd_widgets quiets torch's loggers. Nor in a fork of the kernel:
once autograd has started its device threads there (CUDA builds of torch do at the first backward, GPU or not),
autograd refuses to run in a forked child. A process started afresh has neither problem; it gets the model and
its inputs by cloudpickle (which, unlike pickle, sends classes defined in the notebook by value), streamed, and
sends back messages and a plain result over a socket.
"""

from __future__ import annotations

import importlib
import multiprocessing.connection
import os
import pickle
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from ..core.errors import BwdWidgetsError, one_line

if TYPE_CHECKING:
    from collections.abc import Callable


def in_spawned_process(
    work: str,
    argument: object,
    on_message: Callable[[object], None],
    should_stop: Callable[[], bool],
    what: str,
) -> Any:
    """`work(argument, send, stop)` run in a new Python process; returns what it returns (pickled back).
    `work` names a module-level function, "package.module:function".

    `send(message)` there calls `on_message(message)` here as it comes; `stop()` there turns true once
    `should_stop()` does here. The process starts in this one's working folder with its `sys.path`, prints
    nothing into the kernel's streams and ends with the work (or is killed here on an error). A failure there,
    or a model that cannot be sent, is a BwdWidgetsError here: one sentence naming `what`."""
    ours, theirs = socket.socketpair()
    with theirs:
        process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=os.getcwd(),
        )
    connection = multiprocessing.connection.Connection(ours.detach())
    try:
        _send_work(process, work, argument, what)
        return _answer(connection, process, on_message, should_stop, what)
    finally:
        connection.close()
        if process.poll() is None:
            process.kill()  # it holds nothing of the user's: it writes no file, it only sends
        process.wait()


def _send_work(process: subprocess.Popen, work: str, argument: object, what: str) -> None:
    """Stream the work to the process: first `sys.path` (the model's classes may live in the user's modules),
    then the work's name and its argument by cloudpickle, never held whole in this process."""
    import cloudpickle

    assert process.stdin is not None
    try:
        with process.stdin:
            pickle.dump(sys.path, process.stdin)
            cloudpickle.dump((work, argument), process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
    except BrokenPipeError:
        return  # the process ended early: `_answer` says how
    except Exception as error:  # noqa: BLE001 - whatever does not pickle: one sentence
        raise BwdWidgetsError(
            f"{what} runs in a process of its own and could not send it the model ({one_line(error)}): "
            "run it from a cell instead (bw.advise(model, x, target=...))."
        ) from None


def _answer(
    connection: multiprocessing.connection.Connection,
    process: subprocess.Popen,
    on_message: Callable[[object], None],
    should_stop: Callable[[], bool],
    what: str,
) -> Any:
    """The process's messages handed to `on_message`, until its result (returned) or its failure (raised)."""
    asked_to_stop = False
    while True:
        if should_stop() and not asked_to_stop:
            asked_to_stop = True
            connection.send("stop")
        if not connection.poll(0.1):
            continue
        try:
            kind, value = connection.recv()
        except (EOFError, OSError):
            code = _exit_code(process)
            raise BwdWidgetsError(
                f"{what} stopped: its process ended without an answer (exit code {code}); start it again, or run "
                "it from a cell."
            ) from None
        if kind == "message":
            on_message(value)
        elif kind == "done":
            return value
        else:
            raise BwdWidgetsError(value)


def _exit_code(process: subprocess.Popen) -> int | None:
    deadline = time.monotonic() + 5
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return process.returncode


def _serve(fd: int) -> None:
    """In the new process: read the work, run it, send its messages and its result or its failure."""
    connection = multiprocessing.connection.Connection(fd)
    stopped = False

    def stop() -> bool:
        nonlocal stopped
        stopped = stopped or connection.poll()
        return stopped

    try:
        sys.path[:] = pickle.load(sys.stdin.buffer)
        work, argument = pickle.load(sys.stdin.buffer)  # cloudpickle's output loads with pickle
        module, name = work.split(":")
        function = getattr(importlib.import_module(module), name)
        result = function(argument, lambda message: connection.send(("message", message)), stop)
        connection.send(("done", result))
    except BwdWidgetsError as error:
        connection.send(("error", str(error)))
    except BaseException as error:  # noqa: BLE001 - the kernel says it in one sentence
        connection.send(("error", f"the work failed in its process: {one_line(error)}"))
    finally:
        connection.close()


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
