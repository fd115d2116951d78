"""Issue 47, as a user sees it: `%bwd_extract --trace` on a real torch.compile run's TORCH_TRACE (the course MLP
with a graph break: two regions), in a real JupyterLab in Chromium, at 1,000 and 1,500 px, light and dark. Each
region is drawn under its line; its header names the run's partition and backend; the controls that would
partition it again (the partitioner, the budget, the Sweep button) are off, since the run's partition is what
it shows; nothing errs on the page. A screenshot per case: test-artifacts/trace-regions-<width>-<theme>.png."""

import pytest
from torch_trace_runs import traced_run

from jupyter_page import KERNEL, Frontend, collect_page_errors, open_and_run, set_theme, write_notebook

NOTEBOOK = "trace_regions.ipynb"
WIDTHS = (1000, 1500)
THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}

# What each drawn region shows of its controls and its header.
CONTROLS = """() => [...document.querySelectorAll('.bwd-root')].map((root) => ({
  partitioner_off: root.querySelector('select.bwd-partitioner').disabled,
  partitioner: root.querySelector('select.bwd-partitioner').value,
  budget_off: root.querySelector('input.bwd-budget').disabled,
  sweep_shown: root.querySelector('button.bwd-sweep-button').getClientRects().length > 0,
  title: root.querySelector('.bwd-title').textContent,
  saved: root.querySelector('.bwd-saved-count')?.textContent ?? '',
  width: Math.round(root.getBoundingClientRect().width),
}))"""


@pytest.fixture(scope="module")
def trace_page(lab, browser, artifacts, tmp_path_factory):
    folder = tmp_path_factory.mktemp("run") / "trace"
    traced_run(folder, "broken", "aot_eager", 0.5)
    frontend = Frontend("jupyterlab", *lab)
    cells = ["%load_ext bwd_widgets", f"run = %bwd_extract --trace {folder}"]
    write_notebook(frontend.root / NOTEBOOK, cells, {})
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    errors: list[str] = []
    collect_page_errors(page, errors)
    open_and_run(page, frontend.notebook(NOTEBOOK), 2, frontend.shot(artifacts, "trace-regions-timeout.png"))
    page.wait_for_function(f"{KERNEL}.status === 'idle'", timeout=120_000)
    yield frontend, page, errors
    set_theme(page, "JupyterLab Light")  # the theme is a setting of the server's: leave it as other modules expect
    page.close()


@pytest.mark.parametrize("theme", sorted(THEMES))
@pytest.mark.parametrize("width", WIDTHS)
def test_each_region_is_drawn_with_its_run_partition_and_no_control_to_change_it(trace_page, artifacts, width, theme):
    frontend, page, errors = trace_page
    page.set_viewport_size({"width": width, "height": 1100})
    if page.evaluate("document.body.dataset.jpThemeName") != THEMES[theme]:
        set_theme(page, THEMES[theme])
    page.wait_for_timeout(500)  # the container query and the refit follow the new width
    page.locator(".bwd-root").first.scroll_into_view_if_needed()
    page.screenshot(path=frontend.shot(artifacts, f"trace-regions-{width}-{theme}.png"))
    regions = page.evaluate(CONTROLS)
    assert len(regions) == 2, regions
    for region in regions:
        assert region["partitioner_off"] and region["budget_off"] and not region["sweep_shown"], region
        assert region["partitioner"] == "torch.compile" and "aot_eager" in region["title"], region
        assert int(region["saved"]) > 0 and 0 < region["width"] <= width, region
    assert not errors, errors
