"""The widget where it cannot run, in a real JupyterLab and in Notebook 7, each with its default widget
settings (no saved widget state): after a kernel restart and a reload the cell shows the static picture,
never "Error displaying widget: model not found"; an untrusted notebook shows the picture and the charts
as images, not their text."""

import contextlib
import json

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from jupyter_page import APP, KERNEL, SETUP, open_and_run, save_notebook, set_theme, write_notebook

CELLS = [
    SETUP,
    "ref = bw.extract(bw.load_graphnet_sample(CONV_BN))\nref",
    "bw.show(bw.extract(model, tokens))",
    "bw.plot.timeline(ref)",
]
WIDGETS = 2

# In the notebook on screen: its outputs' text as a reader sees it (innerText leaves out what is hidden),
# whether the static picture is on screen, and how many of its images loaded.
OUTPUTS = """() => {
  const notebook = window.jupyterapp.shell.currentWidget.node;
  const shown = (el) => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden';
  const statics = [...notebook.querySelectorAll('.bwd-static')];
  const images = statics.flatMap((s) => [...s.querySelectorAll('img')]);
  return {
    text: [...notebook.querySelectorAll('.jp-OutputArea')].map((o) => o.innerText).join('\\n'),
    hidden_errors: [...notebook.querySelectorAll('.jp-OutputArea-child')].filter((c) => !shown(c) && c.textContent.includes('model not found')).length,
    statics: statics.length,
    statics_shown: statics.filter(shown).length,
    images_loaded: images.filter((i) => shown(i) && i.complete && i.naturalWidth > 0).length,
    images_with_alt: images.filter((i) => (i.getAttribute('alt') || '').length > 20).length,
    widgets_shown: [...notebook.querySelectorAll('.bwd-root')].filter(shown).length,
    chart_images: [...notebook.querySelectorAll('.jp-OutputArea-output img')].filter((i) => !i.closest('.bwd-static') && i.naturalWidth > 0).length,
    widest: Math.max(0, ...images.map((i) => i.getBoundingClientRect().right)),
    page: notebook.getBoundingClientRect().right,
  };
}"""


@pytest.fixture(scope="module")
def saved_notebook(frontend, browser, artifacts, conv_bn_dir):
    """The notebook run in a live kernel and saved, in each frontend; yields (page, frontend, root)."""
    root = frontend.root
    write_notebook(root / "offline.ipynb", CELLS, {"CONV_BN": conv_bn_dir})
    page = browser.new_page(viewport={"width": 1500, "height": 1300})
    open_and_run(page, frontend.notebook("offline.ipynb"), WIDGETS, frontend.shot(artifacts, "offline-timeout.png"))
    page.wait_for_function(f"{APP}.shell.currentWidget.model.cells.get(3).outputs.length > 0", timeout=60_000)
    yield page, frontend, root
    page.close()


def _wait_for_widget_outputs(page) -> None:
    """Until every widget output has either drawn or given up ("model not found")."""
    page.wait_for_function(
        """() => {
          const outputs = [...document.querySelectorAll('.jp-OutputArea-output')];
          const waiting = outputs.filter((o) => o.textContent.trim() === 'Loading widget...');
          return outputs.length > 0 && waiting.length === 0;
        }""",
        timeout=90_000,
    )
    page.wait_for_timeout(500)


def _outputs_when(page, ready: str) -> dict:
    """OUTPUTS once `ready` (a condition on them, named `s`) holds, or after a minute as they are: pictures load
    and refit a moment after their cells draw, later on a loaded machine."""
    condition = f"(() => {{ const s = ({OUTPUTS})(); return {ready}; }})()"
    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_function(condition, timeout=60_000)
    return page.evaluate(OUTPUTS)


PICTURES_READY = f"s.statics_shown === {WIDGETS} && s.images_loaded >= {2 * WIDGETS}"
"""Every widget's picture shown, its graph and timeline loaded."""


def test_live_the_widget_shows_and_the_picture_hides(saved_notebook, artifacts):
    page, *_ = saved_notebook
    seen = page.evaluate(OUTPUTS)
    assert seen["statics"] == WIDGETS and seen["statics_shown"] == 0, seen
    assert seen["widgets_shown"] == WIDGETS, seen
    assert "BackwardExtraction(" not in seen["text"] and "BackwardGraph(" not in seen["text"], seen["text"][:500]


