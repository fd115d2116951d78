"""The widget in a real JupyterLab, in a real Chromium."""

import nbformat
import pytest

EVIL = "<img src=x onerror=alert(1)>"

CELLS = [
    """import torch
import bwd_widgets as bw
from bwd_widgets.examples import Transformer
sample = bw.load_graphnet_sample(CONV_BN)
ref = bw.show(bw.extract(sample))
ref""",
    """torch.manual_seed(0)
model = Transformer(width=32, depth=2)
tokens = torch.randint(0, 64, (2, 16))
transformer = bw.show(model, tokens)
transformer""",
    f"""from torch import nn

class Evil(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module({EVIL!r}, nn.Linear(4, 4))

    def forward(self, x):
        return getattr(self, {EVIL!r})(x).relu()

evil = bw.show(Evil(), torch.randn(2, 4))
evil""",
    """comparison = bw.show(bw.compare(model, tokens, partitioners=["default", 0.0]))
comparison""",
    """budgets = bw.show(bw.sweep(model, tokens, budgets=[0.0, 0.5, 1.0], progress=False))
budgets""",
]

RUN_IN_KERNEL = """async (code) => {
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  const future = kernel.requestExecute({ code });
  let text = "";
  future.onIOPub = (msg) => { if (msg.header.msg_type === "stream") text += msg.content.text; };
  await future.done;
  return text;
}"""

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
def notebook_page(lab, browser, artifacts, conv_bn_dir):
    url, root = lab
    notebook = nbformat.v4.new_notebook()
    cells = [CELLS[0].replace("CONV_BN", repr(str(conv_bn_dir)))] + CELLS[1:]
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, root / "widget_test.ipynb")
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    dialogs, errors, console = [], [], []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: console.append(message) if message.type in ("warning", "error") else None)
    page.goto(f"{url}/lab/tree/widget_test.ipynb")
    page.wait_for_function(
        "window.jupyterapp && window.jupyterapp.shell.currentWidget && window.jupyterapp.shell.currentWidget.sessionContext && window.jupyterapp.shell.currentWidget.sessionContext.session && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel",
        timeout=90_000,
    )
    page.wait_for_function(
        "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.connectionStatus === 'connected'",
        timeout=90_000,
    )
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function("document.querySelectorAll('.bwd-root[data-rendered]').length === 5", timeout=180_000)
    page.screenshot(path=str(artifacts / "jupyterlab-widgets.png"), full_page=True)
    yield page, dialogs, errors, console
    page.close()


def _widget(page, index):
    return page.locator(".bwd-root").nth(index)


def test_reference_graph_has_the_expected_nodes(notebook_page, artifacts):
    page, _, errors, _ = notebook_page
    reference = _widget(page, 0)
    reference.scroll_into_view_if_needed()
    texts = reference.locator(".bwd-svg g.node text").all_text_contents()
    assert REFERENCE_NODES <= set(texts)
    assert reference.locator(".bwd-svg g.node").count() == len(REFERENCE_NODES)
    assert reference.locator(".bwd-node-saved").count() == 8
    assert reference.locator(".bwd-node-tangent").count() == 1
    assert reference.locator(".bwd-node-gradient").count() == 4
    assert "\u2207 conv.weight" in texts
    assert reference.locator(".bwd-saved-count").text_content() == "8"
    reference.screenshot(path=str(artifacts / "jupyterlab-reference.png"))
    assert not errors


def test_clicking_a_saved_row_selects_the_node_everywhere(notebook_page, artifacts):
    page, _, _, _ = notebook_page
    reference = _widget(page, 0)
    reference.locator('tr[data-name="convolution"]').click()
    selected = reference.locator(".bwd-svg g.node.bwd-selected")
    selected.wait_for(timeout=10_000)
    assert "convolution" in selected.locator("text").all_text_contents()
    line = reference.locator(".bwd-line.bwd-selected")
    assert "convolution" in line.text_content()
    assert reference.locator("tr.bwd-selected").get_attribute("data-name") == "convolution"
    assert reference.locator(".bwd-details-title").text_content() == "convolution"
    assert page.evaluate(f"({RUN_IN_KERNEL})('print(ref.selected)')").strip() == "convolution"
    # and back: Python sets the selection, the views follow
    page.evaluate(f"({RUN_IN_KERNEL})('ref.selected = \"convolution_backward\"')")
    page.wait_for_function(
        "document.querySelector('.bwd-root .bwd-details-title')?.textContent === 'convolution_backward'", timeout=10_000
    )
    assert "convolution_backward" in reference.locator(".bwd-line.bwd-selected").text_content()
    # a code line selects its node
    reference.locator(".bwd-line", has_text="getitem_3 = native_batch_norm_backward[0]").click()
    assert reference.locator(".bwd-details-title").text_content() == "getitem_3"
    reference.screenshot(path=str(artifacts / "jupyterlab-selection.png"))


