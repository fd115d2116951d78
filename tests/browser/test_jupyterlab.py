"""The widget in a real JupyterLab, in a real Chromium: first paint, memory picture, links between the
panes, partitioners, rich display, the static fallback, the dark theme."""

import json

import pytest

from jupyter_page import (
    COMPARISON,
    FIRST_PAINT,
    FOUR_GRAPHS,
    SETUP,
    SWEEP,
    assert_readable,
    from_the_widget,
    low_contrast,
    notebook_url,
    open_and_run,
    run_in_kernel,
    save_notebook,
    set_theme,
    write_notebook,
)
from widget_checks import (
    check_edges_say_what_they_carry,
    check_empty_partitions_tab,
    check_lineage,
    check_recomputed_row_is_drawn_selected,
    check_search,
    check_wheel_scrolls_the_notebook,
    tab,
)

EVIL = "<img src=x onerror=alert(1)>"
EVIL_CELL = f"""from torch import nn

class Evil(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module({EVIL!r}, nn.Linear(4, 4))

    def forward(self, x):
        return getattr(self, {EVIL!r})(x).relu()

evil = bw.show(Evil(), torch.randn(2, 4))
evil"""
# widgets, in page order: the four graphs, the escaping one, a comparison and a sweep (both displayed
# as a cell's last expression, as the four extractions are)
CONV_BN, TRANSFORMER, MOBILENET, BIG, ESCAPING, COMPARED, SWEPT = range(7)
NAMES = list(FOUR_GRAPHS)

REFERENCE_NODES = {
    "primals_1",
    "primals_2",
    "primals_4",
    "primals_5",
    "primals_6",
    "convolution",
    "getitem_1",
    "getitem_2",
    "tangents_1",
    "native_batch_norm_backward",
    "getitem_3",
    "getitem_4",
    "getitem_5",
    "convolution_backward",
    "getitem_6",
    "getitem_7",
}


@pytest.fixture(scope="module")
def notebook_page(lab, browser, artifacts, conv_bn_dir, samples_dir):
    url, root = lab
    cells = [SETUP, *FOUR_GRAPHS.values(), EVIL_CELL, COMPARISON, SWEEP]
    samples = {"CONV_BN": conv_bn_dir, "MOBILENET": samples_dir / "torchvision" / "mobilenet_v2"}
    write_notebook(root / "widget_test.ipynb", cells, samples)
    page = browser.new_page(viewport={"width": 1500, "height": 1300})  # a whole widget fits in a screenshot
    dialogs, errors, console = [], [], []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: console.append(message) if message.type in ("warning", "error") else None)
    open_and_run(page, notebook_url(url, "widget_test.ipynb"), 7, artifacts / "jupyterlab-timeout.png")
    # first paint, before anything is clicked
    first_paint = [_widget(page, i).evaluate(FIRST_PAINT) for i in range(len(NAMES))]
    yield page, dialogs, errors, console, first_paint, root
    page.close()


def _widget(page, index):
    return page.locator(".bwd-root").nth(index)


def _rendered(widget) -> int:
    return int(widget.get_attribute("data-rendered"))


def _wait_rerender(page, index, before):
    page.wait_for_function(
        f"Number(document.querySelectorAll('.bwd-root')[{index}].dataset.rendered) > {before}", timeout=60_000
    )


def test_first_paint_is_readable_on_the_four_graphs(notebook_page, artifacts):
    page, _, errors, _, first_paint, _ = notebook_page
    for index, (name, metrics) in enumerate(zip(NAMES, first_paint)):
        widget = _widget(page, index)
        widget.scroll_into_view_if_needed()
        widget.screenshot(path=str(artifacts / f"jupyterlab-light-{name}.png"))
        assert_readable(metrics, name)
    (artifacts / "jupyterlab-first-paint.json").write_text(json.dumps(dict(zip(NAMES, first_paint)), indent=1))
    assert first_paint[CONV_BN]["nodes"] == 16, "the small reference opens whole"
    assert not errors


def test_results_display_as_the_widget(notebook_page):
    page, *_ = notebook_page
    cells = page.locator(".jp-Notebook .jp-CodeCell")
    for cell in (1, 2, 3, 4, 6, 7):  # extractions, a comparison, a sweep: each its cell's last expression
        assert cells.nth(cell).locator(".bwd-root .bwd-svg g.node").count() > 0, cell
        assert "BackwardExtraction(" not in cells.nth(cell).locator(".jp-OutputArea").inner_text()
    compared, swept = _widget(page, COMPARED), _widget(page, SWEPT)
    assert compared.locator("tr.bwd-compare-row").count() == 2
    assert swept.locator("circle.bwd-sweep-point").count() == 3


