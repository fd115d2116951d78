"""Predicted against measured: `g.measure()` runs the real graphs op by op and counts live storages.

The prediction (`core/memory.py`) and the measurement share their rules (storages the graphs allocate,
each once, not forward inputs or tangents; values dropped after their last use; gradients alive to the
end of backward), so their curves must agree step by step. Where they do not, the test says which side
is wrong and why.
"""

import dataclasses
import json
import pickle

import pytest
import torch
from torch import nn
from torch.cuda import _memory_viz

import bwd_widgets as bw
from bwd_widgets.core import memory
from bwd_widgets.examples import MLP

from shared_data import shared_path

PARTITIONS = [("default", None), ("min_cut", 1.0), ("min_cut", 0.5), ("min_cut", 0.0)]


def _steps(points: list[dict]) -> list[tuple]:
    return [(p["phase"], p["node"], p["graph"]) for p in points]


def _assert_same_curve(g: bw.BackwardExtraction) -> None:
    predicted = g.memory_timeline()
    measured = g.measure()
    assert _steps(measured.curve) == _steps(predicted), "one measured point per predicted step"
    assert [p["live_bytes"] for p in measured.curve] == [s["live_bytes"] for s in predicted]
    assert measured.peak_bytes == measured.predicted_peak_bytes == g.peak_activation_bytes
    assert measured.error_percent == 0.0 and measured.peak_step == g.peak.step
    # the parameters' gradients' storages, measured as the prediction's band of them
    assert measured.gradient_bytes == memory.parameter_gradients_live(g.partitions)
    assert measured.activation_peak_bytes == g.peak_activation_only_bytes


@pytest.mark.parametrize("partitioner, budget", PARTITIONS)
@pytest.mark.parametrize("name", ["MLP", "Block", "Transformer", "ConvBN", "GraphBreak"])
def test_measured_curve_equals_the_prediction_on_the_course_models(course_models, name, partitioner, budget):
    """Exact, op by op, for every partitioner (GraphBreak: two regions, forwards then backwards in reverse)."""
    _assert_same_curve(course_models[name].rerun(partitioner, budget))


def test_against_the_cuda_allocators_peak_the_prediction_is_counted_in_its_blocks(course_models):
    """`torch.cuda.max_memory_allocated` counts whole 512-byte blocks: where it is the measured peak, the prediction
    it is held against is the timeline in those blocks (`predicted_blocks`, set by `measure` on CUDA), so rounding
    is no error; on the CPU the prediction stays in storage bytes. The MLP's storages are mostly under a block."""
    g = course_models["MLP"]
    measured = g.measure()
    assert measured.predicted_blocks is None and measured.allocator_peak_bytes is None
    blocks = [s["live_bytes"] for s in memory.timeline(g.partitions, memory.allocator_block)]
    assert max(blocks) > 1.4 * g.peak_activation_bytes  # the rounding is no small term here
    on_cuda = dataclasses.replace(measured, allocator_peak_bytes=max(blocks), predicted_blocks=blocks)
    assert on_cuda.predicted_peak_bytes == on_cuda.peak_bytes == max(blocks) and on_cuda.error_percent == 0.0
    bytes_only = dataclasses.replace(measured, allocator_peak_bytes=max(blocks))  # a snapshot's peak: no blocks
    assert bytes_only.predicted_peak_bytes == g.peak_activation_bytes


@pytest.fixture(scope="module")
def gpt2():
    pytest.importorskip("transformers")
    import zoo_models

    entry = next(e for e in zoo_models.TRANSFORMERS if e.name == "gpt2")
    model, inputs = entry.make()
    return zoo_models.extract(entry, model, inputs)


def test_measured_curve_equals_the_prediction_on_gpt2(gpt2):
    _assert_same_curve(gpt2)


def test_min_cut_on_gpt2_curve_equals_the_prediction(gpt2):
    """min-cut's CSE leaves views whose fake value names a duplicate's storage; the prediction follows the
    view's schema (it shares its input's memory), as the run does: the curves agree step by step."""
    _assert_same_curve(gpt2.rerun("min_cut", 1.0))


