"""Issue 22, item 11 and the export, in a real JupyterLab in Chromium at 1,000 px: the details pane shows
every line of every saved value and op whole (nothing clipped, words kept whole), its inputs and consumers
select that node everywhere, the colour-by-bytes legend gives each swatch its bytes, and the SVG and PNG
buttons download the view on screen (an SVG that keeps its colours outside the page, a PNG of the view's
size)."""

import base64
import contextlib
import re
import struct
import xml.etree.ElementTree as ET

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from jupyter_page import COMPARISON, SETUP, collect_page_errors, low_contrast, open_and_run, set_theme, write_notebook

# A ResNet-like CNN written in the notebook, so its source lines (long ones too) are the user's own.
RESNET = """from torch import nn

class Residual(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels)
        self.conv2, self.bn2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels)

    def forward(self, x):
        return torch.relu(self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))) + x)  # the residual: a long line of nested calls

class ResNetLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layer1 = nn.Sequential(Residual(16), Residual(16))
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.layer1(self.stem(x)).mean(dim=(2, 3)))

resnet = bw.extract(ResNetLike(), torch.randn(2, 3, 16, 16))
resnet"""
TRANSFORMER = "transformer = bw.extract(model, tokens)\ntransformer"
WIDGETS = {"transformer": 0, "resnet_like": 1, "compared": 2}

# The details pane of `root` for the node selected now: what is cut off, hidden or broken mid-word.
DETAILS = """(root) => {
  const pane = root.querySelector('.bwd-details');
  const side = root.querySelector('.bwd-side').getBoundingClientRect();
  const box = pane.getBoundingClientRect();
  const style = getComputedStyle(pane);
  const cut = [...pane.querySelectorAll('dt, dd, dd *, .bwd-details-title')]
    .filter((e) => e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0).map((e) => e.textContent.slice(0, 60));
  // a name or number (shorter than a line) that the browser still broke over two lines
  const broken = [];
  for (const dd of pane.querySelectorAll('dd')) {
    const walker = document.createTreeWalker(dd, NodeFilter.SHOW_TEXT);
    for (let text = walker.nextNode(); text; text = walker.nextNode()) {
      for (const match of text.textContent.matchAll(/\\w+/g)) {
        const range = document.createRange();
        range.setStart(text, match.index);
        range.setEnd(text, match.index + match[0].length);
        const lines = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
        const width = [...range.getClientRects()].reduce((sum, r) => sum + r.width, 0);
        if (lines.size > 1 && width < dd.clientWidth - 2) broken.push(match[0]);
      }
    }
  }
  const rows = {};
  const dts = [...pane.querySelectorAll('dt')];
  for (const dt of dts) rows[dt.textContent] = dt.nextElementSibling.textContent;
  return {
    title: pane.querySelector('.bwd-details-title')?.textContent ?? '',
    rows, cut, broken,
    overflow_x: pane.scrollWidth - pane.clientWidth,
    taller_than_shown: pane.scrollHeight > pane.clientHeight + 1,
    scrolls: ['auto', 'scroll'].includes(style.overflowY),
    height: Math.round(box.height),
    inside_side: box.top >= side.top - 1 && box.bottom <= side.bottom + 1 && box.left >= side.left - 1 && box.right <= side.right + 1,
    text: pane.textContent,
  };
}"""

# Click every row of the saved table in turn (each selects its node; the details pane redraws at once)
# and measure the details pane for each.
EVERY_SAVED = f"""(root) => {{
  const measure = {DETAILS};
  return [...root.querySelectorAll('tr.bwd-row[data-name]')].map((row) => {{
    row.click();
    return {{ name: row.dataset.name, why: row.title, ...measure(root) }};
  }});
}}"""


@pytest.fixture(scope="module")
def details_page(frontend, browser, artifacts):
    root = frontend.root
    write_notebook(root / "details_export.ipynb", [SETUP, TRANSFORMER, RESNET, COMPARISON], {})
    page = browser.new_page(viewport={"width": 1000, "height": 1100}, accept_downloads=True)
    errors = []
    collect_page_errors(page, errors)
    open_and_run(
        page, frontend.notebook("details_export.ipynb"), len(WIDGETS), frontend.shot(artifacts, "details-timeout.png")
    )
    yield page, errors
    page.close()


