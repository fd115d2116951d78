"""The kernel-browser contract: a real payload, written as the JSON fixture the front-end tests read.

`js/test/contract.test.ts` checks that `js/types.ts` has exactly the keys listed here, and runs the
front end's pure modules on this payload. The test command runs this file before vitest.
"""

import json
import typing
from pathlib import Path

import torch

import bwd_widgets as bw
from bwd_widgets.examples import MLP
from bwd_widgets.views import payload

FIXTURE = Path(__file__).resolve().parents[1] / "js" / "test" / "fixtures" / "payload.json"
TYPES = (
    "GraphData",
    "GraphNode",
    "SavedRow",
    "Totals",
    "Diff",
    "PartitionerOption",
    "ComparisonRow",
    "SweepPoint",
    "Memory",
    "MemoryPoint",
    "MemoryPeak",
    "ModuleBytes",
)


def _keys(name: str) -> list[str]:
    return list(typing.get_type_hints(getattr(payload, name)))


def test_payload_matches_its_typed_dicts_and_is_written_for_the_front_end(conv_bn_dir):
    reference = bw.extract(bw.load_graphnet_sample(conv_bn_dir))
    data = payload.graph_payload(reference, previous=reference.rerun("min_cut", 0.0))
    torch.manual_seed(0)
    mlp = bw.extract(MLP(width=8, depth=2), torch.randn(2, 8))
    rows = payload.comparison_rows(bw.compare(mlp, partitioners=["default", 0.0]))
    points = payload.sweep_points(bw.sweep(mlp, budgets=[0.0, 1.0], progress=False))

    assert list(data) == _keys("GraphData")
    assert all(list(node) == _keys("GraphNode") for node in data["nodes"]) and len(data["nodes"]) == 16
    assert all(list(row) == _keys("SavedRow") for row in data["saved"] + data["diff"]["recomputed_rows"])
    assert list(data["totals"]) == _keys("Totals") and list(data["diff"]) == _keys("Diff")
    assert data["diff"]["against"] == "min_cut budget 0", "the diff names the partition shown before"
    assert [p["name"] for p in data["partitioners"]] == bw.partitioner_names()
    assert all(list(p) == _keys("PartitionerOption") for p in data["partitioners"])
    assert rows and all(list(r) == _keys("ComparisonRow") for r in rows)
    assert points and all(list(p) == _keys("SweepPoint") for p in points)
    memory = data["memory"]
    assert list(memory) == _keys("Memory") and list(memory["peak"]) == _keys("MemoryPeak")
    assert all(list(p) == _keys("MemoryPoint") for p in memory["timeline"])
    assert memory["by_module"] and all(list(m) == _keys("ModuleBytes") for m in memory["by_module"])

    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    fixture = {
        "data": data,
        "comparison_rows": rows,
        "sweep_points": points,
        "keys": {name: _keys(name) for name in TYPES},
    }
    FIXTURE.write_text(json.dumps(fixture, indent=1) + "\n")
    assert json.loads(FIXTURE.read_text()) == json.loads(json.dumps(fixture))
