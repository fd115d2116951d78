"""The memory pane in a real JupyterLab, in a real Chromium: the chart at the pane's full width, stacked by
the kernel's kinds and by module, zoomed by a drag or by phase, the measured curve, and every point
selecting its node, forward ones included (a model whose peak is in forward: a click on it selects)."""

import inspect
import json

import pytest

from jupyter_page import (
    SETUP,
    collect_page_errors,
    low_contrast,
    open_and_run,
    run_in_kernel,
    set_theme,
    write_notebook,
)
from models import WideInForward

# the model's one definition, tests/models.py, sent to the kernel as its source
WIDE_CELL = f"""from torch import nn

{inspect.getsource(WideInForward)}
wide = bw.extract(WideInForward(), torch.randn(8, 16))
wide"""
TRANSFORMER_CELL = "transformer = bw.extract(model, tokens)\ntransformer"
MEASURED_CELL = "measured = bw.extract(model, tokens)\nmeasured.measure()\nmeasured"
BREAK_CELL = """class TwoRegions(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        h = self.a(x).tanh()
        torch._dynamo.graph_break()
        return self.b(h).sigmoid()

regions = bw.extract(TwoRegions(), torch.randn(4, 8))
regions"""
WIDE, TRANSFORMER, MEASURED, REGIONS = range(4)
# the pane's plot box inside the chart (js/panes/memory.ts MARGIN)
LEFT, RIGHT = 62, 14


@pytest.fixture(scope="module")
def memory_page(frontend, browser, artifacts):
    root = frontend.root
    write_notebook(root / "memory_pane.ipynb", [SETUP, WIDE_CELL, TRANSFORMER_CELL, MEASURED_CELL, BREAK_CELL], {})
    # under 1,150 px the side column goes below the graph at the widget's whole width, where the old chart
    # stopped at 560 px
    page = browser.new_page(viewport={"width": 1100, "height": 1300})
    errors = []
    collect_page_errors(page, errors)
    open_and_run(page, frontend.notebook("memory_pane.ipynb"), 4, frontend.shot(artifacts, "memory-pane-timeout.png"))
    yield page, errors
    page.close()


def _widget(page, index):
    widget = page.locator(".bwd-root").nth(index)
    widget.scroll_into_view_if_needed()
    widget.locator("button.bwd-tab-memory").click()
    return widget


def _kernel_json(page, expression: str):
    return json.loads(run_in_kernel(page, f"import json\nprint(json.dumps({expression}))"))


def _click_at(page, widget, fraction: float) -> None:
    """Click the chart at `fraction` of its plot box's width, half way up."""
    box = widget.locator("svg.bwd-timeline").bounding_box()
    page.mouse.click(box["x"] + LEFT + fraction * (box["width"] - LEFT - RIGHT), box["y"] + box["height"] / 2)


def _drag(page, widget, start: float, end: float) -> None:
    box = widget.locator("svg.bwd-timeline").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + LEFT + start * (box["width"] - LEFT - RIGHT), y)
    page.mouse.down()
    page.mouse.move(box["x"] + LEFT + end * (box["width"] - LEFT - RIGHT), y, steps=5)
    page.mouse.up()


def test_the_chart_spans_the_pane_and_its_text_stays_small(memory_page, artifacts, frontend):
    page, _ = memory_page
    widget = _widget(page, TRANSFORMER)
    pane = widget.locator(".bwd-memory").bounding_box()
    chart = widget.locator("svg.bwd-timeline").bounding_box()
    assert pane["width"] <= 600 or chart["width"] > 560, "wider than the old cap, where the pane is"
    assert chart["width"] >= pane["width"] - 16 - 2, "the pane's whole width, its padding off"
    label = widget.locator("svg.bwd-timeline .bwd-axes text").first.bounding_box()
    assert 8 <= label["height"] <= 16, "drawn at its size: tick labels are not stretched with the width"
    widget.screenshot(path=frontend.shot(artifacts, "memory-pane-light.png"))