def _widget(page, name):
    return page.locator(".bwd-root").nth(WIDGETS[name])


def _assert_whole(measured: dict, what: str) -> None:
    assert measured["cut"] == [], f"{what}: text cut off sideways: {measured['cut']}"
    assert measured["overflow_x"] <= 1, f"{what}: the pane scrolls sideways by {measured['overflow_x']} px"
    assert measured["broken"] == [], f"{what}: words broken mid-word: {measured['broken']}"
    assert measured["inside_side"], f"{what}: the pane reaches out of its column"
    if measured["taller_than_shown"]:
        assert measured["scrolls"], f"{what}: lines below the pane's edge cannot be reached"
        assert measured["height"] > 150, f"{what}: cramped at {measured['height']} px while the text needs more"


@pytest.mark.parametrize("name", ["transformer", "resnet_like"])
def test_details_pane_shows_every_saved_value_whole(details_page, artifacts, name, frontend):
    page, errors = details_page
    widget = _widget(page, name)
    widget.scroll_into_view_if_needed()
    widget.locator("button.bwd-tab-saved").click()
    every = widget.evaluate(EVERY_SAVED)
    assert len(every) >= 8, f"{name}: only {len(every)} saved rows"
    for measured in every:
        assert measured["title"] == measured["name"]
        _assert_whole(measured, f"{name} {measured['name']}")
        # the reason in full, as the saved table's row says it (it adds the alias first)
        why = measured["rows"].get("why saved", "")
        assert why and measured["why"].endswith(why), (measured["name"], why, measured["why"])
        shape = measured["rows"]["shape"]
        assert re.fullmatch(r"\[[\d, ]*\] \w+", shape), shape
    longest = max(every, key=lambda m: len(m["text"]))
    widget.locator(f'tr.bwd-row[data-name="{longest["name"]}"]').click()
    widget.locator(".bwd-details").screenshot(path=frontend.shot(artifacts, f"details-{name}-longest.png"))
    assert not errors


def test_details_pane_shows_source_lines_whole_and_readable(details_page, artifacts, frontend):
    page, _ = details_page
    widget = _widget(page, "resnet_like")
    widget.scroll_into_view_if_needed()
    search = widget.locator("input.bwd-search")
    search.fill("convolution_1")
    search.press("Enter")
    measured = widget.evaluate(f"({DETAILS})")
    assert measured["title"] == "convolution_1", measured["title"]
    source = measured["rows"]["source"]
    assert re.search(r"\.py:\d+", source), source
    code = widget.locator(".bwd-source-code").text_content()
    # the residual's long line, whole: from its first call to its comment's last word
    assert code.startswith("return torch.relu(self.bn2(") and code.endswith("a long line of nested calls"), code
    _assert_whole(measured, "source of convolution_1")
    widget.locator(".bwd-details").screenshot(path=frontend.shot(artifacts, "details-resnet-like-source.png"))


def test_inputs_and_consumers_select_that_node_everywhere(details_page, artifacts):
    page, _ = details_page
    widget = _widget(page, "resnet_like")
    widget.scroll_into_view_if_needed()
    widget.locator("button.bwd-tab-saved").click()
    widget.locator("tr.bwd-row[data-name]").first.click()
    start = widget.locator(".bwd-details-title").text_content()
    consumer = widget.locator(".bwd-details dt:text-is('consumers') + dd .bwd-node-link").first
    target = consumer.text_content()
    consumer.click()
    assert widget.locator(".bwd-details-title").text_content() == target != start
    widget.locator(f'.bwd-svg g.node.bwd-selected[data-visible-id="{target}"]').wait_for(timeout=10_000)
    widget.locator("button.bwd-tab-code").click()
    assert f"{target} = " in widget.locator(".bwd-line.bwd-selected").text_content()
    # and back through the args: the saved value it read is one of its inputs
    back = widget.locator(f'.bwd-details dd .bwd-node-link[data-node="{start}"]')
    assert back.count() == 1, widget.locator(".bwd-details").text_content()
    back.click()
    assert widget.locator(".bwd-details-title").text_content() == start
    widget.locator(f'.bwd-svg g.node.bwd-selected[data-visible-id="{start}"]').wait_for(timeout=10_000)
    assert widget.locator("tr.bwd-selected").get_attribute("data-name") == start


