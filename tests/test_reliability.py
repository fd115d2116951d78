"""Findings of the third reliability pass (issue 23), each held by a test that failed before its fix."""

import torch

import bwd_widgets as bw


def _linear():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 3)


def test_inputs_made_under_inference_mode_extract():
    model = _linear()
    with torch.inference_mode():
        x = torch.randn(2, 4)
    extraction = bw.extract(model, x)
    x_eager = x.clone().requires_grad_(True)
    model(x_eager).sum().backward()
    torch.testing.assert_close(extraction.autograd_gradients["input"], x_eager.grad)
    torch.testing.assert_close(extraction.autograd_gradients["weight"], model.weight.grad)


def test_extract_called_inside_inference_mode_records_the_backward():
    model = _linear()
    with torch.inference_mode():
        extraction = bw.extract(model, torch.randn(2, 4))
        assert torch.is_inference_mode_enabled(), "the caller's mode is back after the call"
    assert {g.key for g in extraction.gradients} == {"input", "weight", "bias"}
    assert not torch.is_inference_mode_enabled()