def test_a_click_on_the_forward_peak_selects_its_node(memory_page, artifacts, frontend):
    page, _ = memory_page
    widget = _widget(page, WIDE)
    peak = _kernel_json(page, "dict(node=wide.peak.node, phase=wide.peak.phase, step=wide.peak.step)")
    saved = _kernel_json(page, "[s.name for s in wide.saved_tensors]")
    assert peak["phase"] == "forward" and peak["node"] not in saved, "a forward op backward neither saves nor runs"
    expected = _kernel_json(page, f"bw.core.memory.counterpart_steps(wide.partitions)[{peak['step']}]")
    assert f"after {peak['node']}" in widget.locator(".bwd-memory-summary").text_content()
    widget.locator("circle.bwd-peak").click()
    assert expected and widget.locator(".bwd-details-title").text_content() == expected
    assert expected in widget.locator(".bwd-svg g.node.bwd-selected text").all_text_contents()
    readout = widget.locator(".bwd-memory .bwd-readout").text_content()
    assert f"after {peak['node']} (forward" in readout and f"selects {expected}" in readout
    widget.screenshot(path=frontend.shot(artifacts, "memory-pane-forward-peak.png"))


def test_every_forward_point_selects_the_node_the_kernel_names(memory_page):
    page, _ = memory_page
    widget = _widget(page, TRANSFORMER)
    expected = _kernel_json(
        page,
        "{s['node']: n for s, n in zip(transformer.memory_timeline(), "
        "bw.core.memory.counterpart_steps(transformer.partitions)) if s['phase'] == 'forward'}",
    )
    widget.locator("button.bwd-zoom[data-zoom='forward']").click()
    assert widget.locator(".bwd-zoom-range").text_content().startswith("ops 1\u2013")
    seen = set()
    for fraction in (0.0, 0.13, 0.27, 0.41, 0.55, 0.69, 0.83, 1.0):
        _click_at(page, widget, fraction)
        readout = widget.locator(".bwd-memory .bwd-readout").text_content()
        assert "(forward, op " in readout, readout
        node = readout.split("after ", 1)[1].split(" ", 1)[0]
        assert expected[node], f"{node} selects nothing"
        assert widget.locator(".bwd-details-title").text_content() == expected[node], readout
        seen.add(node)
    assert len(seen) >= 6, "the clicks went to different ops"


def test_a_drag_zooms_in_and_a_double_click_shows_the_whole_run(memory_page):
    page, _ = memory_page
    widget = _widget(page, TRANSFORMER)
    widget.locator("button.bwd-zoom[data-zoom='whole run']").click()
    steps = _kernel_json(page, "len(transformer.memory_timeline())")
    assert widget.locator(".bwd-zoom-range").text_content().startswith(f"all {steps} ops")
    line = widget.locator("path.bwd-live")
    before = line.get_attribute("d").count("L")
    ticks_before = widget.locator("svg.bwd-timeline .bwd-axes text").all_text_contents()
    _drag(page, widget, 0.25, 0.5)
    shown = widget.locator(".bwd-zoom-range").text_content()
    first, last = (int(v) for v in shown.removeprefix("ops ").split(" of ")[0].split("\u2013"))
    assert shown.endswith(f"of {steps}") and abs(first - 0.25 * steps) <= 3 and abs(last - 0.5 * steps) <= 3
    assert line.get_attribute("d").count("L") < before / 2, "only the points in the range are drawn"
    assert widget.locator("svg.bwd-timeline .bwd-axes text").all_text_contents() != ticks_before
    _click_at(page, widget, 0.5)  # a click in a zoomed chart still selects the op under it
    readout = widget.locator(".bwd-memory .bwd-readout").text_content()
    op = int(readout.split(", op ")[1].split(" ")[0])
    assert first <= op <= last
    widget.locator("svg.bwd-timeline").dblclick()
    assert widget.locator(".bwd-zoom-range").text_content().startswith(f"all {steps} ops")
    widget.locator("button.bwd-zoom[data-zoom='backward']").click()
    forward_steps = _kernel_json(page, "transformer.partitions[0].memory.forward_steps")
    assert widget.locator(".bwd-zoom-range").text_content() == f"ops {forward_steps + 1}\u2013{steps} of {steps}"
    widget.locator("button.bwd-zoom[data-zoom='whole run']").click()