BYTES_SHOWN = """(root) => {
  const scale = (name) => [...root.querySelectorAll(`.bwd-scale-${name} .bwd-legend-item`)].map((s) => s.textContent);
  const nodes = [...root.querySelectorAll('.bwd-svg g.node')].map((g) => ({
    group: g.classList.contains('bwd-group'),
    level: Number([...g.classList].find((c) => c.startsWith('bwd-heat-'))?.slice(9) ?? -1),
    title: g.querySelector('title')?.textContent ?? '',
  }));
  return { tensors: scale('tensors'), modules: scale('modules'), nodes, legend: root.querySelector('.bwd-legend').textContent };
}"""
UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


def _bytes(text: str) -> float:
    number, unit = re.search(r"([\d.]+) (B|KB|MB|GB|TB)", text).groups()
    return float(number) * UNITS[unit]


def test_bytes_legend_gives_each_swatch_its_bytes(details_page, artifacts, frontend):
    page, _ = details_page
    for name in ("transformer", "resnet_like"):
        widget = _widget(page, name)
        widget.scroll_into_view_if_needed()
        widget.locator("select.bwd-colour").select_option("bytes")
        shown = widget.evaluate(BYTES_SHOWN)
        assert len(shown["tensors"]) == 5 and all(s.startswith("\u2264 ") for s in shown["tensors"]), shown["legend"]
        bounds = [_bytes(s) for s in shown["tensors"]]
        assert bounds == sorted(bounds) and bounds[-1] > 0
        tensors = [(n["level"], _bytes(n["title"].split("(")[-1])) for n in shown["nodes"] if not n["group"]]
        tensors = [(level, size) for level, size in tensors if size > 0]
        assert tensors, name
        # the largest tensor drawn is the top of the scale, and every tensor sits under its swatch's bytes
        assert max(size for _, size in tensors) == pytest.approx(bounds[-1], rel=0.01)
        for level, size in tensors:
            assert size <= bounds[level - 1] * 1.01, (name, level, size, bounds)
            assert level == 1 or size > bounds[level - 2] * 0.99, (name, level, size, bounds)
        groups = [n for n in shown["nodes"] if n["group"] and n["level"] > 0]
        assert bool(groups) == bool(shown["modules"]), "a scale for modules exactly when modules are heated"
        widget.screenshot(path=frontend.shot(artifacts, f"details-bytes-legend-{name}.png"))
        set_theme(page, "JupyterLab Dark")
        try:
            assert low_contrast(page, widget) == [], "the swatches' values stay readable"
            widget.screenshot(path=frontend.shot(artifacts, f"details-bytes-legend-{name}-dark.png"))
        finally:
            set_theme(page, "JupyterLab Light")
        assert low_contrast(page, widget) == []
        widget.locator("select.bwd-colour").select_option("kind")


# Fill of a drawn saved node and of a label, resolved to rgb the way a canvas draws them.
COLOURS = """(root) => {
  const canvas = document.createElement('canvas'); canvas.width = canvas.height = 1;
  const context = canvas.getContext('2d', { willReadFrequently: true });
  const rgb = (value) => { context.clearRect(0, 0, 1, 1); context.fillStyle = value; context.fillRect(0, 0, 1, 1);
    const [r, g, b] = context.getImageData(0, 0, 1, 1).data; return `rgb(${r}, ${g}, ${b})`; };
  const saved = root.querySelector('.bwd-svg g.node.bwd-node-saved > path, .bwd-svg g.node.bwd-node-saved > polygon');
  const label = root.querySelector('.bwd-svg g.node text');
  return { saved: rgb(getComputedStyle(saved).fill), label: rgb(getComputedStyle(label).fill) };
}"""


