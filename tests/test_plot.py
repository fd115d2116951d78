"""The package's own SVG charts: well-formed, with axes in the right units, peaks that survive
thinning, escaped labels, and text reprs that state the same numbers."""

import xml.etree.ElementTree as ElementTree

import pytest
import torch

import bwd_widgets as bw
from bwd_widgets.core import units
from bwd_widgets.studio.compare import Sweep, SweepPoint
from bwd_widgets.views import plot

SVG = "{http://www.w3.org/2000/svg}"


def parse(chart: plot.Plot) -> ElementTree.Element:
    root = ElementTree.fromstring(chart.svg)
    assert root.tag == SVG + "svg"
    return root


def texts(root: ElementTree.Element) -> list[str]:
    return [t.text or "" for t in root.iter(SVG + "text")]


def points(polyline: ElementTree.Element) -> list[tuple[float, float]]:
    return [tuple(map(float, pair.split(","))) for pair in polyline.get("points").split()]


def steps(values, phases=None):
    phases = phases or ["forward"] * (len(values) // 2) + ["backward"] * (len(values) - len(values) // 2)
    return [{"phase": p, "node": f"n{i}", "live_bytes": v} for i, (p, v) in enumerate(zip(phases, values))]


def test_units_and_ticks():
    """The charts write numbers as core/units.py does (js/units.ts is its twin, held equal by the contract)."""
    assert plot.format_value is units.format_value and plot.nice_ticks is units.nice_ticks
    assert plot.format_value(1_446_656, "B") == "1.45 MB"
    assert plot.format_value(27_262_976, "FLOP") == "27.3 MFLOP"
    assert plot.format_value(0.01132, "s") == "11.3 ms"
    assert plot.format_value(0, "B") == "0 B"
    assert plot.format_value(1500, "tokens") == "1.50 ktokens" and plot.format_value(0.25, "") == "0.25"
    assert units.axis_unit(1_500_000, "B") == (1e6, "MB") and units.axis_unit(0.0113, "s") == (1e-3, "ms")
    assert [units.plain_number(v) for v in (0.5, 1.0, 1.5, 250.0, 0.000_123_4)] == [
        "0.5",
        "1",
        "1.5",
        "250",
        "0.000123",
    ]
    assert plot.nice_ticks(1_446_656) == [0.0, 500_000.0, 1_000_000.0, 1_500_000.0]
    assert plot.nice_ticks(7) == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert plot.nice_ticks(0) == [0.0, 1.0]


def test_the_facade_exposes_the_module():
    assert bw.plot is plot


def test_timeline_of_an_extraction_marks_its_peak_and_names_the_unit():
    g = bw.extract(lambda x: x.cos().cos(), torch.randn(100, 100))
    chart = plot.timeline(g)
    root = parse(chart)
    assert chart._repr_svg_() == chart.svg
    (line,) = root.iter(SVG + "polyline")
    assert len(points(line)) == len(g.memory_timeline())
    labels = texts(root)
    assert "activations + gradients alive (KB)" in labels
    saved, peak = (plot.format_value(n, "B") for n in (g.saved_activation_bytes, g.peak_activation_bytes))
    assert f"default: saved {saved}, peak {peak}" in labels
    marker = next(root.iter(SVG + "circle"))
    assert float(marker.get("cy")) == min(y for _, y in points(line))
    assert f"peak {peak} at op {g.peak.step}" in repr(chart)


def test_timeline_overlays_runs_and_thinning_keeps_the_peak():
    long = [1000 + (i % 7) for i in range(20_000)]
    long[12_345] = 9_000
    short = [500, 700, 600, 400]
    chart = plot.timeline({"long": steps(long), "short": steps(short)}, width=600)
    root = parse(chart)
    lines = list(root.iter(SVG + "polyline"))
    assert len(lines) == 2
    long_points = points(lines[0])
    assert len(long_points) <= 2 * 600  # at most two points per pixel column
    assert len(chart.svg) < 40_000
    top = min(y for _, y in long_points)  # SVG y grows downwards
    peak_marker = [c for c in root.iter(SVG + "circle")][0]
    assert float(peak_marker.get("cy")) == pytest.approx(top, abs=0.1)
    assert "long peak 9.00 KB at op 12345 of 20000" in repr(chart)
    assert "short peak 700 B at op 1 of 4" in repr(chart)


def test_pareto_fills_the_front_and_merges_equal_points():
    sweep = Sweep(
        [
            SweepPoint(0.0, 0, 300, 0, 1),
            SweepPoint(0.5, 100, 100, 0, 2),
            SweepPoint(0.6, 150, 200, 0, 2),  # dominated by budget 0.5
            SweepPoint(0.9, 400, 0, 0, 3),
            SweepPoint(1.0, 400, 0, 0, 3),
        ]
    )
    chart = plot.pareto(sweep)
    root = parse(chart)
    circles = list(root.iter(SVG + "circle"))
    assert len(circles) == 4  # 0.9 and 1.0 share one point
    assert sum(c.get("fill") == "#ffffff" for c in circles) == 1  # only the dominated point is hollow
    labels = texts(root)
    assert "budget 0.9, 1" in labels
    assert "saved activation bytes (B)" in labels and "recomputed in backward (FLOP)" in labels
    assert "budget 0.6" not in repr(chart)  # not on the front
    with pytest.raises(ValueError, match="needs the sweep's extractions"):
        plot.pareto(sweep, x="peak")


def test_pareto_against_the_peak_of_a_real_sweep():
    points = bw.sweep(bw.extract(lambda x: x.cos().cos(), torch.randn(50, 50)), budgets=[0.0, 1.0], progress=False)
    chart = plot.pareto(points, x="peak")
    assert "peak activation memory (KB)" in texts(parse(chart))


def test_bars_escape_labels_and_say_what_they_hide():
    chart = plot.bars({"<script>alert(1)</script>": 3_000_000, "b": 2_000, "c": 1_000}, top=2, title="t & u")
    assert "<script>" not in chart.svg
    root = parse(chart)
    labels = texts(root)
    assert "<script>alert(1)</script>" in labels  # shown as text, read as text
    assert "1 smaller not shown" in labels
    assert [r for r in root.iter(SVG + "rect")][1:] and "3.00 MB" in labels and "2.00 KB" in labels
    assert "c" not in labels
    assert "bytes (MB)" in labels


def test_grouped_bars_keep_order_and_show_a_legend():
    chart = plot.bars({"default": {"saved": 10, "peak": 30}, "budget 0": {"saved": 0, "peak": 30}}, sort=False)
    labels = texts(parse(chart))
    assert labels.index("default") < labels.index("budget 0")
    assert "saved" in labels and "peak" in labels
    assert repr(chart).endswith("default saved 10 B, peak 30 B; budget 0 saved 0 B, peak 30 B")


def test_lines_and_save(tmp_path):
    chart = plot.lines({"a": [(1, 10), (2, 20)]}, x_label="k", y_label="bytes", title="t")
    root = parse(chart)
    assert len(list(root.iter(SVG + "circle"))) == 2
    assert "bytes (B)" in texts(root)
    path = chart.save(tmp_path / "chart.svg")
    assert path.read_text() == chart.svg


def test_bars_of_seconds_read_in_milliseconds():
    labels = texts(parse(plot.bars({"inductor": 0.0034, "eager": 0.0113}, unit="s")))
    assert "time (ms)" in labels and "3.40 ms" in labels and "11.3 ms" in labels