def test_stacks_by_kind_and_by_module_pile_up_to_the_line(memory_page, artifacts, frontend):
    page, _ = memory_page
    widget = _widget(page, TRANSFORMER)
    stacks = widget.locator("path.bwd-stack")
    assert widget.locator("button.bwd-stack-by[data-stack='kind']").get_attribute("aria-pressed") == "true"
    assert [stacks.nth(i).get_attribute("data-key") for i in range(stacks.count())] == [
        "saved",
        "gradient",
        "temporary",
    ]
    legend = widget.locator(".bwd-memory-legend").text_content()
    assert all(word in legend for word in ("saved activations", "gradients", "temporaries"))
    live = widget.locator("path.bwd-live").get_attribute("d")
    assert stacks.last.get_attribute("d").startswith(live), "the pile's top is the total line"
    widget.locator("button.bwd-stack-by[data-stack='module']").click()
    modules = _kernel_json(page, "[b['key'] for b in bw.views.payload.memory_payload(transformer)['modules']]")
    keys = [stacks.nth(i).get_attribute("data-key") for i in range(stacks.count())]
    assert keys == [k or "" for k in modules] and any(k.startswith("blocks.1") for k in keys)
    assert stacks.last.get_attribute("d").startswith(live)
    widget.screenshot(path=frontend.shot(artifacts, "memory-pane-by-module.png"))
    entry = widget.locator("button.bwd-legend-entry", has_text="blocks.1").first
    module = entry.get_attribute("data-module")
    assert module.startswith("blocks.1")
    entry.click()  # opens that module in the graph
    widget.locator(f'button.bwd-crumb.bwd-current[data-path="{module}"]').wait_for(timeout=60_000)
    widget.locator("button.bwd-stack-by[data-stack='total']").click()
    assert stacks.count() == 0
    widget.locator("button.bwd-stack-by[data-stack='kind']").click()


def test_the_measured_curve_is_drawn_over_the_prediction(memory_page):
    page, _ = memory_page
    widget = _widget(page, MEASURED)
    assert widget.locator("path.bwd-measured").count() == 1
    assert widget.locator(".bwd-memory-measured").text_content().startswith("measured on cpu: peak ")
    assert widget.locator("path.bwd-measured").get_attribute("d").startswith("M")


def test_a_point_of_the_other_region_shows_that_region_and_selects_its_node(memory_page):
    page, _ = memory_page
    widget = _widget(page, REGIONS)
    assert _kernel_json(page, "len(regions.partitions)") == 2
    steps = _kernel_json(page, "regions.memory_timeline()")
    selects = _kernel_json(page, "bw.core.memory.counterpart_steps(regions.partitions)")
    assert widget.locator(".bwd-scope-region").text_content().startswith("compiled region 1 of 2")
    second = [i for i, s in enumerate(steps) if s["graph"] == 1 and s["phase"] == "forward" and selects[i]]
    assert second, "region 2 runs forward ops that select"
    fraction = (second[0] + 0.2) / (len(steps) - 1)
    _click_at(page, widget, fraction)
    page.wait_for_function(
        "(i) => document.querySelectorAll('.bwd-root')[i].querySelector('.bwd-scope-region')"
        ".textContent.startsWith('compiled region 2 of 2')",
        arg=REGIONS,
        timeout=60_000,
    )
    readout = widget.locator(".bwd-memory .bwd-readout").text_content()
    node = readout.split("after ", 1)[1].split(" ", 1)[0]
    index = next(i for i, s in enumerate(steps) if s["graph"] == 1 and s["node"] == node)
    page.wait_for_function(
        "([i, name]) => document.querySelectorAll('.bwd-root')[i].querySelector('.bwd-details-title')?.textContent"
        " === name",
        arg=[REGIONS, selects[index]],
        timeout=30_000,
    )


def test_the_pane_reads_in_the_dark_theme(memory_page, artifacts, frontend):
    page, errors = memory_page
    widget = _widget(page, TRANSFORMER)
    assert low_contrast(page, widget) == []
    set_theme(page, "JupyterLab Dark")
    try:
        widget = _widget(page, TRANSFORMER)
        assert low_contrast(page, widget) == []
        widget.locator(".bwd-memory-legend").scroll_into_view_if_needed()
        widget.locator(".bwd-memory").screenshot(path=frontend.shot(artifacts, "memory-pane-dark.png"))
        widget.locator("button.bwd-stack-by[data-stack='module']").click()
        assert low_contrast(page, widget) == []
        widget.locator(".bwd-memory").screenshot(path=frontend.shot(artifacts, "memory-pane-dark-by-module.png"))
        widget.locator("button.bwd-stack-by[data-stack='kind']").click()
    finally:
        set_theme(page, "JupyterLab Light")
    widget.locator(".bwd-memory-legend").scroll_into_view_if_needed()
    widget.locator(".bwd-memory").screenshot(path=frontend.shot(artifacts, "memory-pane-light-pane.png"))
    assert errors == []