def test_reference_graph_has_the_expected_nodes(notebook_page, artifacts):
    page, _, errors, *_ = notebook_page
    reference = _widget(page, CONV_BN)
    reference.scroll_into_view_if_needed()
    texts = reference.locator(".bwd-svg g.node text").all_text_contents()
    assert REFERENCE_NODES <= set(texts)
    assert reference.locator(".bwd-svg g.node").count() == len(REFERENCE_NODES)
    assert reference.locator(".bwd-node-saved").count() == 8
    assert reference.locator(".bwd-node-tangent").count() == 1
    assert reference.locator(".bwd-node-gradient").count() == 4
    assert "\u2207 conv.weight" in texts
    assert reference.locator(".bwd-saved-count").text_content() == "8"
    assert not errors


def test_clicking_a_saved_row_selects_the_node_everywhere(notebook_page, artifacts):
    page, *_ = notebook_page
    reference = _widget(page, CONV_BN)
    reference.locator('tr[data-name="convolution"]').click()
    selected = reference.locator(".bwd-svg g.node.bwd-selected")
    selected.wait_for(timeout=10_000)
    assert "convolution" in selected.locator("text").all_text_contents()
    assert "convolution" in reference.locator(".bwd-line.bwd-selected").text_content()
    assert reference.locator("tr.bwd-selected").get_attribute("data-name") == "convolution"
    assert reference.locator(".bwd-details-title").text_content() == "convolution"
    # a code line selects its node
    tab(reference, "code")
    reference.locator(".bwd-line", has_text="getitem_3 = native_batch_norm_backward[0]").click()
    assert reference.locator(".bwd-details-title").text_content() == "getitem_3"
    reference.screenshot(path=str(artifacts / "jupyterlab-selection.png"))


def test_the_selections_lineage_stays_and_the_rest_is_dimmed(notebook_page, artifacts):
    page, *_ = notebook_page
    check_lineage(_widget(page, CONV_BN), str(artifacts / "jupyterlab-lineage.png"))


def test_edges_say_what_they_carry(notebook_page):
    page, *_ = notebook_page
    check_edges_say_what_they_carry(_widget(page, CONV_BN))


def test_python_sets_the_selection_and_reads_it(notebook_page):
    page, *_ = notebook_page
    widget = _widget(page, ESCAPING)
    widget.locator(".bwd-svg g.node.bwd-node-tangent").click()
    assert run_in_kernel(page, "print(evil.selected)").strip() == "tangents_1"
    run_in_kernel(page, "evil.selected = 'threshold_backward'")
    page.wait_for_function(
        f"document.querySelectorAll('.bwd-root')[{ESCAPING}].querySelector('.bwd-details-title')?.textContent === 'threshold_backward'",
        timeout=10_000,
    )


def test_code_pane_reads_as_code(notebook_page):
    page, *_ = notebook_page
    widget = _widget(page, MOBILENET)
    widget.scroll_into_view_if_needed()
    tab(widget, "code")
    code = widget.locator("pre.bwd-code")
    lines = code.locator(".bwd-line")
    texts = lines.all_text_contents()
    assert not any(t.rstrip().endswith("= None") for t in texts), "clearing statements hidden"
    assert not any(a.strip("\u200b ") == b.strip("\u200b ") == "" for a, b in zip(texts, texts[1:])), "no blank runs"
    numbers = [int(n) for gutter in widget.locator(".bwd-gutter").all_text_contents() for n in gutter.split("\n")]
    assert len(numbers) == len(texts), "a number beside every line"
    assert numbers == sorted(numbers) and numbers[0] == 1 and numbers[-1] > len(numbers)
    assert code.evaluate("(e) => e.scrollWidth > e.clientWidth"), "long lines scroll sideways, not cut or wrapped"
    # a node selected elsewhere (here, by the graph's search) brings its line into view inside the code
    assert code.evaluate("(e) => e.scrollTop") == 0
    widget.locator("input.bwd-search").fill("convolution_backward_51")
    widget.locator("input.bwd-search").press("Enter")
    selected = widget.locator(".bwd-line.bwd-selected")
    assert "convolution_backward_51 = " in selected.text_content()
    assert selected.evaluate(
        "(line) => { const c = line.closest('pre').getBoundingClientRect(), r = line.getBoundingClientRect();"
        " return r.top >= c.top && r.bottom <= c.bottom; }"
    ), "the selected line is kept in view"
    widget.locator("input.bwd-exact-toggle").check()
    exact = lines.all_text_contents()
    assert any(t.rstrip().endswith("= None") for t in exact) and lines.count() > len(texts)
    widget.locator("input.bwd-exact-toggle").uncheck()


