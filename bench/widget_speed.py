"""Widget speed on the 32-layer, width-4096 transformer's backward graph (fake mode), in headless Chromium.

Measures the same front end the notebook widget runs, loaded from bw.to_html(extraction, path):
first paint of the collapsed graph, opening one block, selecting a node, and the
widget's synced state size. Goals: 2 s, 0.5 s, 100 ms, 3 MB.
Run: .venv/bin/python bench/widget_speed.py [--depth 32 --width 4096]
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

import bwd_widgets as bw
from bwd_widgets.examples import big_transformer_on_meta

from _util import CHROMIUM_ARGS, ROOT

RENDERED = "(n) => Number(document.querySelector('.bwd-root').dataset.rendered || 0) > n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=32)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    model = big_transformer_on_meta(depth=args.depth, width=args.width, heads=args.width // 128)
    with torch.device("meta"):
        tokens = torch.randint(0, 32000, (8, 512))
    extraction = bw.extract(model, tokens, mode="fake")
    widget = bw.show(extraction)
    state_bytes = len(json.dumps({k: v for k, v in widget.get_state().items() if not k.startswith("_")}))
    print(f"backward nodes: {extraction.backward_node_count}, saved: {len(extraction.saved_tensors)}")
    print(f"synced widget state: {state_bytes / 1e6:.2f} MB (goal < 3)")

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as folder, sync_playwright() as playwright:
        page_path = bw.to_html(extraction, Path(folder) / "big.html")
        browser = playwright.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 900})
        paints, opens, selects, reveals = [], [], [], []
        for _ in range(3):
            page.goto(page_path.as_uri())
            page.wait_for_function(RENDERED, arg=0, timeout=60_000)
            root = page.locator(".bwd-root")
            paints.append(int(root.get_attribute("data-first-paint-ms")))
            visible = int(root.get_attribute("data-visible-nodes"))
            # open one block: click the collapsed group of blocks.7 (or the first group shown)
            rendered = int(root.get_attribute("data-rendered"))
            elapsed = page.evaluate(
                """async ([n]) => {
                    const g = document.querySelector('g.bwd-group');
                    const t = performance.now();
                    g.dispatchEvent(new MouseEvent('click', {bubbles: true}));
                    while (Number(document.querySelector('.bwd-root').dataset.rendered) <= n) await new Promise(r => setTimeout(r, 5));
                    return performance.now() - t;
                }""",
                [rendered],
            )
            opens.append(elapsed)
            # select a node that is drawn: highlight in graph, table and code
            selects.append(
                page.evaluate(
                    """() => {
                    const drawn = [...document.querySelectorAll('g.bwd-node-saved')].map(g => g.querySelector('text').textContent);
                    const row = [...document.querySelectorAll('tr.bwd-row')].find(r => drawn.includes(r.dataset.name));
                    const t = performance.now();
                    row.click();
                    const done = document.querySelector('g.bwd-selected') && document.querySelector('tr.bwd-selected');
                    return done ? performance.now() - t : -1;
                }"""
                )
            )
            # select a node inside a collapsed block: the view opens it and lays out again
            rendered = int(root.get_attribute("data-rendered"))
            reveals.append(
                page.evaluate(
                    """async ([n]) => {
                    const rows = [...document.querySelectorAll('tr.bwd-row')];
                    const drawn = new Set([...document.querySelectorAll('g.node text')].map(t => t.textContent));
                    const row = rows.reverse().find(r => !drawn.has(r.dataset.name));
                    const t = performance.now();
                    row.click();
                    while (Number(document.querySelector('.bwd-root').dataset.rendered) <= n) await new Promise(r => setTimeout(r, 5));
                    return performance.now() - t;
                }""",
                    [rendered],
                )
            )
        page.screenshot(path=str(ROOT / "docs" / "widget_big_model.png"))
        browser.close()
    print(f"visible nodes when collapsed: {visible}")
    print(f"first paint of the collapsed graph: {statistics.median(paints) / 1000:.2f} s (goal < 2)")
    print(f"opening one block: {statistics.median(opens) / 1000:.2f} s (goal < 0.5)")
    print(f"selecting a drawn node: {statistics.median(selects):.1f} ms (goal < 100)")
    print(f"selecting a node inside a collapsed block (opens it, lays out): {statistics.median(reveals) / 1000:.2f} s")


if __name__ == "__main__":
    main()
