"""The budget slider in JupyterLab after a sweep, kernel to painted pixels, on the 12-layer, width-768
fake transformer that bench/sweep_speed.py sweeps (issue 24).

A real JupyterLab server and Debian's headless Chromium run one notebook: a cell extracts the model in
fake mode, shows the widget and sweeps min-cut's budget (`run_sweep`, the Sweep button's work); the widget
sends the swept payloads to the browser (js/ahead.ts). Then, alternating, the slider is moved as a user moves
it (its value set, a `change` event):
(a) to a swept budget: the goal is the frame with the new partition drawn within 0.2 s of the move;
(b) the baseline, in the same run: to a budget the sweep did not visit (partitioned again in the kernel: the
    partitions the widget made ahead beside earlier moves dropped first, in the kernel and the browser);
(c) to a swept budget with the browser's payloads made ahead dropped first: the kernel's round trip, as a
    move went before the browser kept them (they are sent again after);
(d) one slider step on from (a), once the widget has partitioned that move's two neighbouring budgets in a
    thread (the kernel is waited on for them, as a user reads the graph for a few seconds).
Each move is timed from the `change` event to the frame after the graph pane drew the new payload.
Run: .venv/bin/python bench/slider_speed.py [--repeats 3]
"""

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from widget_speed import open_notebook, run_cell

from _util import CHROMIUM_ARGS

