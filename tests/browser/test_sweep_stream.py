"""Issue 24, in a real JupyterLab in Chromium: the Sweep button on a 12-layer fake-mode transformer streams.
The points are drawn one by one as the kernel's thread partitions each budget, the progress line counts them,
the kernel answers other requests meanwhile, and Cancel stops the sweep before its next budget with the
points done kept (and the partition shown unchanged)."""

import json
import time

import pytest

from jupyter_page import APP, KERNEL, SETUP, notebook_url, run_in_kernel, write_notebook

TWELVE_LAYERS = """from bwd_widgets.examples import big_transformer_on_meta
twelve = big_transformer_on_meta(depth=12, width=768, heads=12)
with torch.device("meta"):
    twelve_tokens = torch.randint(0, 32000, (8, 512))
twelve_layers = bw.extract(twelve, twelve_tokens, mode="fake")
twelve_layers"""
POINTS = "document.querySelector('.bwd-root').querySelectorAll('circle.bwd-sweep-point').length"
PROGRESS = "document.querySelector('.bwd-root .bwd-sweep-progress')?.textContent ?? ''"
# Every change of the drawn point count, in the page's own time: [ms since the click, count].
RECORD_COUNTS = f"""() => {{
  window.__pointCounts = [];
  const start = performance.now();
  let last = -1;
  const look = () => {{
    const count = {POINTS};
    if (count !== last) {{ window.__pointCounts.push([Math.round(performance.now() - start), count]); last = count; }}
    window.__watching = requestAnimationFrame(look);
  }};
  look();
}}"""


@pytest.fixture(scope="module")
def sweep_page(lab, browser):
    url, root = lab
    write_notebook(root / "sweep_stream.ipynb", [SETUP, TWELVE_LAYERS], {})
    page = browser.new_page(viewport={"width": 1500, "height": 1300})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(notebook_url(url, "sweep_stream.ipynb"))
    page.wait_for_function(
        f"{APP} && {APP}.shell.currentWidget && {APP}.shell.currentWidget.sessionContext"
        f" && {APP}.shell.currentWidget.sessionContext.session && {KERNEL}",
        timeout=90_000,
    )
    page.wait_for_function(f"{KERNEL}.connectionStatus === 'connected'", timeout=90_000)
    page.evaluate(f"{APP}.commands.execute('notebook:run-all-cells')")
    page.wait_for_function("document.querySelector('.bwd-root[data-rendered]')", timeout=600_000)
    page.wait_for_function(f"{KERNEL}.status === 'idle'", timeout=120_000)
    yield page, errors
    page.close()


def test_the_sweep_streams_its_points_and_cancel_stops_it(sweep_page, artifacts):
    page, errors = sweep_page
    widget = page.locator(".bwd-root").first
    widget.scroll_into_view_if_needed()
    widget.locator("button.bwd-tab-partitions").click()
    title = widget.locator(".bwd-title").text_content()
    cancel = widget.locator("button.bwd-sweep-cancel")
    assert cancel.is_hidden(), "no Cancel before a sweep runs"
    page.evaluate(RECORD_COUNTS)
    widget.locator("button.bwd-sweep-button").click()
    page.wait_for_function(f"{POINTS} >= 1", timeout=300_000)
    assert cancel.is_visible(), "Cancel shows while the sweep runs"
    progress = page.evaluate(PROGRESS)
    done, total = (int(n) for n in progress.split("/"))
    assert total == 11 and 1 <= done < total, progress
    # the kernel is free while its thread sweeps: a request runs and answers before the sweep ends
    assert run_in_kernel(page, "print(6 * 7)").strip() == "42"
    page.wait_for_function(f"{POINTS} >= 2", timeout=300_000)
    widget.screenshot(path=str(artifacts / "sweep-streaming.png"))
    cancel.click()
    page.wait_for_function(f"({PROGRESS}).endsWith('(cancelled)')", timeout=300_000)
    page.evaluate("cancelAnimationFrame(window.__watching)")
    kept = page.evaluate(POINTS)
    counts = page.evaluate("window.__pointCounts")
    assert 2 <= kept < 11, f"the sweep stopped before its last budget with the points done kept: {kept}"
    assert page.evaluate(PROGRESS) == f"{kept}/11 (cancelled)"
    drawn = [count for _, count in counts]
    assert drawn == sorted(drawn) and drawn[-1] == kept, counts
    # drawn as they came, not at the end: frames showed points while the sweep ran (the worker's point and this
    # process's may land in one frame, so two counts need not differ)
    assert len([c for c in drawn if c > 0]) >= 2, f"points arrived one by one, not at the end: {counts}"
    cancel.wait_for(state="hidden", timeout=30_000)  # Cancel goes as the progress line says "(cancelled)"...
    page.wait_for_function(  # ...and the Sweep button comes back when the busy flag drops, a moment later
        "!document.querySelector('.bwd-root button.bwd-sweep-button').disabled", timeout=30_000
    )
    assert widget.locator(".bwd-title").text_content() == title, "the partition shown is the one before the sweep"
    page.wait_for_timeout(3_000)
    assert page.evaluate(POINTS) == kept, "no point arrives after the cancel"
    widget.screenshot(path=str(artifacts / "sweep-cancelled.png"))
    assert not errors


