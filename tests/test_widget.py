"""The widget's kernel side: traits, reruns, repr, exports. The browser side is in tests/browser."""

import json
import shutil

import pytest
import torch

import bwd_widgets as bw
from bwd_widgets._graph_data import graph_payload
from bwd_widgets.examples import Transformer


@pytest.fixture(scope="module")
def reference(conv_bn_dir):
    return bw.extract(bw.load_graphnet_sample(conv_bn_dir))


def test_payload_of_the_reference(reference):
    payload = graph_payload(reference)
    kinds = {n["id"]: n["kind"] for n in payload["nodes"]}
    assert len(kinds) == 16
    assert [k for k, v in kinds.items() if v == "saved"] == [
        "primals_1", "primals_2", "primals_4", "primals_5", "primals_6", "convolution", "getitem_1", "getitem_2"]
    assert kinds["tangents_1"] == "tangent"
    gradients = {n["id"]: n["grad_of"] for n in payload["nodes"] if n["kind"] == "gradient"}
    assert gradients == {"getitem_4": ["bn.weight"], "getitem_5": ["bn.bias"], "getitem_6": ["x"], "getitem_7": ["conv.weight"]}
    modules = {n["id"]: n["module"] for n in payload["nodes"]}
    assert modules["convolution_backward"] == "conv" and modules["native_batch_norm_backward"] == "bn"
    lines = payload["code"]["backward"].splitlines()
    line = next(n["line"] for n in payload["nodes"] if n["id"] == "convolution_backward")
    assert lines[line - 1].strip().startswith("convolution_backward = ")
    assert ["getitem_3", "convolution_backward"] in payload["edges"]
    assert payload["totals"]["saved_activation_bytes"] == reference.saved_activation_bytes


def test_widget_repr_is_deterministic(reference):
    widget = bw.show(reference)
    assert repr(widget) == f"BackwardGraph(bw_nodes=16, saved=8, saved_activation_bytes={2 * 8 * 16 * 16 * 4})"


def test_partitioner_traits_rerun_and_keep_the_previous_totals():
    torch.manual_seed(0)
    widget = bw.show(Transformer(width=32, depth=2), torch.randint(0, 64, (2, 16)))
    before = widget.data["totals"]
    widget.selected = "tangents_1"
    widget.memory_budget = 0.0  # no effect under the default partitioner...
    widget.partitioner = "min_cut"  # ...until min-cut uses it
    assert widget.data["partitioner"] == "min_cut" and widget.data["memory_budget"] == 0.0
    assert widget.previous == {"saved": before["saved"], "saved_activation_bytes": before["saved_activation_bytes"]}
    assert widget.data["totals"]["saved_activation_bytes"] < before["saved_activation_bytes"]
    assert widget.selected == "tangents_1" and widget.busy is False and widget.error == ""
    assert torch._functorch.config.activation_memory_budget == 1.0


def test_a_failed_rerun_shows_one_line_and_keeps_the_graph():
    widget = bw.show(Transformer(width=32, depth=1), torch.randint(0, 64, (2, 8)))
    data = widget.data
    widget.partitioner = "nonsense"
    assert "unknown partitioner" in widget.error and "\n" not in widget.error
    assert widget.data is data


def test_html_export_is_self_contained(reference, tmp_path):
    path = reference.to_html(tmp_path / "reference.html")
    text = path.read_text()
    assert "http://" not in text.replace("http://www.w3.org", "") and "https://" not in text
    start = text.index('id="bwd-data">') + len('id="bwd-data">')
    state = json.loads(text[start:text.index("</script>", start)])
    assert len(state["data"]["nodes"]) == 16 and state["can_rerun"] is False


def test_html_export_escapes_names(tmp_path):
    class Model(torch.nn.Module):
        def forward(self, x):
            return x.sin()

    extraction = bw.extract(Model(), torch.randn(3), name="</script><script>alert(1)</script>")
    text = extraction.to_html(tmp_path / "x.html").read_text()
    assert "<script>alert(1)" not in text


def test_dot_and_svg(reference, tmp_path):
    dot = reference.to_dot()
    assert "subgraph cluster_bn" in dot and "subgraph cluster_conv" in dot
    assert "grad of conv.weight" in dot
    if shutil.which("dot") is None:
        with pytest.raises(bw.BwdWidgetsError, match="apt install graphviz"):
            reference.save_svg(tmp_path / "g.svg")
    else:
        svg = reference.save_svg(tmp_path / "g.svg").read_text()
        assert "<svg" in svg and "convolution_backward" in svg
