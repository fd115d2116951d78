"""The static picture follows the widget (issue 43, item 10), in a real JupyterLab: the author moves the widget
to min-cut at budget 0.45 with its own controls and saves; after a kernel restart and a reload, the picture
that stands in for the widget shows min-cut 0.45, not the partition the cell first drew."""

import json

import pytest

from jupyter_page import APP, KERNEL, SETUP, open_and_run, save_notebook, write_notebook

SHOWING = {
    "the magic": "%bwd_extract --name small model(tokens)",
    "a result ending the cell": "bw.extract(model, tokens, name='small')",
}
"""The ways a cell draws the widget: the magic displays it, a result that ends a cell displays itself."""
CELL = f"{APP}.shell.currentWidget.model.cells.get(1)"
SHOWN = "small \u00b7 min_cut (budget 0.45)"
FIRST = "small \u00b7 default"

# the widget cell's outputs in the notebook's model (what a save writes): each output's type and HTML
OUTPUTS = f"""() => {{
  const outputs = {CELL}.outputs;
  return [...Array(outputs.length).keys()].map((i) => outputs.get(i).toJSON()).map((o) => ({{
    type: o.output_type, html: [].concat((o.data || {{}})['text/html'] || []).join(''),
    widget: 'application/vnd.jupyter.widget-view+json' in (o.data || {{}}),
  }}));
}}"""
# what a reader sees of the pictures on the page
PICTURES_SHOWN = """() => [...document.querySelectorAll('.bwd-static')]
  .filter((s) => s.getClientRects().length > 0).map((s) => s.innerText)"""


def _pictures(outputs: list[dict]) -> list[str]:
    return [o["html"] for o in outputs if 'class="bwd-static"' in o["html"]]


@pytest.mark.parametrize("cell", SHOWING.values(), ids=SHOWING.keys())
def test_a_saved_notebook_shows_the_partition_its_author_left_on_screen(lab, browser, artifacts, cell):
    url, root = lab
    write_notebook(root / "follows.ipynb", [SETUP + "\n%load_ext bwd_widgets", cell], {})
    page = browser.new_page(viewport={"width": 1500, "height": 1300})
    try:
        open_and_run(page, f"{url}/lab/tree/follows.ipynb", 1, artifacts / "follows-timeout.png")
        page.wait_for_function(f"{CELL}.outputs.length > 0 && {KERNEL}.status === 'idle'", timeout=60_000)
        before = page.evaluate(OUTPUTS)
        assert len(_pictures(before)) == 1 and FIRST in _pictures(before)[0], before
        widget = page.locator(".bwd-root").first
        widget.scroll_into_view_if_needed()
        title = widget.locator(".bwd-title")
        widget.locator("select.bwd-partitioner").select_option("min_cut")
        page.wait_for_function(
            "document.querySelector('.bwd-root .bwd-title').textContent.includes('min_cut')", timeout=60_000
        )
        slider = widget.locator("input.bwd-budget")
        assert slider.input_value() == "1"
        slider.focus()
        for _ in range(11):  # 1 -> 0.45 in steps of 0.05, as a user's arrow keys move it: eleven partitions
            page.keyboard.press("ArrowLeft")
        page.wait_for_function(
            "document.querySelector('.bwd-root .bwd-title').textContent.includes('min_cut (budget 0.45)')",
            timeout=120_000,
        )
        assert slider.input_value() == "0.45" and "min_cut (budget 0.45)" in title.text_content()
        # the kernel redraws the picture once the widget pauses, and the front end puts it in the output's place
        page.wait_for_function(f"({OUTPUTS})().some((o) => o.html.includes({json.dumps(SHOWN)}))", timeout=120_000)
        live = page.evaluate(OUTPUTS)
        assert page.evaluate(PICTURES_SHOWN) == [], "beside the drawn widget the picture stays hidden"
        save_notebook(page)
        saved = json.loads((root / "follows.ipynb").read_text())["cells"][1]["outputs"]
        pictures = [o for o in saved if 'class="bwd-static"' in "".join(o.get("data", {}).get("text/html", []))]
        assert len(pictures) == 1 and pictures[0]["output_type"] == "display_data", saved
        picture = "".join(pictures[0]["data"]["text/html"])
        assert SHOWN in picture and FIRST not in picture
        if cell.startswith("%"):  # the picture's text: the widget's headline, or the result's own repr
            assert SHOWN in "".join(pictures[0]["data"]["text/plain"])
        else:
            assert "".join(pictures[0]["data"]["text/plain"]).startswith("BackwardExtraction(model='small'")
        assert [o["output_type"] for o in saved if o.get("output_type") == "execute_result"] == [], "no Out[n]"
        assert [o["widget"] for o in live].count(True) == 1 and len(_pictures(live)) == 1

        page.evaluate(f"{KERNEL}.restart()")
        page.wait_for_function(f"{KERNEL}.status === 'idle'", timeout=90_000)
        page.reload()
        page.wait_for_function(
            f"{APP} && {APP}.shell.currentWidget && {APP}.shell.currentWidget.sessionContext"
            f" && {APP}.shell.currentWidget.sessionContext.session && {KERNEL}",
            timeout=90_000,
        )
        page.wait_for_function(f"{KERNEL}.connectionStatus === 'connected'", timeout=90_000)
        page.wait_for_function(f"({PICTURES_SHOWN})().length === 1", timeout=90_000)
        page.screenshot(path=str(artifacts / "follows-reopened.png"), full_page=True)
        shown = page.evaluate(PICTURES_SHOWN)
    finally:
        page.close()
    assert SHOWN in shown[0] and FIRST not in shown[0], shown[0][:300]