SHOWN = """from ipywidgets.widgets.widget import _instances
shown = next(w for w in _instances.values() if type(w).__name__ == "BackwardGraphWidget" and w.session.sweep is not None)
[t.join() for t in __import__("threading").enumerate() if t.name == "bwd-widgets-prepare"]"""
# the kernel's answer to a move held back 10 s (its comm messages run beside a running cell in ipykernel 7)
SLOW = """import time
shown._partitioned = lambda *args, slow=shown._partitioned: (time.sleep(10), slow(*args))[1]"""
TITLE = "document.querySelector('.bwd-root .bwd-title').textContent"


def test_a_slider_move_to_a_swept_budget_repaints_before_the_kernel_answers(sweep_page, artifacts):
    """The swept payloads go to the browser after the sweep (js/ahead.ts): a slider move to a swept budget is
    drawn before the kernel answers (held back here), and the kernel's own payload, saying what changed since
    the partition before, follows. Runs after the cancelled sweep above."""
    page, errors = sweep_page
    widget = page.locator(".bwd-root").first
    run_in_kernel(page, SHOWN)
    widget.locator("select.bwd-partitioner").select_option("min_cut")
    page.wait_for_function(f"({TITLE}).includes('min_cut')", timeout=120_000)
    page.wait_for_function(f"{KERNEL}.status === 'idle'", timeout=120_000)
    sent = run_in_kernel(
        page,
        "print(sorted(p.budget for p in shown.session.sweep.points if id(p.extraction_made) in shown.session.ahead.sent))",
    )
    current = float(run_in_kernel(page, "print(shown.memory_budget)"))
    budget = f"{next(b for b in json.loads(sent) if b != current):g}"  # one the browser holds, not the one shown
    run_in_kernel(page, SLOW)
    moved = time.monotonic()
    widget.locator("input.bwd-budget").evaluate(
        f"(e) => {{ e.value = '{budget}'; e.dispatchEvent(new Event('change')); }}"
    )
    page.wait_for_function(f"({TITLE}).includes('(budget {budget})')", timeout=5_000)
    drawn = time.monotonic() - moved
    assert widget.locator(".bwd-diff-line").text_content() == "", "the payload made ahead: the diff is the kernel's"
    widget.screenshot(path=str(artifacts / "slider-ahead.png"))
    page.wait_for_function(
        "document.querySelector('.bwd-root .bwd-diff-line').textContent.startsWith('against min_cut')", timeout=60_000
    )
    answered = time.monotonic() - moved
    assert drawn < 5 and answered > 9, f"drawn after {drawn:.1f} s, the kernel's answer after {answered:.1f} s"
    run_in_kernel(page, "del shown._partitioned")
    assert f"(budget {budget})" in page.evaluate(TITLE)
    assert not errors
