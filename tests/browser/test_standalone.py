"""The widget bundle in Chromium with a scripted model, no kernel: every pane, the
sweep command, and that cleanup removes every listener. Runs on the reference payload
that tests/test_contract.py writes to js/test/fixtures/payload.json."""

import copy
import json
from pathlib import Path

import pytest

from shared_data import require

ROOT = Path(__file__).resolve().parents[2]

FIXTURE = ROOT / "js" / "test" / "fixtures" / "payload.json"
STATIC = ROOT / "bwd_widgets" / "static"

# Records every addEventListener the bundle makes (and whether it got an AbortSignal), model.on/off and
# experimental.invoke, then renders the bundle's default export into #app.
HARNESS = """async ({ esm, css, state, sweepPoints }) => {
  const style = document.createElement("style");
  style.textContent = css;
  document.head.appendChild(style);
  const log = (window.__log = { listeners: [], on: 0, off: 0, invokes: [] });
  const signals = (window.__signals = []);
  const add = EventTarget.prototype.addEventListener;
  EventTarget.prototype.addEventListener = function (type, listener, options) {
    const signal = options && typeof options === "object" ? options.signal : undefined;
    const fromWidget = (new Error().stack || "").includes("blob:"); // the bundle runs from a blob URL; Playwright's own listeners do not
    if (fromWidget && !(this instanceof AbortSignal)) {
      log.listeners.push({ type, signal: signal instanceof AbortSignal });
      if (signal) signals.push(signal);
    }
    return add.call(this, type, listener, options);
  };
  const handlers = (window.__handlers = {});
  const model = (window.__model = {
    get: (name) => state[name],
    set: (name, value) => {
      const changed = JSON.stringify(state[name]) !== JSON.stringify(value);
      state[name] = value;
      if (changed) (handlers["change:" + name] || []).slice().forEach((f) => f());
    },
    save_changes: () => {},
    send: () => {},
    on: (event, f) => { log.on++; (handlers[event] = handlers[event] || []).push(f); },
    off: (event, f) => { log.off++; handlers[event] = (handlers[event] || []).filter((g) => g !== f); },
    widget_manager: {},
  });
  const experimental = {
    invoke: async (name, msg, options) => {
      log.invokes.push({ name, msg, signal: options && options.signal instanceof AbortSignal });
      model.set("sweep_progress", sweepPoints.length + "/" + sweepPoints.length);
      model.set("sweep_points", sweepPoints);
      return [{ points: sweepPoints.length }, []];
    },
  };
  const module = await import(URL.createObjectURL(new Blob([esm], { type: "text/javascript" })));
  window.__cleanup = await module.default.render({ model, el: document.getElementById("app"), experimental });
  return Object.keys(module);
}"""


def _state(fixture):
    data = copy.deepcopy(fixture["data"])
    conv = next(row for row in data["saved"] if row["name"] == "convolution")
    conv.update(alias_of="primals_6", alias_kind="activation", storage_op="aten.view")  # to see the shared-memory line
    return {
        "data": data,
        "selected": "",
        "partitioner": data["partitioner"],
        "memory_budget": 1.0,
        "graph_index": 0,
        "busy": False,
        "error": "",
        "previous": {},
        "can_rerun": True,
        "comparison_rows": fixture["comparison_rows"],
        "compare_index": 0,
        "sweep_points": [],
        "sweep_index": -1,
        "sweep_progress": "",
    }


@pytest.fixture(scope="module")
def standalone(browser, artifacts):
    require(FIXTURE.exists(), f"{FIXTURE} is missing: run `.venv/bin/python -m pytest tests/test_contract.py` first")
    require((STATIC / "widget.js").exists(), "the bundle is missing: run `npm run build` first")
    fixture = json.loads(FIXTURE.read_text())
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    console = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type in ("warning", "error") else None)
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    page.set_content('<div id="app"></div>')
    exports = page.evaluate(
        HARNESS,
        {
            "esm": (STATIC / "widget.js").read_text(),
            "css": (STATIC / "widget.css").read_text(),
            "state": _state(fixture),
            "sweepPoints": fixture["sweep_points"],
        },
    )
    assert exports == ["default"], "only `export default { render }`: a bare render export is deprecated"
    page.wait_for_selector(".bwd-root[data-rendered]")
    yield page, fixture, console
    page.close()