def test_saved_table_calls_parameter_views_so_and_counts_them_0_bytes(notebook_page):
    page, *_ = notebook_page
    widget = _widget(page, TRANSFORMER)
    widget.scroll_into_view_if_needed()
    tab(widget, "saved")
    headers = widget.locator(".bwd-table th").all_text_contents()
    kind, adds = headers.index("kind"), headers.index("adds")
    views = widget.locator("tr.bwd-row", has_text="parameter view")
    assert views.count() > 0
    for i in range(views.count()):
        cells = views.nth(i).locator("td")
        assert cells.nth(kind).text_content() == "parameter view" and cells.nth(adds).text_content() == "0 B"
    assert "(0 B added)" in widget.locator(".bwd-totals").text_content()


def test_clicking_the_peak_selects_its_node(notebook_page, artifacts):
    page, *_ = notebook_page
    widget = _widget(page, TRANSFORMER)
    tab(widget, "memory")
    summary = widget.locator(".bwd-memory-summary").text_content()
    peak_node = summary.split(" after ")[1].split()[0]
    widget.locator("circle.bwd-peak").click()
    assert widget.locator(".bwd-details-title").text_content() == peak_node
    assert peak_node in widget.locator(".bwd-svg g.node.bwd-selected text").all_text_contents()
    assert peak_node in widget.locator(".bwd-memory .bwd-readout").text_content()
    assert widget.locator(".bwd-peak-bytes").text_content() in summary
    widget.screenshot(path=str(artifacts / "jupyterlab-memory.png"))


def test_clicking_a_module_bar_opens_that_module(notebook_page, artifacts):
    page, *_ = notebook_page
    widget = _widget(page, BIG)
    widget.scroll_into_view_if_needed()
    tab(widget, "memory")
    bars = widget.locator("button.bwd-bar")
    assert bars.first.get_attribute("data-module") == "blocks", "the blocks hold most saved bytes"
    assert widget.locator(".bwd-svg g.bwd-group", has_text="blocks \u25b8").count() == 1
    before = _rendered(widget)
    bars.first.click()
    _wait_rerender(page, BIG, before)
    assert widget.locator(".bwd-svg g.cluster text", has_text="blocks").count() >= 1
    assert widget.locator(".bwd-svg g.bwd-group", has_text="blocks \u25b8").count() == 0
    assert widget.locator(".bwd-svg g.bwd-group", has_text="blocks.31 \u25b8").count() == 1
    assert widget.locator("button.bwd-crumb").all_text_contents()[-1] == "blocks"
    assert widget.locator("button.bwd-bar").first.get_attribute("data-module").startswith("blocks.")
    widget.screenshot(path=str(artifacts / "jupyterlab-module-opened.png"))


def test_keys_move_open_and_go_up(notebook_page):
    page, *_ = notebook_page
    widget = _widget(page, BIG)
    host = widget.locator(".bwd-svg-host")
    host.focus()
    before = _rendered(widget)
    page.keyboard.press("Escape")  # closes blocks, opened by the bar above
    _wait_rerender(page, BIG, before)
    assert widget.locator(".bwd-svg g.bwd-group", has_text="blocks \u25b8").count() == 1
    assert widget.locator(".bwd-svg g.node.bwd-cursor text").first.text_content().startswith("blocks")
    before = _rendered(widget)
    page.keyboard.press("Enter")  # opens it again
    _wait_rerender(page, BIG, before)
    assert widget.locator(".bwd-svg g.bwd-group", has_text="blocks \u25b8").count() == 0
    cursor = widget.locator(".bwd-svg g.node.bwd-cursor")
    page.keyboard.press("ArrowDown")  # onto the drawing
    first = cursor.get_attribute("data-visible-id")
    page.keyboard.press("ArrowUp")  # the blocks are a chain: one of up and down leads on
    if cursor.get_attribute("data-visible-id") == first:
        page.keyboard.press("ArrowDown")
    second = cursor.get_attribute("data-visible-id")
    assert first and second and first != second
    assert {first, second} <= {f"group:blocks.{i}" for i in range(32)}, "neighbours along the chain of blocks"
    assert page.evaluate("document.activeElement.classList.contains('bwd-svg-host')"), "the notebook kept its hands off"


