"""What a user does with the widget, checked the same way in JupyterLab and in Notebook 7: each function
takes the page and the widget's root locator (of the notebook cells jupyter_page.FOUR_GRAPHS and
COMPARISON write) and asserts what the user must see."""

SELECTED_OUTLINE = ("3px", "none")
"""The selection's outline (widget.css): 3 px, solid; every other outline state is dashed."""

SCROLLER = """(e) => { for (let p = e.parentElement; p; p = p.parentElement) {
  const style = getComputedStyle(p);
  if (/(auto|scroll)/.test(style.overflowY) && p.scrollHeight > p.clientHeight) return p.scrollTop; } return null; }"""
"""The scroll position of the nearest scrolling element above `e` (the notebook's), null when none scrolls."""


def outline(node) -> tuple[str, str]:
    shape = node.locator("> polygon, > path").first
    return tuple(shape.evaluate("e => [getComputedStyle(e).strokeWidth, getComputedStyle(e).strokeDasharray]"))


def tab(widget, name: str) -> None:
    widget.locator(f"button.bwd-tab-{name}").click()


def node_named(widget, name: str):
    return widget.locator(".bwd-svg g.node").filter(has=widget.page.locator(f'text:text-is("{name}")'))


def opacity(locator) -> float:
    return float(locator.evaluate("g => getComputedStyle(g).opacity"))


def wait_rerendered(widget, before: int) -> None:
    widget.page.wait_for_function(
        "([root, n]) => Number(root.dataset.rendered) > n", arg=[widget.element_handle(), before], timeout=60_000
    )


def check_edges_say_what_they_carry(widget) -> None:
    """conv_bn: saved values read in backward are dashed and coloured apart from backward data flow."""
    saved = widget.locator(".bwd-svg g.edge.e-saved > path").first
    plain = widget.locator(".bwd-svg g.edge:not(.e-saved):not(.e-gradient):not(.e-recomputed) > path").first
    gradient = widget.locator(".bwd-svg g.edge.e-gradient > path").first
    style = "e => [getComputedStyle(e).stroke, getComputedStyle(e).strokeDasharray]"
    seen = {
        kind: tuple(edge.evaluate(style)) for kind, edge in (("saved", saved), ("plain", plain), ("gradient", gradient))
    }
    assert seen["saved"][1] != "none" and seen["plain"][1] == "none", seen
    assert len({stroke for stroke, _ in seen.values()}) == 3, f"three colours: {seen}"
    legend = widget.locator(".bwd-legend-edge").all_text_contents()
    assert {"backward data flow", "saved value read", "into a gradient"} <= set(legend), legend


def check_lineage(widget, screenshot: str) -> None:
    """conv_bn, Model Explorer's ancestors and descendants: batch norm's input gradient (getitem_3) is
    computed from the tangent through native_batch_norm_backward and feeds convolution_backward; its
    siblings, the batch norm weight and bias gradients (getitem_4, getitem_5), are neither, so they fade."""
    widget.scroll_into_view_if_needed()
    tab(widget, "code")
    widget.locator(".bwd-line", has_text="getitem_3 = native_batch_norm_backward[0]").click()
    selected = widget.locator(".bwd-svg g.node.bwd-selected")
    selected.wait_for(timeout=10_000)
    assert "getitem_3" in selected.locator("text").all_text_contents()
    for name in ("tangents_1", "native_batch_norm_backward"):
        assert "bwd-upstream" in node_named(widget, name).get_attribute("class"), name
    for name in ("convolution_backward", "getitem_6"):
        assert "bwd-downstream" in node_named(widget, name).get_attribute("class"), name
    for name in ("getitem_4", "getitem_5"):
        assert opacity(node_named(widget, name)) < 0.5, f"{name} is not on the selection's paths"
    for name in ("getitem_3", "tangents_1", "convolution_backward"):
        assert opacity(node_named(widget, name)) == 1, name
    on_path = widget.locator(".bwd-svg g.edge.bwd-on-path")
    assert on_path.count() >= 3 and opacity(on_path.first) == 1
    assert opacity(widget.locator(".bwd-svg g.edge:not(.bwd-on-path)").first) < 0.5
    widget.screenshot(path=screenshot)
    box = widget.locator("label.bwd-lineage-toggle input")
    box.uncheck()
    assert opacity(node_named(widget, "getitem_4")) == 1, "unticked, nothing is dimmed"
    assert widget.locator(".bwd-svg g.node.bwd-upstream").count() == 0
    box.check()
    assert opacity(node_named(widget, "getitem_4")) < 0.5