INSIDE = """() => {
  const host = document.querySelector('.bwd-svg-host').getBoundingClientRect();
  const nodes = [...document.querySelectorAll('.bwd-svg g.node')].map((g) => g.getBoundingClientRect());
  return nodes.filter((b) => b.left >= host.left - 1 && b.right <= host.right + 1 && b.top >= host.top - 1 && b.bottom <= host.bottom + 1).length / nodes.length;
}"""


def _rendered(page) -> int:
    return int(page.locator(".bwd-root").get_attribute("data-rendered"))


def _wait_rerender(page, before):
    page.wait_for_function(f"Number(document.querySelector('.bwd-root').dataset.rendered) > {before}")


def test_draws_the_reference_and_links_the_views(standalone, artifacts):
    page, fixture, console = standalone
    assert page.locator(".bwd-svg g.node").count() == len(fixture["data"]["nodes"]) == 16
    assert page.locator(".bwd-root").get_attribute("data-tab") == "partitions", "a comparison opens on its table"
    page.click("button.bwd-tab-saved")
    page.locator('tr[data-name="convolution"]').click()
    assert "convolution" in page.locator(".bwd-svg g.node.bwd-selected text").all_text_contents()
    assert page.locator(".bwd-details-title").text_content() == "convolution"
    assert "convolution" in page.locator(".bwd-line.bwd-selected").text_content()
    details = page.locator(".bwd-details").text_content()
    assert "shares memory with primals_6 (aten.view)" in details and "why saved" in details
    adds = page.locator(".bwd-table th").all_text_contents().index("adds")
    assert page.locator('tr[data-name="convolution"] td').nth(adds).text_content() == "16.4 KB"
    page.click("button.bwd-tab-code")
    page.locator(".bwd-line", has_text="getitem_3 = native_batch_norm_backward[0]").click()
    assert page.evaluate("window.__model.get('selected')") == "getitem_3"
    assert page.locator("tr.bwd-selected").count() == 0
    page.locator('.bwd-svg g.node[data-visible-id="convolution_backward"]').click()
    assert page.locator(".bwd-details-title").text_content() == "convolution_backward"
    page.evaluate("window.__model.set('selected', 'primals_5')")  # as the kernel would
    assert page.locator("tr.bwd-selected").get_attribute("data-name") == "primals_5"
    page.screenshot(path=str(artifacts / "standalone-selection.png"), full_page=True)
    assert console == []