SETUP = """import time
import torch
import bwd_widgets as bw
from bwd_widgets.examples import Transformer
from IPython.display import display
with torch.device("meta"):
    model = Transformer(width=768, depth=12, heads=12, vocab=32000)
    tokens = torch.randint(0, 32000, (8, 512))
widget = bw.show(bw.extract(model, tokens, mode="fake"))
started = time.time()
widget.run_sweep()
display(widget)
print("swept", len(widget.sweep_points), "budgets in", round(time.time() - started, 1), "s")
for thread in __import__("threading").enumerate():
    if thread.name == "bwd-widgets-prepare":
        thread.join()  # the swept partitions' payloads, prepared after the sweep: a user reads the chart meanwhile
print("payloads prepared", round(time.time() - started, 1), "s after the sweep began")"""
ROOT = "document.querySelector('.jp-CodeCell .bwd-root')"
# `control` is the header's budget slider or partitioner menu; the answer is ms to the painted frame.
MOVE = """async ([control, value]) => {
  const root = document.querySelector('.jp-CodeCell .bwd-root');
  const input = root.querySelector(control);
  const busy = root.querySelector('.bwd-busy');
  while (busy.style.display !== 'none') await new Promise((r) => setTimeout(r, 20));
  const before = root.dataset.paintedAt;
  const moved = performance.timeOrigin + performance.now();
  input.value = String(value);
  input.dispatchEvent(new Event('input', { bubbles: true }));
  input.dispatchEvent(new Event('change', { bubbles: true }));
  while (root.dataset.paintedAt === before || Number(root.dataset.paintedAt) < moved) {
    if (performance.timeOrigin + performance.now() - moved > 60000) throw new Error(`no repaint after ${control} = ${value}`);
    await new Promise((r) => setTimeout(r, 2));
  }
  return Number(root.dataset.paintedAt) - moved;
}"""
SLIDER = "input[type=range]"
# runs `code` in the notebook's kernel without a cell; the answer is its stderr, empty when it worked
IN_KERNEL = """async (code) => {
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  let failed = '';
  const future = kernel.requestExecute({ code, silent: false, store_history: false });
  future.onIOPub = (msg) => { if (msg.header.msg_type === 'error') failed = msg.content.evalue; };
  await future.done;
  return failed;
}"""
# the neighbouring budgets a move partitions in a thread: wait for them; drop them (and their payloads, here
# and in the browser), so a move partitions again
SETTLED = "[t.join() for t in __import__('threading').enumerate() if t.name == 'bwd-widgets-neighbours']"
FORGET = (
    "swept = {id(p.extraction_made) for p in widget.session.sweep.points}; widget.session.ahead.neighbours.clear(); "
    "widget.session.ahead.prepared = {k: v for k, v in widget.session.ahead.prepared.items() if k in swept}; "
    "widget.session.ahead.forget(); widget.session.ahead.send_ahead()"
)
BY_KERNEL = "widget.session.ahead.forget()"  # the browser keeps no payload made ahead: a move waits for the kernel
AHEAD = "widget.session.ahead.send_ahead()"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="moves of each kind")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--trace", type=Path, help="write a Chromium performance trace of the swept moves here")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    swept_budgets = [0.1, 0.3, 0.5, 0.7, 0.9, 0.2, 0.4, 0.6, 0.8]
    unswept_budgets = [0.15, 0.35, 0.55, 0.75, 0.25, 0.45, 0.65, 0.85, 0.05]
    with tempfile.TemporaryDirectory() as name, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        page, process = open_notebook(browser, Path(name), "slider.ipynb", [SETUP])
        swept, unswept, by_kernel, neighbour = [], [], [], []
        try:
            run_cell(page, 0)
            page.wait_for_function(
                "document.querySelector('.jp-CodeCell .jp-OutputArea')?.innerText.includes('payloads prepared')",
                timeout=600_000,
            )
            page.wait_for_function(f"{ROOT}?.dataset.paintedAt", timeout=120_000)
            print(" / ".join(page.locator(".jp-CodeCell .jp-OutputArea").first.inner_text().strip().splitlines()[-2:]))
            page.evaluate(MOVE, ["select.bwd-partitioner", "min_cut"])  # the slider applies to min-cut only

            def kernel(code: str) -> None:
                """Run `code` in the kernel, then let the page settle (the kernel's busy and idle redraw
                JupyterLab's toolbar, the payloads sent ahead arrive) as it would before a user's next move."""
                if failed := page.evaluate(IN_KERNEL, code):
                    sys.exit(f"{code}: {failed}")
                page.wait_for_timeout(500)

            move = lambda budget: page.evaluate(MOVE, [SLIDER, budget]) / 1000  # noqa: E731
            for repeat in range(args.repeats):
                budget = swept_budgets[repeat % len(swept_budgets)]
                kernel(SETTLED + "; " + FORGET)
                if args.trace and repeat == args.repeats - 1:
                    browser.start_tracing(page=page, path=str(args.trace), categories=["devtools.timeline"])
                swept.append(move(budget))
                if args.trace and repeat == args.repeats - 1:
                    browser.stop_tracing()
                kernel(SETTLED)  # the user looks at the graph while its neighbours are partitioned
                neighbour.append(move(round(budget + 0.05, 2)))
                kernel(SETTLED + "; " + FORGET)
                unswept.append(move(unswept_budgets[(repeat + 2) % len(unswept_budgets)]))  # not where (d) left it
                kernel(SETTLED + "; " + FORGET + "; " + BY_KERNEL)
                by_kernel.append(move(swept_budgets[(repeat + 4) % len(swept_budgets)]))
                kernel(SETTLED + "; " + AHEAD)
                print(
                    f"move {repeat + 1}: to a swept budget {swept[-1]:.3f} s, to its neighbour {neighbour[-1]:.3f} s, "
                    f"to an unswept one {unswept[-1]:.3f} s, to a swept one by the kernel {by_kernel[-1]:.3f} s"
                )
        finally:
            browser.close()
            process.terminate()
            process.wait(timeout=30)
    a, b, c = statistics.median(swept), statistics.median(unswept), statistics.median(by_kernel)
    print(f"(a) slider to a swept budget, repainted: {a:.3f} s (goal under 0.2 s, {'met' if a < 0.2 else 'NOT met'})")
    print(f"(b) slider to an unswept budget (partitioned again): {b:.3f} s; swept / unswept = {a / b:.2f}")
    print(
        f"(c) slider to a swept budget by the kernel's round trip: {c:.3f} s; made ahead / by the kernel = {a / c:.2f}"
    )
    d = statistics.median(neighbour)
    print(f"(d) slider one step on from a move, its neighbours partitioned ahead: {d:.3f} s; / unswept = {d / b:.2f}")


if __name__ == "__main__":
    main()
