"""The kernel-browser contract: a real payload, written as the JSON fixture the front-end tests read.

`js/test/contract.test.ts` checks that `js/types.ts` has exactly the keys listed here (and js/model.ts
exactly the traits of `WidgetState`), and runs the front end's pure modules on this payload. Every
view rule that also runs in the browser (drill-down, DOT, ticks, bytes, FLOPs and seconds as text) writes
its Python answers here, on these payloads, for the TypeScript twin to match. The test command runs this file
before vitest.
"""

import base64
import json
import threading
import typing
from pathlib import Path

import torch

import bwd_widgets as bw
from bwd_widgets.core import units
from bwd_widgets.examples import MLP, Transformer
from bwd_widgets.jupyter.widget import BackwardGraphWidget
from bwd_widgets.views import grouping, payload
from bwd_widgets.views.dot import build_dot, saved_bytes_under

FIXTURE = Path(__file__).resolve().parents[1] / "js" / "test" / "fixtures" / "payload.json"
TYPES = (
    "GraphData",
    "GraphNode",
    "SavedRow",
    "PartitionTotals",
    "RunTotals",
    "Views",
    "ModuleRow",
    "Code",
    "CodeLines",
    "Diff",
    "PartitionerOption",
    "ComparisonRow",
    "SweepPoint",
    "AdvicePlanRow",
    "Memory",
    "MeasuredMemory",
    "MemoryPoint",
    "MemoryPeak",
    "ModuleBytes",
    "MemoryBand",
)


def _keys(name: str) -> list[str]:
    return list(typing.get_type_hints(getattr(payload, name, None) or getattr(grouping, name)))


def _check_keys(data, rows, points):
    assert list(data) == _keys("GraphData")
    assert all(list(node) == _keys("GraphNode") for node in data["nodes"]) and len(data["nodes"]) == 16
    assert all(list(row) == _keys("SavedRow") for row in data["saved"] + data["diff"]["recomputed_rows"])
    assert list(data["partition"]) == _keys("PartitionTotals") and list(data["run"]) == _keys("RunTotals")
    assert list(data["diff"]) == _keys("Diff") and list(data["views"]) == _keys("Views")
    assert all(list(row) == _keys("ModuleRow") for row in data["views"]["modules"])
    assert list(data["code"]) == _keys("Code") and list(data["code"]["lines"]) == _keys("CodeLines")
    assert data["diff"]["against"] == "min_cut budget 0", "the diff names the partition shown before"
    assert [p["name"] for p in data["partitioners"]] == bw.partitioner_names()
    assert all(list(p) == _keys("PartitionerOption") for p in data["partitioners"])
    assert rows and all(list(r) == _keys("ComparisonRow") for r in rows)
    assert points and all(list(p) == _keys("SweepPoint") for p in points)
    memory = data["run"]["memory"]
    assert list(memory) == _keys("Memory") and list(memory["peak"]) == _keys("MemoryPeak")
    assert all(list(p) == _keys("MemoryPoint") for p in memory["timeline"])
    assert memory["by_module"] and all(list(m) == _keys("ModuleBytes") for m in memory["by_module"])
    assert all(list(b) == _keys("MemoryBand") for b in memory["kinds"] + memory["modules"])


def _expanded_sets(data: payload.GraphData) -> list[list[str]]:
    """Open-module sets to hold both sides to: the first views, all open, a path opened part way."""
    paths = [row["path"] for row in data["views"]["modules"] if row["path"]]
    nested = [p for p in paths if "." in p]
    partial = [nested[0].partition(".")[0], nested[0]] if nested else paths[:1]
    sets = [*data["views"]["first"], paths, [], partial, paths[1::2]]
    return [list(s) for s in dict.fromkeys(tuple(s) for s in sets)]


def _graph_answers(name: str, data: payload.GraphData) -> list[dict]:
    """The Python side's visible graph, node count and DOT for each open set, by the payload's name."""
    answers = []
    for expanded in _expanded_sets(data):
        graph = grouping.visible_graph(data["nodes"], data["edges"], set(expanded))
        visible = [{"id": v.id, "cluster": v.cluster, "path": v.path, "size": v.size} for v in graph.nodes]
        answers.append(
            {
                "payload": name,
                "expanded": expanded,
                "nodes": visible,
                "edges": [list(edge) for edge in graph.edges],
                "saved_only": sorted(list(edge) for edge in graph.saved_only),
                "count": grouping.visible_count(data["views"]["modules"], set(expanded)),
                "dot": build_dot(graph, saved_bytes_under(data)),
            }
        )
    return answers


def _tick_answers(payloads: list[payload.GraphData], points: list[payload.SweepPoint]) -> list[dict]:
    largest = [0, 1, 3, 7, 0.3, 100, 2.5e-7, 1_446_656, 44.08e9, 123_456_789_012]
    for data in payloads:
        memory = data["run"]["memory"]
        largest += [memory["peak"]["live_bytes"], memory["steps"] - 1, data["partition"]["saved_activation_bytes"]]
    largest += [
        v for p in points for v in (p["peak_activation_bytes"], p["saved_activation_bytes"], p["recompute_flops"])
    ]
    return [{"max": m, "count": c, "ticks": units.nice_ticks(m, c)} for m in dict.fromkeys(largest) for c in (3, 4, 5)]


