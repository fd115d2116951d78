"""Ctrl-C held while torch works: torch's global state is undone in finally blocks an interrupt can skip."""

from __future__ import annotations

import contextlib
import inspect
import signal
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Ctrl-C waits until the block ends, then stops as usual.

    torch's tracers (torch.fx's, make_fx's inside AOT Autograd, Dynamo's) patch global state (nn.Module.__call__,
    dispatch modes) and undo it in finally blocks; an interrupt landing in one left every later eager module
    returning a Proxy, or aborted the process. One landing inside `no_grad().__enter__`, after it turned
    gradients off, skips even the `finally`: a partition made again left gradients off for the whole kernel.
    Only the main thread receives signals, so elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread() or not callable(signal.getsignal(signal.SIGINT)):
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: object) -> None:
        if not held:
            sys.stderr.write("Ctrl-C: bwd_widgets stops when torch's work ends (stopping it midway breaks torch).\n")
        held.append(signum)

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held and callable(previous):
            previous(held[0], inspect.currentframe())  # Python's own handler raises KeyboardInterrupt