def test_colour_by_bytes(notebook_page):
    page, *_ = notebook_page
    widget = _widget(page, BIG)
    widget.locator("select.bwd-colour").select_option("bytes")
    assert widget.locator(".bwd-scale-tensors .bwd-legend-item.bwd-heat-5").count() == 1
    hottest = widget.locator(".bwd-svg g.node.bwd-heat-5 > polygon").first.evaluate("(e) => getComputedStyle(e).fill")
    coolest = widget.locator(".bwd-svg g.node.bwd-heat-0 > polygon, .bwd-svg g.node.bwd-heat-0 > path")
    assert coolest.count() == 0 or coolest.first.evaluate("(e) => getComputedStyle(e).fill") != hottest
    widget.locator("select.bwd-colour").select_option("kind")


def test_min_cut_with_low_budget_changes_the_saved_count(notebook_page, artifacts):
    page, *_ = notebook_page
    widget = _widget(page, TRANSFORMER)
    widget.scroll_into_view_if_needed()
    before = widget.locator(".bwd-saved-count").text_content()
    rendered = _rendered(widget)
    widget.locator("select.bwd-partitioner").select_option("min_cut")
    _wait_rerender(page, TRANSFORMER, rendered)
    tab(widget, "saved")
    widget.locator(".bwd-saved-rows[data-drawn]").wait_for(state="attached")
    heads = widget.locator(".bwd-table-head th").all_text_contents()
    column = heads.index("torch says")
    said = widget.locator("tr.bwd-row:not(.bwd-row-recomputed-now) td").evaluate_all(
        f"(cells) => cells.filter((c, i) => i % {len(heads)} === {column}).map((c) => c.textContent)"
    )
    # torch.compile's partition: parameters are free to save (they live as long as the model), so no weight view is
    # kept for its parameter's sake; the activations carry torch's bans
    assert {"cannot recompute: materialized in backward", "cannot recompute: not in recomputable allowlist"} <= set(
        said
    ), said
    rendered = _rendered(widget)
    widget.locator("input.bwd-budget").evaluate("(e) => { e.value = '0'; e.dispatchEvent(new Event('change')); }")
    _wait_rerender(page, TRANSFORMER, rendered)
    assert "min_cut (budget 0)" in widget.locator(".bwd-title").text_content()
    assert float(widget.locator(".bwd-torch-ratio").text_content()) <= 0.001, "torch's ratio, at or under the budget"
    assert widget.locator(".bwd-saved-count").text_content() != before
    assert "(" in widget.locator(".bwd-stats").text_content(), "the change from the previous partition is shown"
    widget.screenshot(path=str(artifacts / "jupyterlab-min-cut.png"))


def test_module_names_render_as_text(notebook_page, artifacts):
    page, dialogs, errors, *_ = notebook_page
    widget = _widget(page, ESCAPING)
    widget.scroll_into_view_if_needed()
    # the module name is drawn (as text) and listed: had it become markup, its img would be in the DOM by now
    widget.locator(".bwd-svg text", has_text=EVIL).first.wait_for(timeout=10_000)
    widget.locator(".bwd-table td", has_text=EVIL).first.wait_for(timeout=10_000)
    assert page.locator(".bwd-root img").count() == 0
    assert page.locator("img[src='x']").count() == 0
    assert dialogs == [] and not errors
    widget.screenshot(path=str(artifacts / "jupyterlab-escaping.png"))


