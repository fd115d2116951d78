"""Driving a notebook in JupyterLab or Notebook 7 through Playwright, and the measurements the browser
tests assert: first-paint readability (geometry of the drawn graph) and text contrast."""

import json
import re
from pathlib import Path

import nbformat

# The four graphs of issue 12's table, each the last expression of its cell: an extraction displays as
# the widget. CONV_BN and MOBILENET are replaced by sample paths.
SETUP = """import torch
import bwd_widgets as bw
from bwd_widgets.examples import Transformer, big_transformer_on_meta
torch.manual_seed(0)
model = Transformer(width=32, depth=2)
tokens = torch.randint(0, 64, (2, 16))"""
FOUR_GRAPHS = {
    "conv_bn": "ref = bw.extract(bw.load_graphnet_sample(CONV_BN))\nref",
    "transformer": "transformer = bw.extract(model, tokens)\ntransformer",
    "mobilenet_v2": "mobilenet = bw.extract(bw.load_graphnet_sample(MOBILENET))\nmobilenet",
    "big_fake": """big_model = big_transformer_on_meta()
with torch.device("meta"):
    big_tokens = torch.randint(0, 32000, (8, 512))
big = bw.extract(big_model, big_tokens, mode="fake")
big""",
}
COMPARISON = 'bw.compare(model, tokens, partitioners=["default", 0.0])'
SWEEP = "bw.sweep(model, tokens, budgets=[0.0, 0.5, 1.0], progress=False)"


def write_notebook(path: Path, cells: list[str], samples: dict[str, Path]) -> None:
    notebook = nbformat.v4.new_notebook()
    for name, sample in samples.items():
        cells = [cell.replace(name, repr(str(sample))) for cell in cells]
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, path)


APP = "window.jupyterapp"
KERNEL = f"{APP}.shell.currentWidget.sessionContext.session.kernel"


def open_and_run(page, url: str, widgets: int, screenshot: Path) -> None:
    """Open the notebook, wait for its kernel, run every cell, wait until `widgets` widgets drew
    (else save a screenshot of how far it got and say so)."""
    page.goto(url)
    page.wait_for_function(
        f"{APP} && {APP}.shell.currentWidget && {APP}.shell.currentWidget.sessionContext"
        f" && {APP}.shell.currentWidget.sessionContext.session && {KERNEL}",
        timeout=90_000,
    )
    page.wait_for_function(f"{KERNEL}.connectionStatus === 'connected'", timeout=90_000)
    page.evaluate(f"{APP}.commands.execute('notebook:run-all-cells')")
    try:
        page.wait_for_function(
            f"document.querySelectorAll('.bwd-root[data-rendered]').length === {widgets}", timeout=240_000
        )
    except Exception:  # noqa: BLE001 - whatever stopped the wait: screenshot, then say what drew
        page.screenshot(path=str(screenshot), full_page=True)
        drawn = page.evaluate("document.querySelectorAll('.bwd-root[data-rendered]').length")
        outputs = page.evaluate(
            "[...document.querySelectorAll('.jp-OutputArea')].map((o) => o.innerText.slice(0, 300))"
        )
        raise AssertionError(f"{drawn} of {widgets} widgets drew; outputs: {outputs}; see {screenshot}") from None


RUN_IN_KERNEL = f"""async (code) => {{
  const future = {KERNEL}.requestExecute({{ code }});
  let text = "";
  future.onIOPub = (msg) => {{ if (msg.header.msg_type === "stream") text += msg.content.text; }};
  await future.done;
  return text;
}}"""


def run_in_kernel(page, code: str) -> str:
    return page.evaluate(f"({RUN_IN_KERNEL})({json.dumps(code)})")


def set_theme(page, theme: str) -> None:
    """Switch JupyterLab's (or Notebook 7's) theme, e.g. "JupyterLab Dark", and wait until applied."""
    page.evaluate(f"{APP}.commands.execute('apputils:change-theme', {{ theme: {json.dumps(theme)} }})")
    page.wait_for_function(f"document.body.dataset.jpThemeName === {json.dumps(theme)}", timeout=30_000)
    page.wait_for_timeout(300)  # the theme's stylesheet applies on the next frame


def save_notebook(page) -> None:
    page.evaluate(f"{APP}.commands.execute('docmanager:save')")
    page.wait_for_function(f"!{APP}.shell.currentWidget.context.model.dirty", timeout=30_000)


# Each drawn node's box against the graph pane's, and its labels' heights on screen.
FIRST_PAINT = """(root) => {
  const host = root.querySelector('.bwd-svg-host').getBoundingClientRect();
  const nodes = [...root.querySelectorAll('.bwd-svg g.node')].map((g) => g.getBoundingClientRect());
  const drawn = [...root.querySelectorAll('.bwd-svg g.node, .bwd-svg g.cluster')].map((g) => g.getBoundingClientRect());
  const labels = [...root.querySelectorAll('.bwd-svg g.node text')].map((t) => t.getBoundingClientRect().height);
  const inside = nodes.filter((b) => b.left >= host.left - 1 && b.right <= host.right + 1 && b.top >= host.top - 1 && b.bottom <= host.bottom + 1);
  const left = Math.max(host.left, Math.min(...drawn.map((b) => b.left)));
  const right = Math.min(host.right, Math.max(...drawn.map((b) => b.right)));
  const top = Math.max(host.top, Math.min(...drawn.map((b) => b.top)));
  const bottom = Math.min(host.bottom, Math.max(...drawn.map((b) => b.bottom)));
  return {
    nodes: nodes.length, pane: [Math.round(host.width), Math.round(host.height)],
    smallest_label_px: Math.min(...labels), inside: inside.length / nodes.length,
    span: Math.max((right - left) / host.width, (bottom - top) / host.height),
  };
}"""


