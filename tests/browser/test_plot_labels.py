"""The course's Pareto charts in a real Chromium: every point's label inside the picture and clear of the
others, measured on the glyphs the browser draws (notebook 3 cells 15 and 16, the same sweep)."""

import pytest
import torch

import bwd_widgets as bw
from bwd_widgets.examples import Transformer

BOXES = """(svg) => [...svg.querySelectorAll('text')].map((t) => {
  const b = t.getBBox();
  return { text: t.textContent, left: b.x, top: b.y, right: b.x + b.width, bottom: b.y + b.height };
})"""


@pytest.fixture(scope="module")
def notebook_3_sweep():
    """Notebook 3's model, tokens and sweep (budgets 0, 0.1, ..., 1)."""
    torch.manual_seed(0)
    model = Transformer(width=64, depth=2, heads=4, vocab=128)
    tokens = torch.randint(0, 128, (4, 32))
    return bw.sweep(bw.extract(model, tokens), progress=False)


@pytest.mark.parametrize("x", ["saved", "peak"])
def test_pareto_labels_stay_inside_and_apart(browser, artifacts, notebook_3_sweep, x):
    plot = bw.plot.pareto(notebook_3_sweep, x=x)
    page = browser.new_page(viewport={"width": 800, "height": 500})
    try:
        page.set_content(f"<!doctype html><body style='margin:0'>{plot.svg}</body>")
        svg = page.locator("svg").first
        texts = svg.evaluate(BOXES)
        width, height = (float(v) for v in svg.evaluate("(s) => [s.viewBox.baseVal.width, s.viewBox.baseVal.height]"))
        page.screenshot(path=str(artifacts / f"pareto-labels-{x}.png"))
    finally:
        page.close()
    labels = [t for t in texts if t["text"].startswith("budget")]
    assert len(labels) >= 5, labels
    outside = [b["text"] for b in labels if b["left"] < 0 or b["right"] > width or b["top"] < 0 or b["bottom"] > height]
    assert outside == [], f"labels cut off at the picture's edge: {outside}"
    overlapping = [
        (a["text"], b["text"])
        for a in labels
        for b in texts
        if a is not b
        and a["left"] < b["right"]
        and b["left"] < a["right"]
        and a["top"] < b["bottom"]
        and b["top"] < a["bottom"]
    ]
    assert overlapping == [], f"labels drawn over other text (labels, axis numbers, titles): {overlapping}"