def test_comparison_rows_switch_partitions_and_show_the_diff(notebook_page, artifacts):
    page, _, errors, *_ = notebook_page
    widget = _widget(page, COMPARED)
    widget.scroll_into_view_if_needed()
    assert widget.get_attribute("data-tab") == "partitions", "a comparison opens on its table"
    rows = widget.locator("tr.bwd-compare-row")
    assert "default" in rows.nth(0).text_content() and "budget 0" in rows.nth(1).text_content()
    headers = widget.locator(".bwd-compare th").all_text_contents()
    assert "peak" in headers and "torch's ratio" in headers
    assert rows.nth(0).locator("td").nth(headers.index("torch's ratio")).text_content() == "\u2014", (
        "default: no min-cut"
    )
    before = _rendered(widget)
    rows.nth(1).click()
    _wait_rerender(page, COMPARED, before)
    assert "min_cut (budget 0)" in widget.locator(".bwd-title").text_content()
    diff = widget.locator(".bwd-diff-line").text_content()
    assert "against default" in diff and "now recomputed" in diff
    recomputed = int(diff.split(": ")[1].split()[0])
    widget.locator(".bwd-saved-rows[data-drawn]").wait_for(state="attached")  # its rows come a block per task
    assert recomputed > 0 and widget.locator("tr.bwd-row-recomputed-now").count() == recomputed
    assert "bwd-current" in rows.nth(1).get_attribute("class")
    widget.screenshot(path=str(artifacts / "jupyterlab-compare.png"))
    check_recomputed_row_is_drawn_selected(widget)
    assert not errors


def test_search_by_module_and_shape_steps_through_matches_and_keeps_the_selection_outlined(notebook_page, artifacts):
    page, _, errors, *_ = notebook_page
    check_search(_widget(page, TRANSFORMER), str(artifacts / "jupyterlab-search.png"))
    assert not errors


def test_sweep_chart_has_axes_values_and_pareto_points(notebook_page, artifacts):
    page, *_ = notebook_page
    widget = _widget(page, SWEPT)
    widget.scroll_into_view_if_needed()
    ticks = widget.locator(".bwd-sweep-svg .bwd-axes text").all_text_contents()
    title = widget.locator(".bwd-sweep-svg .bwd-y-title").bounding_box()
    labels = widget.locator(".bwd-sweep-svg .bwd-axes text:not(.bwd-axis-title)")
    for i in range(labels.count()):
        box = labels.nth(i).bounding_box()
        overlaps_x = box["x"] < title["x"] + title["width"] and title["x"] < box["x"] + box["width"]
        overlaps_y = box["y"] < title["y"] + title["height"] and title["y"] < box["y"] + box["height"]
        assert not (overlaps_x and overlaps_y), f"the y title overlaps the tick label {labels.nth(i).text_content()!r}"
    assert any(t.endswith("B") for t in ticks) and any(t.endswith("FLOP") for t in ticks), ticks
    points = widget.locator("circle.bwd-sweep-point")
    points.nth(1).hover()
    assert "budget 0.5" in widget.locator(".bwd-studio .bwd-readout").text_content()
    pareto = widget.locator("tr.bwd-pareto-row")
    assert pareto.count() == widget.locator("circle.bwd-pareto").count() >= 2
    # saved is not peak: every point's peak is drawn beside it, on the same bytes axis, never left of it
    peaks = widget.locator("path.bwd-sweep-peak")
    assert peaks.count() == points.count()
    for i in range(points.count()):
        peak_x = float(peaks.nth(i).get_attribute("d").split()[1])
        assert peak_x >= float(points.nth(i).get_attribute("cx")) - 0.1
        assert "peak" in peaks.nth(i).locator("title").text_content()
    before = _rendered(widget)
    points.nth(0).dispatch_event("click")
    _wait_rerender(page, SWEPT, before)
    assert "budget 0" in widget.locator(".bwd-title").text_content()
    assert widget.locator(".bwd-activation-bytes").text_content() == "0 B"
    widget.screenshot(path=str(artifacts / "jupyterlab-sweep.png"))


