"""Widget speed inside JupyterLab, kernel to painted pixels, on a 96-layer, width-1024 transformer's
backward graph (fake mode, about 10 k nodes).

A real JupyterLab server and Debian's headless Chromium run one notebook: a cell extracts the model,
another shows the widget, and is run again for each repeat (a fresh widget each time). Measured:
- the synced widget state (goal < 8 MB),
- first paint from `display()` in the kernel to the frame with the drawn graph on screen (goal < 2 s),
  and from the cell's start (the payload built too) to the same frame,
- opening a module by a click to its drawn frame: `blocks` (96 blocks appear), then one block
  (goal < 0.5 s),
- selecting a drawn node from the saved table (graph, table, code and details follow).
Medians of the repeats. The last widget is kept as docs/widget_big_model.png.
Run: .venv/bin/python bench/widget_speed.py [--depth 96 --width 1024 --repeats 3]
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import nbformat

from _util import CHROMIUM_ARGS, ROOT

SETUP = """import json, time
import torch
import bwd_widgets as bw
from bwd_widgets.examples import big_transformer_on_meta
from IPython.display import display
model = big_transformer_on_meta(depth={depth}, width={width}, heads={heads})
with torch.device("meta"):
    tokens = torch.randint(0, 32000, (8, 512))
started = time.time()
big = bw.extract(model, tokens, mode="fake")
print("extracted in", round(time.time() - started, 1), "s:", big.backward_node_count, "backward nodes")"""
SHOW = """started = time.time()
widget = bw.show(big)
state = sum(  # the payload goes as one binary buffer (a memoryview), the other traits as JSON
    v.nbytes if isinstance(v, memoryview) else len(json.dumps(v)) for k, v in widget.get_state().items() if not k.startswith("_")
)
shown = time.time()
display(widget)
with open("timing.jsonl", "a") as f:
    f.write(json.dumps({"started": started, "displayed": shown, "state": state}) + "\\n")"""
APP = "window.jupyterapp"
NEWEST = "document.querySelectorAll('.jp-CodeCell')[1]?.querySelector('.bwd-root')"
OPEN_GROUP = """async ([path]) => {
  const root = document.querySelectorAll('.jp-CodeCell')[1].querySelector('.bwd-root');
  const group = root.querySelector(`g.bwd-group[data-visible-id="group:${path}"]`);
  const before = Number(root.dataset.paintedAt);
  const clicked = performance.timeOrigin + performance.now();
  group.dispatchEvent(new MouseEvent('click', { bubbles: true }));
  while (Number(root.dataset.paintedAt) === before) await new Promise((r) => setTimeout(r, 5));
  return Number(root.dataset.paintedAt) - clicked;
}"""
SELECT = """() => {
  const root = document.querySelectorAll('.jp-CodeCell')[1].querySelector('.bwd-root');
  const drawn = new Set([...root.querySelectorAll('g.node')].map((g) => g.dataset.visibleId));
  const row = [...root.querySelectorAll('tr.bwd-row')].find((r) => drawn.has(r.dataset.name)) || root.querySelector('tr.bwd-row');
  row.click();
  return Number(root.dataset.selectMs);
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(folder: Path) -> tuple[subprocess.Popen, str]:
    """JupyterLab with an empty token, no news or update checks, the app exposed, every cell laid out."""
    config = folder / "config"
    (config / "labconfig").mkdir(parents=True)
    (config / "labconfig" / "page_config.json").write_text(
        json.dumps(
            {
                "exposeAppInBrowser": True,
                "disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True},
            }
        )
    )
    tracker = config / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}))
    port = _free_port()
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(config), JUPYTERLAB_SETTINGS_DIR=str(config / "settings"))
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1", "--allow-root"]
        + ["--ServerApp.token=", "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True"]
        + [f"--ServerApp.root_dir={folder}", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(180):
        try:
            urllib.request.urlopen(f"{url}/api/status", timeout=2)
            return process, url
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit("JupyterLab did not start in 90 s")


def open_notebook(browser, folder: Path, name: str, cells: list[str]):
    """Write `cells` as notebook `name` in `folder`, start JupyterLab there and open it in a 1,500 x 1,300
    page with its kernel connected; returns (page, the server process)."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(cell) for cell in cells]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, folder / name)
    process, url = start_lab(folder)
    try:
        page = browser.new_page(viewport={"width": 1500, "height": 1300})
        page.goto(f"{url}/lab/tree/{name}")
        kernel = f"{APP}.shell.currentWidget.sessionContext.session?.kernel"
        page.wait_for_function(f"{APP} && {APP}.shell.currentWidget && {kernel}", timeout=120_000)
        page.wait_for_function(f"{kernel}.connectionStatus === 'connected'", timeout=120_000)
    except BaseException:
        process.terminate()
        raise
    return page, process


def run_cell(page, index: int) -> None:
    page.evaluate(f"{APP}.shell.currentWidget.content.activeCellIndex = {index}")
    page.evaluate(f"{APP}.commands.execute('notebook:run-cell')")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=96)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as name, sync_playwright() as playwright:
        folder = Path(name)
        setup = SETUP.format(depth=args.depth, width=args.width, heads=max(1, args.width // 128))
        browser = playwright.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        page, process = open_notebook(browser, folder, "speed.ipynb", [setup, SHOW])
        try:
            run_cell(page, 0)
            page.wait_for_function(
                "document.querySelector('.jp-CodeCell .jp-OutputArea')?.innerText.includes('backward nodes')",
                timeout=600_000,
            )
            print(page.locator(".jp-CodeCell .jp-OutputArea").first.inner_text().strip())
            rows = []
            for repeat in range(args.repeats):
                run_cell(page, 1)
                page.wait_for_function(
                    f"{NEWEST}?.dataset.firstPaintedAt && Number({NEWEST}.dataset.firstPaintedAt) > (window.__last || 0)",
                    timeout=300_000,
                )
                painted = int(page.evaluate(f"window.__last = Number({NEWEST}.dataset.firstPaintedAt)"))
                lines = (folder / "timing.jsonl").read_text().splitlines()
                while len(lines) <= repeat:
                    time.sleep(0.1)
                    lines = (folder / "timing.jsonl").read_text().splitlines()
                kernel_side = json.loads(lines[repeat])
                root = page.locator(".jp-CodeCell").nth(1).locator(".bwd-root")
                rows.append(
                    {
                        "state_mb": kernel_side["state"] / 1e6,
                        "paint_from_display": painted / 1000 - kernel_side["displayed"],
                        "paint_from_cell": painted / 1000 - kernel_side["started"],
                        "visible": int(root.get_attribute("data-visible-nodes")),
                        "open_blocks": page.evaluate(OPEN_GROUP, ["blocks"]) / 1000,
                        "open_block": page.evaluate(OPEN_GROUP, [f"blocks.{args.depth // 2}"]) / 1000,
                        "select_ms": page.evaluate(SELECT),
                    }
                )
                print(f"repeat {repeat + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in rows[-1].items()))
            page.locator(".jp-CodeCell").nth(1).locator(".bwd-root").screenshot(
                path=str(ROOT / "docs" / "widget_big_model.png")
            )
        finally:
            browser.close()
            process.terminate()
            process.wait(timeout=30)

    def median(key):
        return statistics.median(row[key] for row in rows)

    print(f"synced widget state: {median('state_mb'):.2f} MB (goal < 8)")
    print(f"visible nodes at first paint: {rows[-1]['visible']}")
    print(f"first paint from display(): {median('paint_from_display'):.2f} s (goal < 2)")
    print(f"first paint from the cell's start (payload built too): {median('paint_from_cell'):.2f} s")
    print(f"opening `blocks` ({args.depth} blocks appear): {median('open_blocks'):.2f} s")
    print(f"opening one block: {median('open_block'):.2f} s (goal < 0.5)")
    print(f"selecting a drawn node: {median('select_ms'):.1f} ms")


if __name__ == "__main__":
    main()