def check_recomputed_row_is_drawn_selected(widget) -> None:
    """A comparison switched to its second row (budget 0): a value picked from a "now recomputed" row of
    the saved table is drawn with the selection's outline, not only as newly recomputed."""
    rows = widget.locator("tr.bwd-compare-row")
    if "bwd-current" not in (rows.nth(1).get_attribute("class") or ""):
        before = int(widget.get_attribute("data-rendered"))
        rows.nth(1).click()
        wait_rerendered(widget, before)
    tab(widget, "saved")
    widget.locator(".bwd-saved-rows[data-drawn]").wait_for(state="attached")
    picked = widget.locator("tr.bwd-row-recomputed-now").first
    name = picked.get_attribute("data-name")
    picked.click()
    node = widget.locator(".bwd-svg g.node.bwd-selected.bwd-diff-recomputed")
    node.wait_for(timeout=10_000)
    assert name in node.locator("text").all_text_contents()
    assert outline(node) == SELECTED_OUTLINE


def check_search(widget, screenshot: str) -> None:
    """The course Transformer (width 32, depth 2, tokens 2 x 16): search by module path, step with Enter
    and Shift+Enter (which must not reach the notebook: there it runs the cell), then by shape."""
    widget.scroll_into_view_if_needed()
    search, count = widget.locator("input.bwd-search"), widget.locator(".bwd-match-count")
    search.fill("blocks.1")
    total = int(count.text_content().split()[0])
    results = widget.locator(".bwd-search-results li:not(.bwd-hint)")
    assert total > 1 and results.count() > 1
    picked = []
    for step in range(2):
        search.press("Enter")
        assert count.text_content() == f"{step + 1} of {total} matches"
        widget.locator(".bwd-svg g.node.bwd-selected").wait_for(timeout=10_000)
        picked.append(widget.locator(".bwd-details-title").text_content())
        assert "blocks.1" in widget.locator(".bwd-details").text_content(), "a match is inside blocks.1"
        assert outline(widget.locator(".bwd-svg g.node.bwd-selected")) == SELECTED_OUTLINE, "selected over match"
    assert picked[0] != picked[1], "Enter goes to the next match"
    search.press("Shift+Enter")  # the previous match; the notebook's own Shift+Enter (run the cell) must not fire
    assert count.text_content() == f"1 of {total} matches"
    widget.locator(".bwd-details-title", has_text=picked[0]).wait_for(timeout=10_000)
    tab(widget, "saved")  # scrolled to the selected row, the totals line still reads over the rows
    on_top = "t => { const b = t.getBoundingClientRect(); return t.contains(document.elementFromPoint(b.left + 30, b.top + b.height / 2)); }"
    assert widget.locator(".bwd-totals").evaluate(on_top)
    search.fill("[2, 16, 32]")
    assert int(count.text_content().split()[0]) > 0
    assert "[2, 16, 32]" in results.first.text_content()
    widget.screenshot(path=screenshot)
    search.fill("")


def check_empty_partitions_tab(widget) -> None:
    """Before any sweep, in a live kernel: the partitions tab says what a sweep is and how to run one, and the
    button is there."""
    widget.scroll_into_view_if_needed()
    tab(widget, "partitions")
    empty = widget.locator(".bwd-studio-empty")
    assert empty.is_visible() and "Press Sweep budgets" in empty.text_content(), "the empty tab explains itself"
    assert "memory budgets" in empty.text_content()
    assert widget.locator("button.bwd-sweep-button").is_visible()


def check_wheel_scrolls_the_notebook(page, widget, notebook_selector: str) -> None:
    """Under the notebook's default settings: the wheel over an unfocused graph scrolls the notebook past
    it; Ctrl+wheel zooms the graph."""
    widget.scroll_into_view_if_needed()
    host = widget.locator(".bwd-svg-host")
    page.locator(notebook_selector).first.click(position={"x": 5, "y": 5})  # focus the notebook, not the graph
    before_view = widget.locator(".bwd-svg").get_attribute("viewBox")
    before_scroll = host.evaluate(SCROLLER)
    assert before_scroll is not None, "the notebook scrolls"
    box = host.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, 200)
    page.wait_for_function(f"(s) => ({SCROLLER})(s) !== {before_scroll}", arg=host.element_handle(), timeout=5_000)
    assert widget.locator(".bwd-svg").get_attribute("viewBox") == before_view, "the graph did not zoom"
    box = host.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.keyboard.down("Control")
    page.mouse.wheel(0, -200)
    page.keyboard.up("Control")
    svg = widget.locator(".bwd-svg").element_handle()
    page.wait_for_function("([s, v]) => s.getAttribute('viewBox') !== v", arg=[svg, before_view])