def test_after_a_restart_and_a_reload_the_cell_shows_the_picture(saved_notebook, artifacts):
    page, frontend, root = saved_notebook
    save_notebook(page)
    page.evaluate(f"{KERNEL}.restart()")
    page.wait_for_function(f"{KERNEL}.status === 'idle'", timeout=90_000)
    page.reload()
    session = f"{APP}.shell.currentWidget.sessionContext.session"
    page.wait_for_function(
        f"{APP} && {APP}.shell.currentWidget && {APP}.shell.currentWidget.sessionContext && {session} && {KERNEL}",
        timeout=90_000,
    )
    page.wait_for_function(f"{KERNEL}.connectionStatus === 'connected'", timeout=90_000)
    _wait_for_widget_outputs(page)
    seen = _outputs_when(page, PICTURES_READY)
    page.screenshot(path=frontend.shot(artifacts, "offline-restarted-light.png"), full_page=True)
    assert "model not found" not in seen["text"] and "Error displaying widget" not in seen["text"], seen["text"][:800]
    assert seen["hidden_errors"] == WIDGETS, "the widget outputs gave up, out of sight"
    assert seen["statics_shown"] == WIDGETS, seen
    assert seen["images_loaded"] >= 2 * WIDGETS, "the graph and the timeline of each widget"
    assert seen["images_with_alt"] >= 2 * WIDGETS, seen
    assert seen["widest"] <= seen["page"], "the pictures fit the page"
    assert "largest of" in seen["text"] and "saved value" in seen["text"], "the saved table"
    assert "peak activation memory" in seen["text"]
    set_theme(page, "JupyterLab Dark")
    page.screenshot(path=frontend.shot(artifacts, "offline-restarted-dark.png"), full_page=True)
    page.set_viewport_size({"width": 1000, "height": 1300})
    narrow = _outputs_when(page, "s.widest <= s.page")
    page.screenshot(path=frontend.shot(artifacts, "offline-restarted-dark-1000.png"), full_page=True)
    set_theme(page, "JupyterLab Light")
    page.set_viewport_size({"width": 1500, "height": 1300})
    assert narrow["widest"] <= narrow["page"], "the pictures shrink to a 1,000 px window"


def test_an_untrusted_notebook_shows_pictures_not_text(saved_notebook, artifacts):
    page, frontend, root = saved_notebook
    save_notebook(page)
    notebook = json.loads((root / "offline.ipynb").read_text())
    notebook["cells"].insert(0, {"cell_type": "markdown", "metadata": {}, "source": ["A copy: not signed."]})
    (root / "untrusted.ipynb").write_text(json.dumps(notebook))
    page.goto(frontend.notebook("untrusted.ipynb"))
    page.wait_for_function(
        f"{APP} && {APP}.shell.currentWidget && {APP}.shell.currentWidget.model"
        f" && {APP}.shell.currentWidget.model.cells.length === {len(CELLS) + 1}",
        timeout=90_000,
    )
    page.wait_for_function("document.querySelectorAll('.bwd-static').length > 0", timeout=90_000)
    page.wait_for_timeout(1500)
    trusted = page.evaluate(
        f"(() => {{ const cells = {APP}.shell.currentWidget.model.cells;"
        " return [...Array(cells.length).keys()].map((i) => cells.get(i)).filter((c) => c.type === 'code').map((c) => c.trusted); })()"
    )
    assert not any(trusted), "the copy opens untrusted"
    seen = _outputs_when(page, f"{PICTURES_READY} && s.chart_images >= 1")
    page.screenshot(path=frontend.shot(artifacts, "offline-untrusted.png"), full_page=True)
    assert seen["statics_shown"] == WIDGETS and seen["images_loaded"] >= 2 * WIDGETS, seen
    assert seen["chart_images"] >= 1, "bw.plot's chart shows as an image"
    for text in ("BackwardExtraction(", "BackwardGraph(", "timeline: ", "model not found"):
        assert text not in seen["text"], (text, seen["text"][:800])
