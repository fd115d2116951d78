"""The memory timeline stacked by kind and by module, and the backward node each of its points selects."""

import pytest
import torch

import bwd_widgets as bw
from bwd_widgets.core import memory
from bwd_widgets.examples import MLP, Transformer
from bwd_widgets.views import memory_payload as payload

from models import GraphBreak, WideInForward


@pytest.fixture(scope="module")
def extractions():
    torch.manual_seed(0)
    transformer = bw.extract(Transformer(width=32, depth=2), torch.randint(0, 64, (4, 32)))
    return {
        "mlp": bw.extract(MLP(width=16, depth=3), torch.randn(8, 16)),
        "transformer": transformer,
        "transformer min-cut 0": transformer.rerun("min_cut", 0.0),
        "graph break": bw.extract(GraphBreak(), torch.randn(4, 4)),
        "wide": bw.extract(WideInForward(), torch.randn(8, 16)),
    }


@pytest.mark.parametrize("name", ["mlp", "transformer", "transformer min-cut 0", "graph break", "wide"])
def test_kinds_and_modules_add_up_to_the_timeline(extractions, name):
    g = extractions[name]
    live = [s["live_bytes"] for s in g.memory_timeline()]
    kinds = memory.live_by_kind(g.partitions)
    assert list(kinds) == list(memory.KINDS)
    assert [sum(k[i] for k in kinds.values()) for i in range(len(live))] == live
    data = payload.memory_payload(g)
    for bands in (data["kinds"], data["modules"]):
        assert all(len(b["bytes"]) == len(data["timeline"]) for b in bands)
        assert [sum(b["bytes"][i] for b in bands) for i in range(len(data["timeline"]))] == [
            p["live_bytes"] for p in data["timeline"]
        ]
    assert len(data["selects"]) == len(data["timeline"])


def test_saved_activations_are_what_forward_hands_to_backward(extractions):
    g = extractions["transformer"]
    (partition,) = g.partitions
    kinds = memory.live_by_kind(g.partitions)
    last_forward = partition.memory.forward_steps - 1
    assert kinds["saved"][last_forward] == partition.memory.saved_bytes > 0
    assert kinds["gradient"][last_forward] == 0, "no gradient before backward"
    assert kinds["saved"][-1] == 0, "backward's last op has read every saved value"
    gradients = partition.backward.graph.output_node().all_input_nodes
    assert kinds["gradient"][-1] == sum(n.meta["val"].untyped_storage().nbytes() for n in gradients)


def test_module_bands_name_the_blocks(extractions):
    data = payload.memory_payload(extractions["transformer"])
    keys = [b["key"] or "" for b in data["modules"]]
    assert data["module_depth"] >= 2
    assert any(k.startswith("blocks.0") for k in keys) and any(k.startswith("blocks.1") for k in keys)
    assert len(data["modules"]) <= payload.MODULE_BANDS + 1


def test_a_backward_point_selects_its_op_and_a_saved_forward_op_its_saved_value(extractions):
    g = extractions["transformer"]
    (partition,) = g.partitions
    steps, selects = g.memory_timeline(), memory.counterpart_steps(g.partitions)
    saved = {s.name for s in g.saved_tensors}
    backward_nodes = {n.name for n in partition.backward.graph.nodes}
    for step, node in zip(steps, selects):
        if step["phase"] == "backward":
            assert node == step["node"]
        elif step["node"] in saved:
            assert node == step["node"]
        assert node == "" or node in backward_nodes
    assert sum(1 for s, n in zip(steps, selects) if s["phase"] == "forward" and n) == partition.memory.forward_steps


def test_the_forward_peak_selects_the_backward_op_torch_built_for_it(extractions):
    g = extractions["wide"]
    (partition,) = g.partitions
    assert g.peak.phase == "forward" and g.peak.node not in {s.name for s in g.saved_tensors}
    forward_op = next(n for n in partition.forward.graph.nodes if n.name == g.peak.node)
    chosen = memory.counterpart_steps(g.partitions)[g.peak.step]
    backward_op = next(n for n in partition.backward.graph.nodes if n.name == chosen)
    assert backward_op.meta["seq_nr"] == forward_op.meta["seq_nr"], "autograd's own link from op to its backward"
    data = payload.memory_payload(g)
    shown = [p["step"] for p in data["timeline"]].index(g.peak.step)
    assert data["selects"][shown] == chosen