def _download(page, button) -> bytes:
    with page.expect_download(timeout=30_000) as info:
        button.click()
    return open(info.value.path(), "rb").read()


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_export_downloads_the_view_as_svg_and_png(details_page, browser, artifacts, theme, frontend):
    page, errors = details_page
    set_theme(page, theme)
    widget = _widget(page, "transformer")
    widget.scroll_into_view_if_needed()
    host = widget.locator(".bwd-svg-host")
    drawn = widget.locator(".bwd-svg g.node text").all_text_contents()
    on_page = widget.evaluate(COLOURS)
    size = host.evaluate("(h) => [h.clientWidth, h.clientHeight, window.devicePixelRatio]")
    svg_bytes = _download(page, widget.locator("button.bwd-export-svg"))
    tree = ET.fromstring(svg_bytes)
    ns = {"svg": "http://www.w3.org/2000/svg"}
    nodes = [g for g in tree.iter("{http://www.w3.org/2000/svg}g") if "node" in (g.get("class") or "").split()]
    assert sorted(t.text or "" for g in nodes for t in g.findall("svg:text", ns)) == sorted(drawn)
    assert (tree.get("width"), tree.get("height")) == (str(size[0]), str(size[1]))
    assert tree.get("viewBox") == widget.locator(".bwd-svg").get_attribute("viewBox"), "the view on screen"
    # outside the page, with none of the widget's CSS: the same colours
    alone = browser.new_page(viewport={"width": size[0], "height": size[1]})
    try:
        alone.set_content(svg_bytes.decode())
        assert alone.locator("link, style").count() == 0
        outside = alone.locator("svg").evaluate(COLOURS)
        alone.screenshot(path=frontend.shot(artifacts, f"export-svg-{theme.split()[-1].lower()}.png"))
    finally:
        alone.close()
    assert outside == on_page, "colours lost outside the page"
    png = _download(page, widget.locator("button.bwd-export-png"))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (round(size[0] * size[2]), round(size[1] * size[2]))
    # the picture holds the drawing: many pixels differ from the background
    checker = browser.new_page()
    try:
        checker.set_content(f'<img src="data:image/png;base64,{base64.b64encode(png).decode()}">')
        inked = checker.evaluate(
            """async () => { const img = document.querySelector('img'); await img.decode();
            const c = document.createElement('canvas'); c.width = img.naturalWidth; c.height = img.naturalHeight;
            const x = c.getContext('2d'); x.drawImage(img, 0, 0); const d = x.getImageData(0, 0, c.width, c.height).data;
            let differ = 0; for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - d[0]) + Math.abs(d[i + 1] - d[1]) + Math.abs(d[i + 2] - d[2]) > 60) differ++;
            return differ / (c.width * c.height); }"""
        )
    finally:
        checker.close()
    assert inked > 0.01, f"only {inked:.3%} of the PNG is drawn"
    widget.screenshot(path=frontend.shot(artifacts, f"details-export-{theme.split()[-1].lower()}.png"))
    set_theme(page, "JupyterLab Light")
    assert not errors


# Where a node is drawn in each of the two views, against its own pane, and each view's scale.
BOTH_VIEWS = """([root, id]) => root.querySelectorAll('.bwd-graph').length === 2 && [...root.querySelectorAll('.bwd-graph')].map((graph) => {
  const host = graph.querySelector('.bwd-svg-host');
  const pane = host.getBoundingClientRect();
  const node = graph.querySelector(`.bwd-svg g.node[data-visible-id="${id}"]`);
  const box = node?.getBoundingClientRect();
  const view = graph.querySelector('.bwd-svg').getAttribute('viewBox').split(' ').map(Number);
  return {
    caption: graph.querySelector('.bwd-compare-caption')?.textContent ?? '',
    selected: graph.querySelector('.bwd-svg g.node.bwd-selected')?.dataset.visibleId ?? '',
    at: box ? [box.left + box.width / 2 - pane.left, box.top + box.height / 2 - pane.top] : null,
    scale: Math.min(host.clientWidth / view[2], host.clientHeight / view[3]),
  };
})"""