COUNTS = [0, 1, 7, 512, 999, 1000, 1005, 1015, 1050, 1150, 1250, 2048, 9_995, 9_999, 16_384, 99_949, 99_950]
COUNTS += [100_000, 123_456, 999_499, 999_500, 999_999, 1_446_656, 27_262_976, 10**9, 12_345_678_901, 44.08e9]
COUNTS += [-1, -1500, -999_999, 250e12, 999.6e12, 5e18]
SECONDS = [0, 1e-10, 5e-7, 9.9949e-4, 9.9951e-4, 0.001, 0.0034, 0.01132, 0.0162, 0.1, 0.9994, 0.9996, 1, 2.5]
SECONDS += [9.995, 12.34, 99.95, 999.5, 1234.5, -0.0162, 0.000_123_45, 0.0105, 0.0115, 0.0125]


def _unit_answers(payloads: list[payload.GraphData], rows: list[payload.ComparisonRow]) -> dict[str, list[dict]]:
    """core/units.py's text for a table of samples (round numbers, ties, unit boundaries and real figures)."""
    counts = [*COUNTS, *(row["saved_bytes"] for data in payloads for row in data["views"]["modules"])]
    flops = [*COUNTS, *(r[key] for r in rows for key in ("backward_flops", "recompute_flops"))]
    table = {"bytes": (counts, units.format_bytes), "flops": (flops, units.format_flops)}
    table["seconds"] = (SECONDS, units.format_seconds)
    return {kind: [{"value": v, "text": f(v)} for v in dict.fromkeys(values)] for kind, (values, f) in table.items()}


def test_payload_matches_its_typed_dicts_and_is_written_for_the_front_end(conv_bn_dir):
    reference = bw.extract(bw.load_graphnet_sample(conv_bn_dir))
    data = payload.graph_payload(reference, previous=reference.rerun("min_cut", 0.0))
    torch.manual_seed(0)
    mlp_model, mlp_input = MLP(width=8, depth=2), torch.randn(2, 8)
    mlp = bw.extract(mlp_model, mlp_input)
    advice = bw.advise(mlp_model, mlp_input, target=mlp.peak_activation_only_bytes - 1, every=(1,), progress=False)
    plans = payload.advice_rows(advice)
    rows = payload.comparison_rows(bw.compare(mlp, partitioners=["default", 0.0]))
    points = payload.sweep_points(bw.sweep(mlp, budgets=[0.0, 1.0], progress=False))
    transformer = bw.extract(Transformer(width=8, depth=2, heads=2), torch.randint(0, 64, (2, 4)))
    deep = payload.graph_payload(transformer)
    recomputing = payload.graph_payload(transformer.rerun(0.5))
    assert any(n["recomputed"] for n in recomputing["nodes"]), "min-cut at 0.5 recomputes: recomputed reads drawn"
    _check_keys(data, rows, points)
    shown, ahead = BackwardGraphWidget(mlp), []
    shown.send = lambda content, buffers=None: ahead.append(
        [content, [base64.b64encode(b).decode() for b in buffers or []]]
    )
    shown.run_sweep([0.0, 0.45])
    for thread in threading.enumerate():
        if thread.name == "bwd-widgets-prepare":
            thread.join()
    assert len(ahead) == 2, "each swept payload is sent ahead"
    assert plans and all(list(p) == _keys("AdvicePlanRow") for p in plans)
    assert [p["label"] for p in plans] == [p.label for p in advice.plans + advice.offload + advice.regions]

    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    fixture = {
        "data": data,
        "deep": deep,
        "recomputing": recomputing,
        "comparison_rows": rows,
        "sweep_points": points,
        "advice_rows": plans,
        "ahead": ahead,
        "keys": {name: _keys(name) for name in TYPES},
        "traits": _keys("WidgetState"),
        "wire": base64.b64encode(payload.encode_payload(data, payload.encode_without_diff(data))).decode(),
        "python": {
            "graphs": _graph_answers("data", data)
            + _graph_answers("deep", deep)
            + _graph_answers("recomputing", recomputing),
            "ticks": _tick_answers([data, deep], points),
            "units": _unit_answers([data, deep], rows),
        },
    }
    FIXTURE.write_text(json.dumps(fixture, indent=1) + "\n")
    assert json.loads(FIXTURE.read_text()) == json.loads(json.dumps(fixture))


def test_the_widget_syncs_exactly_the_traits_widget_state_declares():
    hints = typing.get_type_hints(payload.WidgetState)
    synced = BackwardGraphWidget.class_traits(sync=True)
    ours = {name for name in synced if not name.startswith("_") and name not in ("layout", "tabbable", "tooltip")}
    assert ours == set(hints), "add a trait to WidgetState and to the widget (js/model.ts is checked by vitest)"
    assert set(payload.STATE_DEFAULTS) == set(hints) - {"data"}
    for name, default in payload.STATE_DEFAULTS.items():
        assert synced[name].default() == default, name