def assert_readable(metrics: dict, name: str) -> None:
    """Issue 12's first-paint rules: labels >= 9 px, >= 90% of nodes inside, >= 60% of the pane spanned."""
    assert metrics["nodes"] >= 4, (name, metrics)
    assert metrics["smallest_label_px"] >= 9, (name, metrics)
    assert metrics["inside"] >= 0.9, (name, metrics)
    assert metrics["span"] >= 0.6, (name, metrics)


# WCAG contrast of every visible text in the widget against what is behind it: for SVG text inside a
# node or cluster, that shape's fill; otherwise the nearest opaque background. Text of disabled
# controls is exempt, as WCAG exempts it.
CONTRAST = """(root) => {
  const parse = (c) => {
    let m = /^rgba?\\(([^)]+)\\)$/.exec(c);
    if (m) { const p = m[1].split(/[ ,/]+/).filter(Boolean).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; }
    m = /^color\\(srgb ([^)]+)\\)$/.exec(c);
    if (m) { const p = m[1].split(/[ /]+/).filter(Boolean).map(Number); return [p[0] * 255, p[1] * 255, p[2] * 255, p.length > 3 ? p[3] : 1]; }
    return null;
  };
  const over = (fg, bg) => [0, 1, 2].map((i) => fg[i] * fg[3] + bg[i] * (1 - fg[3])).concat([1]);
  const lum = (c) => { const [r, g, b] = c.slice(0, 3).map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; }); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
  const background = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 0.99) break; }
    }
    let bg = [255, 255, 255, 1];
    for (const layer of layers.reverse()) bg = over(layer, bg);
    return bg;
  };
  const shapeFill = (text) => {
    const g = text.closest('g.node, g.cluster');
    const shape = g && g.querySelector(':scope > path, :scope > polygon');
    const fill = shape && parse(getComputedStyle(shape).fill);
    return fill && fill[3] > 0 ? over(fill, background(text.closest('svg').parentElement)) : background(text.closest('svg').parentElement);
  };
  const disabled = (el) => el.closest(':disabled, .bwd-disabled, [disabled]') !== null;
  const visible = (el) => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden';
  const found = [];
  const check = (el, fg, bg, text) => found.push({ text: text.slice(0, 40), ratio: Math.round(ratio(over(fg, bg), bg) * 100) / 100, cls: el.getAttribute('class') || el.tagName });
  for (const el of root.querySelectorAll('*')) {
    if (!visible(el) || disabled(el) || el instanceof SVGElement) continue;
    const own = [...el.childNodes].filter((n) => n.nodeType === 3 && n.textContent.trim()).map((n) => n.textContent).join(' ');
    const fg = parse(getComputedStyle(el).color);
    if (own && fg) check(el, fg, background(el), own);
  }
  for (const text of root.querySelectorAll('svg text')) {
    if (!visible(text) || !text.textContent.trim()) continue;
    const fg = parse(getComputedStyle(text).fill);
    if (fg) check(text, fg, shapeFill(text), text.textContent);
  }
  return found;
}"""


def low_contrast(page, root_locator, minimum: float = 4.5) -> list[dict]:
    found = root_locator.evaluate(CONTRAST)
    assert len(found) > 20, "the check saw the widget's text"
    return [f for f in found if f["ratio"] < minimum]


def notebook_url(url: str, name: str) -> str:
    """A notebook in a JupyterLab workspace of its own: the default workspace reopens every notebook an
    earlier test opened, and their widgets would count as this page's."""
    return f"{url}/lab/workspaces/{name.removesuffix('.ipynb').replace('_', '-')}/tree/{name}"


NOTEBOOK7_OWN_ERROR = "Cannot read properties of undefined (reading 'schema')"
"""The TypeError Notebook 7.6's shortcuts plugin throws on load (a notebook without any widget does too)."""


def collect_page_errors(page, errors: list) -> None:
    """Every uncaught error of the page into `errors`, but Notebook 7's own one on load (not from our bundle,
    which runs from a blob: URL)."""

    def seen(error) -> None:
        if NOTEBOOK7_OWN_ERROR in str(error) and "blob:" not in (error.stack or ""):
            return
        errors.append(str(error))

    page.on("pageerror", seen)


class Frontend:
    """JupyterLab or Notebook 7 (the conftest's `frontend` fixture runs a module in each): its server, where a
    notebook opens, and where its screenshots go (Notebook 7's with a `notebook7-` prefix)."""

    def __init__(self, name: str, url: str, root: Path) -> None:
        self.name, self.url, self.root = name, url, root

    def notebook(self, file: str) -> str:
        return notebook_url(self.url, file) if self.name == "jupyterlab" else f"{self.url}/notebooks/{file}"

    def shot(self, artifacts: Path, file: str) -> str:
        return str(artifacts / (file if self.name == "jupyterlab" else f"notebook7-{file}"))


ACTIVATION_NOTICE = re.compile(r"^Plugin \S+ (\(with \d+ dependants\) )?took [\d.]+ms to activate")
"""JupyterLab's own notice that a plugin (anywidget's, on a loaded machine) was slow to start: not a message
of the widget's."""


def from_the_widget(message) -> bool:
    """A console message of ours: our bundle runs from a blob: URL; anywidget's messages about it name anywidget."""
    if ACTIVATION_NOTICE.match(message.text):
        return False
    return message.location.get("url", "").startswith("blob:") or "anywidget" in message.text or "bwd" in message.text
