"""The widget in Notebook 7 (the `notebook` package), in a real Chromium: the same first-paint rules,
results displayed as the widget, the static fallback in the saved file, light and dark themes, and what a
user does in the graph, checked as in JupyterLab (widget_checks.py): edges, lineage, search, the recomputed
row's selection, the empty partitions tab, the wheel."""

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
    open_and_run,
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
)

NAMES = list(FOUR_GRAPHS)
CONV_BN, TRANSFORMER, MOBILENET = 0, 1, 2
COMPARED, SWEPT = 4, 5


@pytest.fixture(scope="module")
def notebook_page(notebook7, browser, artifacts, conv_bn_dir, samples_dir):
    url, root = notebook7
    cells = [SETUP, *FOUR_GRAPHS.values(), COMPARISON, SWEEP]
    samples = {"CONV_BN": conv_bn_dir, "MOBILENET": samples_dir / "torchvision" / "mobilenet_v2"}
    write_notebook(root / "widget_test.ipynb", cells, samples)
    page = browser.new_page(viewport={"width": 1500, "height": 1300})
    errors, console = [], []
    # Notebook 7.6 itself throws one TypeError from its shortcuts plugin on load (a plain notebook does
    # too); errors from the widget run in its blob: bundle
    page.on("pageerror", lambda error: errors.append(error.stack) if "blob:" in (error.stack or "") else None)
    page.on("console", lambda message: console.append(message) if message.type in ("warning", "error") else None)
    open_and_run(page, f"{url}/notebooks/widget_test.ipynb", 6, artifacts / "notebook7-timeout.png")
    first_paint = [page.locator(".bwd-root").nth(i).evaluate(FIRST_PAINT) for i in range(len(NAMES))]
    yield page, errors, console, first_paint, root
    page.close()


def test_first_paint_is_readable_on_the_four_graphs(notebook_page, artifacts):
    page, errors, _, first_paint, _ = notebook_page
    for index, (name, metrics) in enumerate(zip(NAMES, first_paint)):
        widget = page.locator(".bwd-root").nth(index)
        widget.scroll_into_view_if_needed()
        widget.screenshot(path=str(artifacts / f"notebook7-light-{name}.png"))
        assert_readable(metrics, name)
    (artifacts / "notebook7-first-paint.json").write_text(json.dumps(dict(zip(NAMES, first_paint)), indent=1))
    assert not errors


def test_results_display_as_the_widget(notebook_page):
    page, *_ = notebook_page
    cells = page.locator(".jp-Notebook .jp-CodeCell")
    for cell in range(1, 7):  # four extractions, a comparison, a sweep: each its cell's last expression
        assert cells.nth(cell).locator(".bwd-root .bwd-svg g.node").count() > 0, cell
    assert page.locator(".bwd-root").nth(COMPARED).locator("tr.bwd-compare-row").count() == 2
    assert page.locator(".bwd-root").nth(SWEPT).locator("circle.bwd-sweep-point").count() == 3


def test_saved_notebook_keeps_a_small_static_picture(notebook_page):
    page, *_, root = notebook_page
    save_notebook(page)
    notebook = json.loads((root / "widget_test.ipynb").read_text())
    pictures = [
        "".join(o["data"]["image/svg+xml"])
        for c in notebook["cells"]
        for o in c["outputs"]
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    assert len(pictures) == 6
    assert all(p.startswith("<svg") and len(p.encode()) < 100_000 and "peak activation memory" in p for p in pictures)


def _widget(page, index):
    return page.locator(".bwd-root").nth(index)


def test_edges_say_what_they_carry(notebook_page):
    page, errors, *_ = notebook_page
    check_edges_say_what_they_carry(_widget(page, CONV_BN))
    assert not errors


def test_the_selections_lineage_stays_and_the_rest_is_dimmed(notebook_page, artifacts):
    page, errors, *_ = notebook_page
    check_lineage(_widget(page, CONV_BN), str(artifacts / "notebook7-lineage.png"))
    assert not errors


def test_search_by_module_and_shape_steps_through_matches_and_keeps_the_selection_outlined(notebook_page, artifacts):
    page, errors, *_ = notebook_page
    check_search(_widget(page, TRANSFORMER), str(artifacts / "notebook7-search.png"))
    assert not errors


def test_a_now_recomputed_row_is_drawn_selected(notebook_page):
    page, errors, *_ = notebook_page
    widget = _widget(page, COMPARED)
    widget.scroll_into_view_if_needed()
    check_recomputed_row_is_drawn_selected(widget)
    assert not errors


def test_the_partitions_tab_explains_itself_before_any_sweep(notebook_page):
    page, errors, *_ = notebook_page
    check_empty_partitions_tab(_widget(page, MOBILENET))
    assert not errors


def test_the_wheel_over_an_unfocused_graph_scrolls_the_notebook(notebook_page):
    page, errors, *_ = notebook_page
    check_wheel_scrolls_the_notebook(page, _widget(page, CONV_BN), ".jp-Notebook")
    assert not errors


def test_dark_theme(notebook_page, artifacts):
    page, *_ = notebook_page
    set_theme(page, "JupyterLab Dark")
    try:
        problems = []
        for index, name in enumerate(NAMES):
            widget = page.locator(".bwd-root").nth(index)
            widget.scroll_into_view_if_needed()
            widget.screenshot(path=str(artifacts / f"notebook7-dark-{name}.png"))
            problems += low_contrast(page, widget)
        assert problems == []
    finally:
        set_theme(page, "JupyterLab Light")


def test_no_console_warnings_or_errors_from_the_widget(notebook_page):
    page, errors, console, *_ = notebook_page
    assert not errors
    assert [f"{m.type}: {m.text}" for m in console if from_the_widget(m)] == []
