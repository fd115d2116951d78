"""An output that is a view of an input keeps its gradient in the backward graph (issue 23, finding 4).

AOT Autograd regenerates such an output outside its graphs, so eager autograd, not the backward graph,
carried its gradient: the graph (and the GraphNet sample written from it) silently missed it.
"""

import pytest
import torch
from torch import nn

import bwd_widgets as bw


class _ViewOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return x[0], self.lin(x), x.t()


class _ViewOutKeyword(_ViewOut):
    """A keyword input: the Dynamo route."""

    def forward(self, x, *, scale):
        return x[0], self.lin(x) * scale, x.t()


class _WeightView(_ViewOut):
    def forward(self, x):
        return self.lin(x), self.lin.weight.t()


def _graph_gradients(extraction: bw.BackwardExtraction) -> dict[str, torch.Tensor]:
    """The backward graph run on its real inputs: each gradient by its key."""
    partition = extraction.partitions[0]
    graph = partition.backward_with_nones
    values = graph(*partition.backward_inputs)
    names = [None if node is None else node.name for node in graph.graph.output_node().args[0]]
    by_name = dict(zip(names, values))
    return {gradient.key: by_name[gradient.name] for gradient in partition.gradients}


@pytest.mark.parametrize(
    "model, keywords",
    [(_ViewOut, {}), (_ViewOutKeyword, {"scale": 2.0}), (_WeightView, {})],
    ids=["torch.fx", "Dynamo", "parameter"],
)
def test_an_output_aliasing_an_input_keeps_its_gradient_in_the_backward_graph(model, keywords):
    torch.manual_seed(0)
    module, x = model(), torch.randn(3, 4)
    extraction = bw.extract(module, x, **keywords)
    x_eager = x.clone().requires_grad_(True)
    outputs = module(x_eager, **keywords)
    leaves = [x_eager, *module.parameters()]
    eager = torch.autograd.grad(outputs, leaves, [torch.ones_like(o) for o in outputs])
    expected = dict(zip(["x", *(n for n, _ in module.named_parameters())], eager))
    graph = _graph_gradients(extraction)
    for key, gradient in expected.items():
        torch.testing.assert_close(extraction.autograd_gradients[key], gradient, msg=f"autograd's {key}")
        torch.testing.assert_close(graph[key], gradient, msg=f"the backward graph's {key}")
    assert len(extraction.tangents) == len(outputs), "one tangent per output, in the graph and the sample"
    assert any("view of an input" in note for note in extraction.notes), extraction.notes


def test_a_model_without_aliased_outputs_gets_no_clone_and_no_note():
    torch.manual_seed(0)
    extraction = bw.extract(nn.Linear(4, 4), torch.randn(3, 4))
    assert not any(node.target == "clone" for node in extraction.forward.graph.nodes)
    assert not any("view of an input" in note for note in extraction.notes)


def _no_fake_run(*args):
    pytest.fail("the torch.fx route ran the forward under fake tensors")  # a BaseException: no route retries it


def _no_dynamo(*args, **kwargs):
    pytest.fail("the extraction fell back to the Dynamo route")


@pytest.mark.parametrize("model", [_ViewOut, _WeightView, nn.Linear], ids=["input view", "parameter", "none"])
def test_the_torch_fx_route_reads_aliasing_from_aot_autograd_without_a_fake_run(model, monkeypatch):
    """torch's own `output_info` says which outputs alias an input: no extra run of the forward."""
    from bwd_widgets.core import capture

    monkeypatch.setattr(capture, "fake_values", _no_fake_run)
    monkeypatch.setattr(capture.CaptureSession, "compile_dynamo", _no_dynamo)
    module = model(4, 4) if model is nn.Linear else model()
    extraction = bw.extract(module, torch.randn(3, 4))
    copies = [node for node in extraction.forward.graph.nodes if node.target == torch.ops.aten.clone.default]
    assert bool(copies) == (model is not nn.Linear)
    assert any("view of an input" in note for note in extraction.notes) == (model is not nn.Linear)


def test_a_torch_without_aliasing_metadata_gets_the_check_from_a_fake_run(monkeypatch):
    from bwd_widgets.core import capture

    monkeypatch.setattr(capture, "outputs_aliasing_inputs", lambda count: None)
    monkeypatch.setattr(capture.CaptureSession, "compile_dynamo", _no_dynamo)
    ran = []
    real_fake_values = capture.fake_values
    monkeypatch.setattr(capture, "fake_values", lambda *a: ran.append(1) or real_fake_values(*a))
    torch.manual_seed(0)
    module, x = _ViewOut(), torch.randn(3, 4)
    extraction = bw.extract(module, x)
    x_eager = x.clone().requires_grad_(True)
    outputs = module(x_eager)
    (expected,) = torch.autograd.grad(outputs, [x_eager], [torch.ones_like(o) for o in outputs])
    torch.testing.assert_close(_graph_gradients(extraction)["x"], expected)
    assert len(extraction.partitions) == 1, "the region traced with the aliasing outputs is forgotten"
    assert ran == [1], "the fallback's fake run found the aliasing outputs"
    assert any("view of an input" in note for note in extraction.notes)