def test_two_partitions_side_by_side_follow_each_other(details_page, artifacts, frontend):
    page, errors = details_page
    widget = _widget(page, "compared")
    widget.scroll_into_view_if_needed()
    toggle = widget.locator("button.bwd-side-by-side")
    assert toggle.is_hidden(), "nothing to compare with before a switch"
    before = int(widget.get_attribute("data-rendered"))
    widget.locator("tr.bwd-compare-row").nth(1).click()
    page.wait_for_function(
        f"Number(document.querySelectorAll('.bwd-root')[{WIDGETS['compared']}].dataset.rendered) > {before}",
        timeout=60_000,
    )
    toggle.click()
    widget.locator(".bwd-graph-before[data-rendered]").wait_for(timeout=30_000)
    # a selection in the graph of now selects in the graph of before too
    search = widget.locator(".bwd-graph:not(.bwd-graph-before) input.bwd-search")
    search.fill("tangents_1")
    search.press("Enter")
    page.wait_for_function(
        f"({BOTH_VIEWS})([document.querySelectorAll('.bwd-root')[{WIDGETS['compared']}], 'tangents_1']).every((v) => v.selected === 'tangents_1')",
        timeout=30_000,
    )
    views = widget.evaluate(f"(root) => ({BOTH_VIEWS})([root, 'tangents_1'])")
    assert [v["caption"] for v in views] == ["now: min_cut (budget 0)", "before: default"], views
    # a node clicked in the graph of before selects it everywhere
    widget.locator(".bwd-graph-before button.bwd-fit").click()
    picked = widget.evaluate(
        "(root) => { const pane = root.querySelector('.bwd-graph-before .bwd-svg-host').getBoundingClientRect();"
        " return [...root.querySelectorAll('.bwd-graph-before .bwd-svg g.node:not(.bwd-group):not(.bwd-selected)')].find((g) => {"
        " const b = g.getBoundingClientRect(), x = b.left + b.width / 2, y = b.top + b.height / 2;"
        " return x > pane.left + 5 && x < pane.right - 5 && y > pane.top + 5 && y < pane.bottom - 5; })?.dataset.visibleId; }"
    )
    assert picked, "a node of the graph of before is on screen"
    widget.locator(f'.bwd-graph-before .bwd-svg g.node[data-visible-id="{picked}"]').click()
    assert widget.locator(".bwd-details-title").text_content() == picked
    # a zoom in one moves the other to the same scale, the selection at the same place in its pane
    search.fill("tangents_1")
    search.press("Enter")
    host = widget.locator(".bwd-graph:not(.bwd-graph-before) .bwd-svg-host")
    host.click(position={"x": 5, "y": 5})  # focus, so the wheel zooms
    box = host.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 3, box["y"] + box["height"] / 3)
    scale_before = widget.evaluate(f"(root) => ({BOTH_VIEWS})([root, 'tangents_1'])")[0]["scale"]
    for _ in range(3):
        page.mouse.wheel(0, -240)
    zoomed_alike = (  # the wheel's zoom, then the other pane following it (a frame or more later)
        f"([root, before]) => {{ const views = ({BOTH_VIEWS})([root, 'tangents_1']); if (!views) return false;"
        " const [now, then] = views;"
        " return now.scale > before * 1.1 && Math.abs(then.scale - now.scale) <= 0.02 * now.scale; }"
    )
    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_function(zoomed_alike, arg=[widget.element_handle(), scale_before], timeout=10_000)
    views = widget.evaluate(f"(root) => ({BOTH_VIEWS})([root, 'tangents_1'])")
    now, then = views
    assert now["scale"] > scale_before * 1.1, "the wheel zoomed the graph of now"
    assert then["scale"] == pytest.approx(now["scale"], rel=0.02), views
    assert then["at"] and now["at"] and all(abs(a - b) < 3 for a, b in zip(then["at"], now["at"])), views
    widget.screenshot(path=frontend.shot(artifacts, "compare-side-by-side.png"))
    toggle.click()
    assert widget.locator(".bwd-graph").count() == 1
    assert not errors