def test_min_cut_with_low_budget_changes_the_saved_count(notebook_page, artifacts):
    page, _, _, _ = notebook_page
    widget = _widget(page, 1)
    widget.scroll_into_view_if_needed()
    before = widget.locator(".bwd-saved-count").text_content()
    rendered = _rendered(widget)
    widget.locator("select.bwd-partitioner").select_option("min_cut")
    _wait_rerender(page, 1, rendered)
    rendered = _rendered(widget)
    widget.locator("input.bwd-budget").evaluate("(e) => { e.value = '0'; e.dispatchEvent(new Event('change')); }")
    _wait_rerender(page, 1, rendered)
    assert "min_cut (budget 0)" in widget.locator(".bwd-title").text_content()
    after = widget.locator(".bwd-saved-count").text_content()
    assert after != before
    assert "(" in widget.locator(".bwd-stats").text_content(), "the change from the previous partition is shown"
    widget.screenshot(path=str(artifacts / "jupyterlab-min-cut.png"))


def test_module_names_render_as_text(notebook_page, artifacts):
    page, dialogs, errors, _ = notebook_page
    widget = _widget(page, 2)
    widget.scroll_into_view_if_needed()
    # the module name is drawn (as text) and listed: had it become markup, its img would be in the DOM by now
    widget.locator(".bwd-svg text", has_text=EVIL).first.wait_for(timeout=10_000)
    widget.locator(".bwd-table td", has_text=EVIL).first.wait_for(timeout=10_000)
    assert page.locator(".bwd-root img").count() == 0
    assert page.locator("img[src='x']").count() == 0
    shown = widget.locator(".bwd-table td").all_text_contents() + widget.locator(".bwd-svg text").all_text_contents()
    assert any(EVIL in text for text in shown)
    assert dialogs == [] and not errors
    widget.screenshot(path=str(artifacts / "jupyterlab-escaping.png"))


def _rendered(widget) -> int:
    return int(widget.get_attribute("data-rendered"))


def _wait_rerender(page, index, before):
    page.wait_for_function(
        f"Number(document.querySelectorAll('.bwd-root')[{index}].dataset.rendered) > {before}", timeout=60_000
    )


def test_comparison_rows_switch_partitions_and_show_the_diff(notebook_page, artifacts):
    page, _, errors, _ = notebook_page
    widget = _widget(page, 3)
    widget.scroll_into_view_if_needed()
    rows = widget.locator("tr.bwd-compare-row")
    assert rows.count() == 2
    assert "default" in rows.nth(0).text_content() and "budget 0" in rows.nth(1).text_content()
    before = _rendered(widget)
    rows.nth(1).click()
    _wait_rerender(page, 3, before)
    assert "min_cut (budget 0)" in widget.locator(".bwd-title").text_content()
    diff = widget.locator(".bwd-diff-line").text_content()
    assert "against default" in diff and "now recomputed" in diff
    assert int(diff.split(": ")[1].split()[0]) > 0
    assert widget.locator("g.node.bwd-diff-recomputed").count() > 0
    listed = widget.locator("tr.bwd-row-recomputed-now")
    assert listed.count() == int(diff.split(": ")[1].split()[0])
    assert "recomputed now" in listed.first.text_content()
    assert "bwd-current" in rows.nth(1).get_attribute("class")
    widget.locator("tr.bwd-row").first.click()
    assert "why saved" in widget.locator(".bwd-details").text_content()
    widget.screenshot(path=str(artifacts / "jupyterlab-compare.png"))
    assert not errors


def test_sweep_chart_points_show_their_partition(notebook_page, artifacts):
    page, _, _, _ = notebook_page
    widget = _widget(page, 4)
    widget.scroll_into_view_if_needed()
    points = widget.locator("circle.bwd-sweep-point")
    assert points.count() == 3
    assert widget.locator("circle.bwd-pareto").count() >= 2
    before = _rendered(widget)
    points.nth(0).dispatch_event("click")
    _wait_rerender(page, 4, before)
    assert "budget 0" in widget.locator(".bwd-title").text_content()
    assert widget.locator(".bwd-activation-bytes").text_content() == "0 B"
    widget.screenshot(path=str(artifacts / "jupyterlab-sweep.png"))


def test_sweep_button_fills_the_chart_from_the_kernel(notebook_page):
    page, _, _, _ = notebook_page
    widget = _widget(page, 1)
    widget.scroll_into_view_if_needed()
    widget.locator("button.bwd-sweep-button").click()
    page.wait_for_function(
        "document.querySelectorAll('.bwd-root')[1].querySelectorAll('circle.bwd-sweep-point').length === 11",
        timeout=120_000,
    )
    assert widget.locator(".bwd-sweep-progress").text_content() == "11/11"


def _from_the_widget(message) -> bool:
    """Our bundle runs from a blob: URL; anywidget's own messages about it name anywidget."""
    return message.location.get("url", "").startswith("blob:") or "anywidget" in message.text or "bwd" in message.text


def test_no_console_warnings_or_errors_from_the_widget(notebook_page):
    page, _, errors, console = notebook_page
    assert not errors
    assert [f"{m.type}: {m.text}" for m in console if _from_the_widget(m)] == []