def test_search_collapse_expand_fit_pan_zoom(standalone, artifacts):
    page, _, _ = standalone
    page.fill(".bwd-search", "getitem")
    assert page.locator(".bwd-match-count").text_content() == "7 matches"
    assert page.locator(".bwd-svg g.node.bwd-match").count() == 7
    page.press(".bwd-search", "Enter")
    page.press(".bwd-search", "Enter")
    assert page.locator(".bwd-match-count").text_content() == "2 of 7 matches"
    second = page.evaluate("window.__model.get('selected')")
    page.press(".bwd-search", "Shift+Enter")
    assert page.locator(".bwd-match-count").text_content() == "1 of 7 matches"
    first = page.evaluate("window.__model.get('selected')")
    assert first != second and first.startswith("getitem") and second.startswith("getitem")
    # the results list under the box: every match by name, op, module and shape; a click goes there
    results = page.locator(".bwd-search-results li")
    assert page.locator(".bwd-search-results").is_visible() and results.count() == 7
    assert results.nth(0).text_content().startswith(first + " \u00b7 ")
    results.nth(4).click()
    assert page.locator(".bwd-match-count").text_content() == "5 of 7 matches"
    assert page.evaluate("window.__model.get('selected')") == results.nth(4).text_content().split(" \u00b7 ")[0]
    assert page.locator(".bwd-search-results li.bwd-current").count() == 1
    # a value found by its reason: the reference's forward inputs say they are "kept alive"
    page.fill(".bwd-search", "kept alive")
    kept = [t.split(" \u00b7 ")[0] for t in results.all_text_contents()]
    assert kept and all(name.startswith("primals_") for name in kept)
    page.screenshot(path=str(artifacts / "standalone-search-results.png"))
    page.press(".bwd-search", "Escape")
    assert not page.locator(".bwd-search-results").is_visible()
    page.fill(".bwd-search", "getitem")
    page.press(".bwd-search", "Enter")
    # the selected node is a match too, and still drawn as the selection (solid), not as a match (dashed)
    outline = ".bwd-svg g.node.bwd-selected.bwd-match > path, .bwd-svg g.node.bwd-selected.bwd-match > polygon"
    assert page.evaluate(f"getComputedStyle(document.querySelector({outline!r})).strokeDasharray") == "none"
    before = _rendered(page)
    page.click(".bwd-collapse")
    _wait_rerender(page, before)
    groups = page.locator(".bwd-svg g.node.bwd-group")
    assert groups.count() == 2 and page.locator(".bwd-svg g.node").count() < 16
    assert page.locator(".bwd-svg g.node.bwd-group.bwd-match").count() == 2, "collapsed groups holding matches"
    before = _rendered(page)
    groups.filter(has_text="conv").first.click()
    _wait_rerender(page, before)
    assert page.locator(".bwd-svg g.node.bwd-group").count() == 1
    svg = page.locator(".bwd-svg")
    page.click(".bwd-fit")
    fitted = svg.get_attribute("viewBox")
    assert page.evaluate(INSIDE) == 1, "Fit shows every node"
    box = svg.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, -300)  # the graph has no focus (Fit has): the wheel is the page's, to scroll
    page.wait_for_timeout(200)
    assert svg.get_attribute("viewBox") == fitted, "a wheel over an unfocused graph must scroll, not zoom"
    page.keyboard.down("Control")
    page.mouse.wheel(0, -300)
    page.keyboard.up("Control")
    page.wait_for_function(f"document.querySelector('.bwd-svg').getAttribute('viewBox') !== {fitted!r}")
    zoomed = svg.get_attribute("viewBox")
    assert float(zoomed.split()[2]) < float(fitted.split()[2])
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] / 2 + 40, box["y"] + box["height"] / 2 + 30)
    page.mouse.up()
    assert svg.get_attribute("viewBox").split()[2:] == zoomed.split()[2:] and svg.get_attribute("viewBox") != zoomed
    page.click(".bwd-fit")
    assert svg.get_attribute("viewBox") == fitted


def test_partitioner_selector_lists_the_registry_and_a_custom_one(standalone):
    page, fixture, _ = standalone
    registered = fixture["data"]["partitioners"]
    options = page.locator("select.bwd-partitioner option")
    assert options.all_text_contents() == [p["name"] for p in registered]
    assert [options.nth(i).get_attribute("title") for i in range(options.count())] == [
        p["description"] for p in registered
    ]
    budget_taker = next(p["name"] for p in registered if p["takes_budget"])
    page.locator("select.bwd-partitioner").select_option(budget_taker)
    assert page.evaluate("window.__model.get('partitioner')") == budget_taker
    assert page.locator("input.bwd-budget").is_enabled()
    before = _rendered(page)
    page.evaluate("""() => {
      const data = { ...window.__model.get('data'), partitioner: 'my_partition' };
      window.__model.set('partitioner', 'my_partition');
      window.__model.set('data', data);
    }""")
    _wait_rerender(page, before)
    assert options.all_text_contents() == [p["name"] for p in registered] + ["my_partition"]
    assert page.locator("select.bwd-partitioner").input_value() == "my_partition"
    assert "my_partition" in page.locator(".bwd-title").text_content()
    assert page.locator("input.bwd-budget").is_disabled()


