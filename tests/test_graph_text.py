"""AOT Autograd writes its graphs out as text for torch's logs on every call; a capture skips that text while
nothing reads it, and keeps it when torch's logs or its structured trace (tlparse) are on."""

import logging

import pytest
import torch

import bwd_widgets as bw
from bwd_widgets.core.capture import CaptureSession
from bwd_widgets.core.compat import aot_graph_compile, graph_text_skipped_unless_logged
from bwd_widgets.examples import MLP


@pytest.fixture
def printed(monkeypatch):
    """How many times a GraphModule was printed readable (the text torch's AOT logs take), counted after one
    capture: in a process's first, torch's lazy trace handler is still there to decide whether TORCH_TRACE is
    on (it removes itself when not), so that capture writes the text as torch alone would."""
    bw.extract(MLP(), torch.randn(4, 16))
    calls = []
    original = torch.fx.GraphModule.print_readable

    def counted(self, *args, **kwargs):
        calls.append(type(self).__name__)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.fx.GraphModule, "print_readable", counted)
    return calls


@pytest.mark.parametrize("route", ["fx", "dynamo"])
def test_no_graph_text_while_no_log_reads_it(printed, monkeypatch, route):
    regions = []
    dynamo_region = CaptureSession._dynamo_region
    monkeypatch.setattr(CaptureSession, "_dynamo_region", lambda *a: regions.append(1) or dynamo_region(*a))
    model, x = MLP(), torch.randn(4, 16)
    extraction = bw.extract(model, x) if route == "fx" else bw.extract(lambda t: model(t).relu(), x)
    assert bool(regions) == (route == "dynamo")
    assert extraction.summary()["backward_nodes"] > 0
    assert printed == []
    assert aot_graph_compile._log_joint_graph.__name__ == "_log_joint_graph"  # torch's own again afterwards


def test_the_text_is_kept_for_torchs_aot_logs(printed):
    torch._logging.set_logs(aot_joint_graph=True)
    try:
        bw.extract(MLP(), torch.randn(4, 16))
    finally:
        torch._logging.set_logs()
    assert printed, "torch's joint-graph log asked for the text, and got none"


def test_the_text_is_kept_for_torchs_structured_trace(printed):
    from torch._logging._internal import trace_log

    handler = logging.NullHandler()
    trace_log.addHandler(handler)
    try:
        bw.extract(MLP(), torch.randn(4, 16))
    finally:
        trace_log.removeHandler(handler)
    assert len(printed) >= 3  # the joint graph, the forward and the backward


def test_nested_and_overlapping_captures_put_torchs_functions_back_once_all_end(printed):
    joint = aot_graph_compile._log_joint_graph
    outer = graph_text_skipped_unless_logged()
    inner = graph_text_skipped_unless_logged()
    outer.__enter__()
    inner.__enter__()
    assert aot_graph_compile._log_joint_graph is not joint
    outer.__exit__(None, None, None)
    assert aot_graph_compile._log_joint_graph is not joint  # the inner capture still runs
    inner.__exit__(None, None, None)
    assert aot_graph_compile._log_joint_graph is joint