def test_sweep_button_fills_the_chart_and_overlays_the_budgets(notebook_page, artifacts):
    page, *_ = notebook_page
    widget = _widget(page, TRANSFORMER)
    widget.scroll_into_view_if_needed()
    check_empty_partitions_tab(widget)
    widget.locator("button.bwd-sweep-button").click()
    page.wait_for_function(
        f"document.querySelectorAll('.bwd-root')[{TRANSFORMER}].querySelectorAll('circle.bwd-sweep-point').length === 11",
        timeout=120_000,
    )
    assert widget.locator(".bwd-sweep-progress").text_content() == "11/11"
    assert not widget.locator(".bwd-studio-empty").is_visible()
    rows = widget.locator("tr.bwd-pareto-row").all()
    assert rows and "torch's ratio" in widget.locator("table.bwd-pareto th").all_text_contents()
    for row in rows:  # torch's own ratio for each Pareto plan, at or under the budget asked for
        budget, ratio = (float(t) for t in row.locator("td").all_text_contents()[:2])
        assert 0 <= ratio <= budget + 1e-9
    beaten = widget.locator("path.bwd-sweep-peak.bwd-peak-beaten")
    order = widget.locator(".bwd-peak-order")
    titles = [t.text_content() for t in beaten.locator("title").all()]
    assert all("peaks lower" in title for title in titles)
    assert (order.count() == 1) == bool(titles), "the flags and the sentence under the chart agree"
    tab(widget, "memory")
    assert widget.locator("path.bwd-overlay").count() == 11
    widget.screenshot(path=str(artifacts / "jupyterlab-sweep-overlay.png"))


def test_saved_notebook_keeps_a_small_static_picture(notebook_page):
    page, *_, root = notebook_page
    save_notebook(page)
    notebook = json.loads((root / "widget_test.ipynb").read_text())
    widget_cells = [
        c for c in notebook["cells"] if "application/vnd.jupyter.widget-view+json" in json.dumps(c["outputs"])
    ]
    assert len(widget_cells) == 7
    for cell in widget_cells:
        bundles = [
            o["data"] for o in cell["outputs"] if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
        ]
        svg = "".join(bundles[0]["image/svg+xml"])
        assert svg.startswith("<svg") and len(svg.encode()) < 100_000
        assert "peak activation memory" in svg and "saved" in svg
        assert "<script" not in svg and "onerror" not in svg.replace("onerror=alert(1)&gt;", "")
    outputs = widget_cells[0]["outputs"]
    shown = next(o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {}))
    first = "".join(shown["data"]["text/plain"])
    assert first.startswith("BackwardExtraction(model='conv_bn'"), "the text stays the extraction's repr"
    # `ref = bw.extract(...)` left its progress output empty: nothing of it is saved
    assert [
        o["data"]
        for o in outputs
        if o is not shown and "image/svg+xml" not in o.get("data", {}) and "text/html" not in o.get("data", {})
    ] == [{}]


def test_dark_theme_keeps_text_readable(notebook_page, artifacts):
    page, *_ = notebook_page
    set_theme(page, "JupyterLab Dark")
    try:
        for index, name in enumerate(NAMES):
            widget = _widget(page, index)
            widget.scroll_into_view_if_needed()
            widget.screenshot(path=str(artifacts / f"jupyterlab-dark-{name}.png"))
        widget = _widget(page, TRANSFORMER)
        tab(widget, "saved")
        widget.locator("tr.bwd-row").first.click()  # a selection, so selected rows and lines are checked too
        problems = []
        for pane in ("saved", "memory", "code", "partitions"):
            tab(widget, pane)
            problems += low_contrast(page, widget)
        for index in (COMPARED, SWEPT, BIG):
            problems += low_contrast(page, _widget(page, index))
        assert problems == []
        widget.screenshot(path=str(artifacts / "jupyterlab-dark-memory.png"))
        set_theme(page, "JupyterLab Dark High Contrast")
        assert low_contrast(page, widget) == [] and low_contrast(page, _widget(page, CONV_BN)) == []
        _widget(page, CONV_BN).screenshot(path=str(artifacts / "jupyterlab-high-contrast-conv_bn.png"))
    finally:
        set_theme(page, "JupyterLab Light")


def test_light_theme_keeps_text_readable(notebook_page):
    page, *_ = notebook_page
    widget = _widget(page, TRANSFORMER)
    problems = []
    for pane in ("saved", "memory", "code", "partitions"):
        tab(widget, pane)
        problems += low_contrast(page, widget)
    assert problems == []


def test_no_console_warnings_or_errors_from_the_widget(notebook_page):
    page, _, errors, console, *_ = notebook_page
    assert not errors
    assert [f"{m.type}: {m.text}" for m in console if from_the_widget(m)] == []


def test_the_wheel_over_an_unfocused_graph_scrolls_the_notebook(notebook_page):
    """Under JupyterLab's default settings: the notebook scrolls past the graph; Ctrl+wheel zooms it."""
    page, _, errors, _, _, _ = notebook_page
    check_wheel_scrolls_the_notebook(page, _widget(page, 0), ".jp-Notebook")
    assert not errors