def test_comparison_and_the_sweep_command(standalone, artifacts):
    page, fixture, _ = standalone
    page.click("button.bwd-tab-partitions")
    rows = page.locator("tr.bwd-compare-row")
    assert rows.count() == len(fixture["comparison_rows"])
    rows.last.click()
    assert page.evaluate("window.__model.get('compare_index')") == len(fixture["comparison_rows"]) - 1
    assert "bwd-current" in rows.last.get_attribute("class")
    page.click("button.bwd-sweep-button")
    page.wait_for_function("document.querySelectorAll('circle.bwd-sweep-point').length > 0")
    assert page.evaluate("window.__log.invokes") == [{"name": "_sweep", "msg": {"budgets": None}, "signal": True}]
    assert page.locator("circle.bwd-sweep-point").count() == len(fixture["sweep_points"])
    assert (
        page.locator(".bwd-sweep-progress").text_content()
        == f"{len(fixture['sweep_points'])}/{len(fixture['sweep_points'])}"
    )
    page.locator("circle.bwd-sweep-point").first.dispatch_event("click")
    assert page.evaluate("window.__model.get('sweep_index')") == 0
    page.screenshot(path=str(artifacts / "standalone-studio.png"), full_page=True)


def test_cleanup_removes_every_listener(standalone):
    page, _, console = standalone
    log = page.evaluate("window.__log")
    assert log["listeners"] and all(entry["signal"] for entry in log["listeners"]), [
        entry["type"] for entry in log["listeners"] if not entry["signal"]
    ]
    assert any(entry["type"] == "pointerup" for entry in log["listeners"])
    page.evaluate("window.__cleanup()")
    state = page.evaluate("""() => ({
      aborted: window.__signals.length === window.__log.listeners.length && window.__signals.every((s) => s.aborted),
      on: window.__log.on, off: window.__log.off,
      left: Object.values(window.__handlers).reduce((n, list) => n + list.length, 0),
    })""")
    assert state["aborted"] and state["on"] == state["off"] > 0 and state["left"] == 0, state
    assert console == []


def test_an_html_export_explains_its_empty_partitions_tab(browser, tmp_path):
    """`bw.to_html` has no kernel to sweep with: the partitions tab says what would be there and how to get it."""
    import torch

    import bwd_widgets as bw

    path = bw.to_html(bw.extract(torch.nn.Linear(4, 3), torch.randn(2, 4)), tmp_path / "linear.html")
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(path.resolve().as_uri())
        page.wait_for_selector(".bwd-root[data-rendered]")
        page.click("button.bwd-tab-partitions")
        empty = page.locator(".bwd-studio-empty")
        assert empty.is_visible() and "in a live kernel" in empty.text_content()
        assert page.locator("button.bwd-sweep-button").is_hidden()
    finally:
        page.close()


def test_edges_say_what_they_carry(standalone):
    """A saved value read is drawn unlike backward data flow (dashed, amber), an edge into a gradient
    output unlike both; the legend names them and the recomputed read (held by the contract fixture)."""
    page, _, console = standalone
    stroke = "(e) => { const s = getComputedStyle(e); return [s.stroke, s.strokeDasharray].join(' '); }"
    styles = {}
    for kind, selector in {
        "saved": ".bwd-svg g.edge.e-saved > path",
        "gradient": ".bwd-svg g.edge.e-gradient > path",
        "flow": ".bwd-svg g.edge:not(.e-saved):not(.e-gradient):not(.e-recomputed) > path",
    }.items():
        edges = page.locator(selector)
        assert edges.count() > 0, f"no {kind} edge drawn"
        styles[kind] = edges.first.evaluate(stroke)
    assert len(set(styles.values())) == 3, styles
    legend = page.locator(".bwd-legend-edge").all_text_contents()
    assert legend == ["backward data flow", "saved value read", "recomputed value read", "into a gradient"]
    assert console == []
