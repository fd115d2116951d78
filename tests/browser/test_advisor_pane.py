"""Issue 19, in a real JupyterLab in Chromium: the advisor's field in the partitions tab. A widget opened with
bw.show(model, x) takes a target, shows the advisor's steps while the kernel's thread works, then lists the
plans with the cheapest that fits starred; a plan's row shows its partition and its code, as text; a bad
target is one sentence. Light and dark screenshots, text contrast in both."""

import json

import pytest

from jupyter_page import APP, KERNEL, low_contrast, notebook_url, set_theme, write_notebook

COURSE = """import torch
import bwd_widgets as bw
from bwd_widgets.examples import Transformer
torch.manual_seed(0)
model, tokens = Transformer(), torch.randint(0, 64, (4, 16))
bw.show(model, tokens)"""
TARGET = "300000"  # between min-cut 1.0's activation peak (337,920 B) and budget 0.5's (221,184 B)
ROWS = "document.querySelectorAll('.bwd-root .bwd-advice-row').length"
PROGRESS = "document.querySelector('.bwd-root .bwd-advice-progress')?.textContent ?? ''"


@pytest.fixture(scope="module")
def advisor_page(lab, browser):
    url, root = lab
    write_notebook(root / "advisor_pane.ipynb", [COURSE], {})
    page = browser.new_page(viewport={"width": 1500, "height": 1300})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(notebook_url(url, "advisor_pane.ipynb"))
    page.wait_for_function(
        f"{APP} && {APP}.shell.currentWidget && {APP}.shell.currentWidget.sessionContext"
        f" && {APP}.shell.currentWidget.sessionContext.session && {KERNEL}",
        timeout=90_000,
    )
    page.wait_for_function(f"{KERNEL}.connectionStatus === 'connected'", timeout=90_000)
    page.evaluate(f"{APP}.commands.execute('notebook:run-all-cells')")
    page.wait_for_function("document.querySelector('.bwd-root[data-rendered]')", timeout=300_000)
    page.wait_for_function(f"{KERNEL}.status === 'idle'", timeout=120_000)
    widget = page.locator(".bwd-root").first
    widget.scroll_into_view_if_needed()
    widget.locator("button.bwd-tab-partitions").click()
    yield page, widget, errors
    page.close()


def test_a_bad_target_is_one_sentence_and_starts_nothing(advisor_page):
    page, widget, errors = advisor_page
    assert "press Advise" in widget.locator(".bwd-advice-empty").text_content()
    widget.locator("input.bwd-advice-target").fill("lots")
    widget.locator("button.bwd-advise-button").click()
    failure = widget.locator(".bwd-advice .bwd-error")
    failure.wait_for(state="visible", timeout=30_000)
    page.wait_for_function("document.querySelector('.bwd-root .bwd-advice .bwd-error').textContent !== ''")
    text = failure.text_content()
    assert text.startswith("target='lots' is not a size") and "\n" not in text and "Traceback" not in text, text
    assert page.evaluate(ROWS) == 0 and errors == []


