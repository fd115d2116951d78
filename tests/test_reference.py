"""The conv + batch_norm reference extraction must hold node for node."""

import re

import pytest
import torch

import bwd_widgets as bw


def _normalise(text: str) -> list:
    return [line.rstrip() for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def reference(conv_bn_dir):
    sample = bw.load_graphnet_sample(conv_bn_dir)
    return conv_bn_dir, sample, bw.extract(sample)


def test_requires_grad_follows_graphnet_rule(reference):
    _, _, extraction = reference
    assert extraction.requires_grad == {
        "w_0": False,
        "w_1": False,
        "w_2": True,
        "w_3": True,
        "w_4": True,
        "in_0": True,
    }


def test_backward_graph_node_for_node(reference):
    folder, _, extraction = reference
    expected = _normalise((folder / "expected_backward_graph.txt").read_text())
    actual = _normalise(str(extraction.backward.graph))
    assert [re.sub(r"\s+", " ", line.strip()) for line in actual] == [
        re.sub(r"\s+", " ", line.strip()) for line in expected
    ]
    placeholders = [n.name for n in extraction.backward.graph.find_nodes(op="placeholder")]
    assert placeholders == [
        "primals_1",
        "primals_2",
        "primals_4",
        "primals_5",
        "primals_6",
        "convolution",
        "getitem_1",
        "getitem_2",
        "tangents_1",
    ]


def test_backward_code_matches_reference(reference):
    folder, _, extraction = reference
    expected = _normalise((folder / "expected_backward_model.py").read_text())
    assert _normalise(extraction.backward_code) == expected


def test_saved_tensors(reference):
    _, sample, extraction = reference
    saved = {s.name: s for s in extraction.saved_tensors}
    activations = [s.name for s in extraction.saved_tensors if s.kind == "activation"]
    assert activations == ["convolution", "getitem_1", "getitem_2"]
    kept_inputs = [s.name for s in extraction.saved_tensors if s.kind != "activation"]
    assert kept_inputs == ["primals_1", "primals_2", "primals_4", "primals_5", "primals_6"]
    # primals follow the sample's argument order: w_0 w_1 w_2 w_3 w_4 in_0
    assert saved["primals_1"].source == "bn.running_mean" and saved["primals_1"].kind == "buffer"
    assert saved["primals_4"].source == "bn.weight" and saved["primals_4"].kind == "parameter"
    assert saved["primals_5"].source == "conv.weight"
    assert saved["primals_6"].source == "x" and saved["primals_6"].kind == "input"
    by_arg = dict(zip(["w_0", "w_1", "w_2", "w_3", "w_4", "in_0"], sample.inputs))
    for primal, arg in [
        ("primals_1", "w_0"),
        ("primals_2", "w_1"),
        ("primals_4", "w_3"),
        ("primals_5", "w_4"),
        ("primals_6", "in_0"),
    ]:
        tensor = by_arg[arg]
        assert saved[primal].bytes == tensor.numel() * tensor.element_size()
        assert saved[primal].shape == tuple(tensor.shape)
    # conv output: batch 2, 8 channels, 16x16, float32
    assert saved["convolution"].bytes == 2 * 8 * 16 * 16 * 4
    assert saved["convolution"].producer == "aten.convolution"
    assert saved["convolution"].module == "conv"
    assert "model.py:7" in saved["convolution"].source_line
    assert saved["getitem_1"].producer.startswith("aten._native_batch_norm_legit")
    assert saved["convolution"].users == ["native_batch_norm_backward"]
    assert extraction.saved_activation_bytes == sum(saved[n].bytes for n in activations)
    assert extraction.saved_input_bytes == sum(saved[n].bytes for n in kept_inputs)


def test_gradients_name_what_they_differentiate(reference):
    _, _, extraction = reference
    assert [(g.name, g.grad_of) for g in extraction.gradients] == [
        ("getitem_5", "bn.bias"),
        ("getitem_4", "bn.weight"),
        ("getitem_7", "conv.weight"),
        ("getitem_6", "x"),
    ]
    assert [t.name for t in extraction.tangents] == ["tangents_1"]


def test_backward_reproduces_autograd_gradients(reference):
    _, _, extraction = reference
    pair = extraction.partitions[0]
    outputs = pair.backward(*pair.backward_inputs)
    expected = [extraction.autograd_gradients[arg] for arg in ("w_2", "w_3", "w_4", "in_0")]
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        torch.testing.assert_close(got, want)
