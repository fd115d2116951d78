"""The placeholder a long extraction shows: the stage read from where the kernel's thread is, and a
thread that rewrites the placeholder while the work runs."""

import collections
import sys
import threading
import time

import pytest
import torch
from torch import nn

import bwd_widgets as bw
from bwd_widgets.examples import MLP
from bwd_widgets.extraction.extract import ROUTE_BY_THREAD
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


def test_dynamos_bookkeeping_outside_a_capture_is_not_tracing_the_forward():
    """CI once saw one sample of "Dynamo tracing" in a torch.fx-route extraction: a Dynamo frame outside any
    capture (here Dynamo's disable wrapper calling back; in the wild a cleanup callback the garbage collector runs
    when an earlier call's compiled code dies) takes the stage of the frames around it; inside a Dynamo capture
    it is that capture's tracing."""
    frames = []
    torch._dynamo.disable(lambda: frames.append(sys._getframe()))()
    assert stage_of(frames[0]) == OTHER
    assert stage_of(frames[0], "dynamo") == dict(STAGES)["torch._dynamo"]
    assert stage_of(frames[0], "fx") == dict(STAGES)["torch.fx"]  # the torch.fx route's capture is at work


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


# A first extraction reported both Dynamo and torch.fx tracing (issue 43, item 13): it names the route it took.
DYNAMO, FX = "Dynamo tracing the forward", "torch.fx tracing the forward"


class KeywordOnly(torch.nn.Module):
    """A keyword input keeps the call off the torch.fx route: Dynamo traces it."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:
        return self.linear(x).relu() * scale


def _stages(run) -> collections.Counter:
    seen: collections.Counter = collections.Counter()
    watched, done = threading.get_ident(), threading.Event()

    def watch() -> None:
        while not done.is_set():
            frame = sys._current_frames().get(watched)
            if frame is not None:
                seen[stage_of(frame, ROUTE_BY_THREAD.get(watched))] += 1
            del frame
            time.sleep(0.001)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        run()
    finally:
        done.set()
        thread.join()
    return seen


@pytest.mark.parametrize(
    "run, route, other",
    [
        (lambda: bw.extract(MLP(width=8, depth=2), torch.randn(4, 8), cache=False), FX, DYNAMO),
        (lambda: bw.extract(KeywordOnly(), torch.randn(4, 8), scale=2.0, cache=False), DYNAMO, FX),
        (lambda: bw.extract(MLP(width=8, depth=3), torch.randn(4, 8)), FX, DYNAMO),  # the cache's guards: Dynamo
    ],
    ids=["fx", "dynamo", "fx_with_the_trace_cache"],
)
def test_an_extraction_reports_only_the_route_it_took(run, route, other):
    seen = _stages(run)
    assert other not in seen, seen