class ShiftRight(nn.Module):
    """BART's, Whisper's and T5's `shift_tokens_right`: a copy into a slice of new zeros."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 4)

    def forward(self, ids):
        shifted = ids.new_zeros(ids.shape)
        shifted[:, 1:] = ids[:, :-1].clone()
        return self.embed(shifted)


def test_a_copy_into_a_slice_is_a_storage_offset_larger_than_torchs_fake_value_says():
    """The one place found where the curves differ by rule of torch, not of the prediction: the
    functional `copy` of a slice keeps the slice's storage offset at run time (96 B here), but the fake
    value torch recorded for it starts at offset 0 (88 B). The prediction reads torch's value; the
    measurement is 8 B (one int64, the offset) higher while that copy lives."""
    g = bw.extract(ShiftRight(), torch.randint(0, 16, (2, 6)))
    measured = g.measure()
    over = {p["node"]: p["live_bytes"] - s["live_bytes"] for p, s in zip(measured.curve, g.memory_timeline())}
    assert {n for n, d in over.items() if d} == {"copy", "slice_scatter"} and set(over.values()) == {0, 8}
    copy = next(n for n in g.forward.graph.nodes if n.name == "copy")
    assert copy.args[0].meta["val"].storage_offset() == 1 and copy.meta["val"].storage_offset() == 0


@pytest.mark.parametrize(
    "sample, partitions",
    [
        ("torchgeometric/RECT_L", PARTITIONS),
        ("transformers-auto-model/hf-tiny-model-private_tiny-random-DebertaForSequenceClassification", PARTITIONS),
        ("transformers-auto-model/hf-tiny-model-private_tiny-random-TimesformerForVideoClassification", PARTITIONS),
        # torch's own min-cut fails at budget 0.5 on these (test_torch_reasons): the other three plans
        ("timm/test_efficientnet.r160_in1k", [p for p in PARTITIONS if p[1] != 0.5]),
        ("timm/test_byobnet.r160_in1k", [p for p in PARTITIONS if p[1] != 0.5]),
    ],
)
def test_measured_curve_equals_the_prediction_on_graphnet_samples(sample, partitions):
    g = bw.extract(bw.load_graphnet_sample(shared_path("graphnet_samples", *sample.split("/"))))
    for partitioner, budget in partitions:
        _assert_same_curve(g.rerun(partitioner, budget))


def test_the_result_is_kept_on_the_extraction_and_a_rerun_starts_unmeasured(course_models):
    g = course_models["MLP"].rerun("default")
    assert g.measured is None
    measured = g.measure()
    assert g.measured is measured and g.rerun("min_cut").measured is None
    assert measured.device == "cpu" and measured.allocator_peak_bytes is None
    assert measured.predicted == [s["live_bytes"] for s in g.memory_timeline()]


def test_the_memory_viz_file_loads_in_torchs_own_memory_viz(course_models, tmp_path):
    g = course_models["Transformer"].rerun("min_cut", 0.5)
    measured = g.measure()
    path = measured.to_memory_viz(tmp_path / "run.pickle")
    with path.open("rb") as f:
        snapshot = pickle.load(f)
    assert set(snapshot) == {"segments", "device_traces"}
    text = _memory_viz.trace(snapshot)  # its "TOTAL MEM" line is not a check: torch reuses `count`
    assert f"{len(snapshot['device_traces'][0])} entries" in text and "del " in text
    assert "snapshot.pickle" in _memory_viz.trace_plot(snapshot)
    assert "snapshot.pickle" in _memory_viz.segment_plot(snapshot)
    assert "segments: 1" in _memory_viz.segsum(snapshot)
    live, highest = 0, 0
    for event in snapshot["device_traces"][0]:
        live += {"alloc": event["size"], "free_completed": -event["size"]}.get(event["action"], 0)
        highest = max(highest, live)
    assert highest == measured.peak_bytes and live == 0, "every storage the run allocated is freed by its end"
    first = snapshot["device_traces"][0][0]
    assert first["action"] == "alloc" and first["frames"][0]["name"] in {p["node"] for p in measured.curve}


def test_fake_mode_says_measure_needs_real_values():
    g = bw.extract(MLP(width=8, depth=2), torch.randn(2, 8), mode="fake")
    with pytest.raises(bw.MeasureNeedsRealModeError, match="real-mode extraction") as error:
        g.measure()
    assert isinstance(error.value, ValueError) and "\n" not in str(error.value)
    assert g.measured is None


def test_the_payload_carries_the_measurement_once_measured(course_models):
    """Measuring runs the model, so the widget never does it: `g.measure()` keeps its result and the next
    `bw.show(g)` (this payload) draws it over the prediction."""
    from bwd_widgets.views.payload import graph_payload

    g = course_models["Transformer"].rerun("min_cut", 0.5)
    assert graph_payload(g)["run"]["memory"]["measured"] is None
    result = g.measure()
    memory = graph_payload(g)["run"]["memory"]
    measured = memory["measured"]
    assert measured is not None and json.loads(json.dumps(measured)) == measured
    assert measured["peak"]["live_bytes"] == result.peak_bytes and measured["peak"]["step"] == memory["peak"]["step"]
    assert measured["predicted_peak_bytes"] == memory["peak"]["live_bytes"] and measured["error_percent"] == 0.0
    curve = {p["step"]: p["live_bytes"] for p in measured["timeline"]}
    assert all(curve.get(p["step"], p["live_bytes"]) == p["live_bytes"] for p in memory["timeline"])
    assert memory["y_ticks"][-1] >= result.peak_bytes


def test_the_widget_measures_what_it_shows_and_redraws(course_models):
    """`w.measure()` on a widget already shown: the partition on screen is measured and the data trait
    carries the measured curve at once (no second `bw.show`), the error in percent beside it."""
    g = course_models["Transformer"].rerun("min_cut", 0.2)
    widget = bw.show(g)
    assert widget.payload["run"]["memory"]["measured"] is None
    result = widget.measure()
    measured = widget.payload["run"]["memory"]["measured"]
    assert g.measured is result and measured is not None
    assert measured["peak"]["live_bytes"] == result.peak_bytes and measured["error_percent"] == 0.0


@pytest.mark.parametrize("partitioner, budget", [("default", None), ("min_cut", 0.0)])
def test_timing_a_step_runs_the_real_graphs_to_torchs_own_gradients(partitioner, budget):
    """`time_step` (the advisor's measured recompute cost) runs forward then backward as generated code does:
    the backward graph, watched by a hook, returns the gradients eager autograd gives; and grad mode is back."""
    from bwd_widgets.core.measure import time_step

    torch.manual_seed(0)
    model, x = MLP(), torch.randn(8, 16)
    leaf = x.clone().requires_grad_()  # floating inputs need a gradient by default in bw.extract, as here
    model(leaf).sum().backward()
    expected = [p.grad.clone() for p in model.parameters()] + [leaf.grad]
    g = bw.extract(model, x, partitioner=partitioner, memory_budget=budget)
    returned: list = []
    g.partitions[0].backward.register_forward_hook(lambda module, args, out: returned.append(out))
    seconds = time_step(g.partitions, min_run_time=0.01)
    assert seconds > 0 and torch.is_grad_enabled()
    assert returned, "the backward graph never ran"
    gradients = [t for t in returned[-1] if isinstance(t, torch.Tensor)]
    assert len(gradients) == len(expected)
    for want in expected:  # AOT orders them parameters first, then inputs
        assert any(got.shape == want.shape and torch.allclose(got, want, atol=1e-6) for got in gradients)


def test_timing_a_fake_extraction_says_it_needs_real_mode():
    from bwd_widgets.core.errors import MeasureNeedsRealModeError
    from bwd_widgets.core.measure import time_step

    g = bw.extract(MLP(), torch.randn(8, 16), mode="fake")
    with pytest.raises(MeasureNeedsRealModeError, match="real-mode extraction"):
        time_step(g.partitions)
