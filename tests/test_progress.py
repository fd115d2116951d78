"""The placeholder a long extraction shows: the stage read from where the kernel's thread is, and a
thread that rewrites the placeholder while the work runs."""

import sys
import threading

import torch
from torch import nn

from bwd_widgets.jupyter.progress import OTHER, STAGES, Ticker, stage_of


class Handle:
    """A display handle that keeps what it was updated with."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.seen = threading.Event()

    def update(self, data: dict, raw: bool = False) -> None:
        self.texts.append(data["text/plain"])
        self.seen.set()


def test_a_frame_inside_torch_fx_tracing_is_that_stage():
    frames = []

    class Looks(nn.Module):
        def forward(self, x):
            frames.append(sys._getframe())
            return x * 2

    torch.fx.symbolic_trace(Looks())
    assert stage_of(frames[0]) == dict(STAGES)["torch.fx"]
    assert stage_of(sys._getframe()) == OTHER  # pytest's frames and this test's: no stage of ours


def test_a_ticker_rewrites_the_placeholder_while_the_thread_works():
    handle = Handle()
    ticker = Ticker(handle, "Extracting Looks (fake mode)")
    seen_while_tracing = []

    class Waits(nn.Module):
        def forward(self, x):
            seen_while_tracing.append(handle.seen.wait(timeout=30))  # the work goes on until a tick came
            return x + 1

    torch.fx.symbolic_trace(Waits())
    summary = ticker.stop()
    assert seen_while_tracing == [True]
    assert handle.texts[0].startswith("Extracting Looks (fake mode) \u00b7 ")
    assert "\u25b6 torch.fx tracing the forward" in handle.texts[0]
    assert summary.startswith("torch.fx tracing the forward ")
    count = len(handle.texts)
    assert not ticker._thread.is_alive() and len(handle.texts) == count  # stopped: no more rewrites