def test_advise_shows_its_steps_then_the_plans_and_a_row_shows_its_partition(advisor_page, artifacts):
    page, widget, errors = advisor_page
    title = widget.locator(".bwd-title").text_content()
    page.evaluate(
        f"""() => {{ window.__steps = []; const look = () => {{ const t = {PROGRESS};
        if (t && window.__steps[window.__steps.length - 1] !== t) window.__steps.push(t);
        window.__watching = requestAnimationFrame(look); }}; look(); }}"""
    )
    widget.locator("input.bwd-advice-target").fill(TARGET)
    widget.locator("button.bwd-advise-button").click()
    page.wait_for_function(f"{ROWS} > 0", timeout=300_000)
    page.evaluate("cancelAnimationFrame(window.__watching)")
    steps = page.evaluate("window.__steps")
    assert any("min-cut budget" in s for s in steps), f"the steps were shown as they ran: {steps}"
    rows = widget.locator(".bwd-advice-row")
    best = widget.locator(".bwd-advice-row.bwd-best")
    assert best.count() == 1 and best.locator("td").first.text_content().startswith("\u2605 ")
    heads = widget.locator(".bwd-advice-table th").all_text_contents()
    assert best.locator("td").nth(heads.index("fits")).text_content() == "yes"
    box, verdict = widget.bounding_box(), best.locator("td").nth(heads.index("fits")).bounding_box()
    assert box and verdict and verdict["x"] + verdict["width"] <= box["x"] + box["width"], "the verdict is not clipped"
    measured = [rows.nth(i).locator("td").nth(heads.index("measured peak")).text_content() for i in range(rows.count())]
    assert measured.count("\u2014") == rows.count() - 1, "only the chosen plan is run and measured"
    assert best.locator("td").nth(heads.index("measured peak")).text_content().endswith("B"), measured
    offload = widget.locator(".bwd-advice-row", has_text="offload saved tensors")
    # a CPU model: the hooks move nothing (CPU to CPU), so the offload plan never fits here, and says why
    assert offload.count() == 1 and offload.locator("td").nth(heads.index("fits")).text_content() == "no"
    assert "eager step" in (offload.get_attribute("title") or ""), "verified by running its hooks eagerly"
    assert widget.locator(".bwd-advice-summary").text_content().startswith("best: ")
    code = widget.locator("pre.bwd-advice-code")
    assert code.evaluate("(pre) => pre.children.length") == 0, "the plan's code is text, not HTML"
    assert widget.locator(".bwd-title").text_content() == title, "advising leaves the graph as it was"
    widget.screenshot(path=str(artifacts / "advisor-light.png"))
    assert low_contrast(page, widget) == []
    classes = [rows.nth(i).get_attribute("class") or "" for i in range(rows.count())]
    # a plan without a partition (offload, and region where this torch has region budgets) shows its code only
    for unshown in [i for i, c in enumerate(classes) if "bwd-unselectable" in c]:
        rows.nth(unshown).click()
        label = rows.nth(unshown).locator("td").first.text_content()
        page.wait_for_function(
            f"document.querySelector('.bwd-root .bwd-advice-note').textContent.startsWith({json.dumps(label + ': ')})"
        )
        assert code.text_content().strip() != "" and widget.locator(".bwd-title").text_content() == title
    other = next(i for i, c in enumerate(classes) if "bwd-best" not in c and "bwd-unselectable" not in c)
    rows.nth(other).click()
    page.wait_for_function(
        f"document.querySelectorAll('.bwd-root .bwd-advice-row')[{other}].classList.contains('bwd-current')",
        timeout=120_000,
    )
    # the row is marked when clicked; the kernel's partition follows (its plan may extract itself again first)
    page.wait_for_function(
        f"document.querySelector('.bwd-root .bwd-title').textContent !== {json.dumps(title)}", timeout=120_000
    )
    page.wait_for_function(f"{KERNEL}.status === 'idle'", timeout=120_000)
    label = rows.nth(other).locator("td").first.text_content()
    assert widget.locator(".bwd-advice-note").text_content().startswith(label)
    assert code.text_content().strip() != ""
    set_theme(page, "JupyterLab Dark")
    try:
        assert low_contrast(page, widget) == []
        widget.screenshot(path=str(artifacts / "advisor-dark.png"))
    finally:
        set_theme(page, "JupyterLab Light")
    assert errors == []


def test_time_each_plan_fills_the_step_time_column(advisor_page):
    page, widget, errors = advisor_page
    page.wait_for_function(f"{KERNEL}.status === 'idle'", timeout=120_000)
    if page.evaluate(ROWS) == 0:  # run alone: advise untimed first
        widget.locator("input.bwd-advice-target").fill(TARGET)
        widget.locator("button.bwd-advise-button").click()
        page.wait_for_function(f"{ROWS} > 0", timeout=300_000)
        page.wait_for_function(f"{KERNEL}.status === 'idle'", timeout=120_000)
    heads = widget.locator(".bwd-advice-table th").all_text_contents()
    column = heads.index("step time")
    cells = f"[...document.querySelectorAll('.bwd-root .bwd-advice-row')].map((r) => r.children[{column}].textContent)"
    assert all(t == "\u2014" for t in page.evaluate(cells)), "no plan is timed unless asked"
    widget.locator("input.bwd-advice-time").check()
    widget.locator("button.bwd-advise-button").click()
    page.wait_for_function(f"{cells}.some((t) => t.endsWith(' ms') || t.endsWith(' s'))", timeout=300_000)
    page.wait_for_function(f"{KERNEL}.status === 'idle'", timeout=120_000)
    times = page.evaluate(cells)
    unshown = page.evaluate(
        "[...document.querySelectorAll('.bwd-root .bwd-advice-row')].map((r) => r.classList.contains('bwd-unselectable'))"
    )
    assert any(unshown), "the offload plan is listed"
    assert [t == "\u2014" for t in times] == unshown, "each plan with a partition is timed, and only those"
    assert errors == []
