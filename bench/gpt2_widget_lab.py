"""GPT-2 small in the widget inside JupyterLab, real mode: the partitioner switch, a slider move before any
sweep and the 11-budget sweep, each from the control's change to the frame with the redrawn graph, against
the first extraction in the same run (issue 43, item 5; the kernel-side half is bench/session_memory.py).

A real JupyterLab server and Debian's headless Chromium run one notebook. A cell builds transformers'
GPT2LMHeadModel from its config (12 layers, width 768, 124 M parameters, random weights, seed 0, training
mode as in session_memory.py) and tokens `torch.randint(0, 50257, (4, 256))`; the next cell is
`w = bw.show(model, tokens)` (real mode), timed from the cell's start to the frame with the drawn graph,
and the extraction alone (`extract` inside `bw.show`) in the kernel. Then, with the widget's own controls,
as a user (the value set, an `input` and a `change` event; a click):
  1. the partitioner menu to min-cut: change -> the frame after the graph pane drew the new payload;
  2. (the two neighbouring budgets the widget partitions ahead in a thread are waited for, as a user
     reads the graph), then the budget slider to 0.5, before any sweep: change -> redrawn frame;
  3. the Sweep button (11 budgets) on the partitions tab: click -> the frame with the 11th point drawn on
     the chart and the busy flag down (the graph shown does not change: its drawn nodes are counted);
  4. (the swept payloads prepared in the kernel's thread and the last neighbours are waited for) a slider
     move after the sweep to a swept budget (0.3), then to one the sweep did not visit (0.75).
Goals: 1 and 2 at most 0.25x the first extraction, 3 at most 3x. The ratio is taken against the extraction
alone as timed in the kernel (the strictest) and, beside it, against the cell's start to its painted graph.
Where the time goes: for each step the kernel's own timestamps (the change reaching the kernel,
partitioning, building and sending the payload: instance methods of the widget wrapped in the kernel, no
file changed) against the browser's (the change event, the layout worker's first request, the painted
frame; one clock, one machine). Also the kernel's RSS (its /proc status, sampled every 0.2 s, and with its
with it its forked children's own memory, USS: the sweep forks a worker per further core, in real mode too),
its peak (VmHWM), and the page's JS heap (`performance.memory`).
Run: .venv/bin/python bench/gpt2_widget_lab.py [--repeats 1] [--layers 12] [--tokens 256]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from slider_speed import IN_KERNEL
from widget_speed import open_notebook, run_cell

from _util import CHROMIUM_ARGS

SETUP = """import json, os, threading, time, warnings
warnings.filterwarnings("ignore")
import torch
from transformers import GPT2Config, GPT2LMHeadModel
import bwd_widgets as bw
from bwd_widgets.jupyter import widget as _widget_module
from IPython.display import display
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer={layers})).train()
tokens = torch.randint(0, 50257, (4, {tokens}))
_log_lock = threading.Lock()

def _log(name, start, end):
    with _log_lock, open("timing.jsonl", "a") as f:
        f.write(json.dumps({{"name": name, "start": start, "end": end}}) + "\\n")

def _timed(name, fn):
    def wrapped(*args, **kwargs):
        start = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            _log(name, start, time.time())
    return wrapped

_widget_module.extract = _timed("extract", _widget_module.extract)  # the name bw.show calls

def instrument(w):
    # the kernel's steps of a move (`_rerun` -> `_switch` -> `_partitioned`, `_show`) and of the sweep:
    # instance attributes, looked up at each call
    for name in ("_switch", "_partitioned", "_show", "run_sweep"):
        setattr(w, name, _timed(name, getattr(w, name)))

with open("kernel.pid", "w") as f:
    f.write(str(os.getpid()))
print("model built:", round(sum(p.numel() for p in model.parameters()) / 1e6), "M parameters")"""
SHOW = """started = time.time()
w = bw.show(model, tokens)
shown = time.time()
display(w)
_log("cell", started, shown)
instrument(w)"""
CELL = "document.querySelectorAll('.jp-CodeCell')[1]"
ROOT = f"{CELL}?.querySelector('.bwd-root')"
# Worker.prototype.postMessage counted: the graph pane's layout requests (Graphviz in a worker)
WATCH_WORKER = """() => {
  if (window.__posts) return;
  window.__posts = [];
  const post = Worker.prototype.postMessage;
  Worker.prototype.postMessage = function (...args) {
    window.__posts.push(performance.timeOrigin + performance.now());
    return post.apply(this, args);
  };
}"""
# `control`: the header's partitioner menu or budget slider; answers the change's and the painted frame's
# wall-clock ms, the layout requests between them and the pane's layoutMs
MOVE = """async ([control, value, limitMs]) => {
  const root = document.querySelectorAll('.jp-CodeCell')[1].querySelector('.bwd-root');
  const input = root.querySelector(control);
  const busy = root.querySelector('.bwd-busy');
  while (busy.style.display !== 'none') await new Promise((r) => setTimeout(r, 20));
  const before = root.dataset.paintedAt;
  window.__posts.length = 0;
  const moved = performance.timeOrigin + performance.now();
  input.value = String(value);
  input.dispatchEvent(new Event('input', { bubbles: true }));
  input.dispatchEvent(new Event('change', { bubbles: true }));
  while (root.dataset.paintedAt === before || Number(root.dataset.paintedAt) < moved) {
    if (performance.timeOrigin + performance.now() - moved > limitMs) throw new Error(`no repaint after ${control} = ${value}`);
    await new Promise((r) => setTimeout(r, 2));
  }
  return { moved, painted: Number(root.dataset.paintedAt), posts: [...window.__posts] };
}"""
# the Sweep button as a user presses it (its tab first); done when the chart holds every point, the
# progress reads n/n and the busy flag is down: the frame after that (two animation frames)
SWEEP = """async ([limitMs]) => {
  const root = document.querySelectorAll('.jp-CodeCell')[1].querySelector('.bwd-root');
  root.querySelector('button.bwd-tab-partitions').click();
  const button = root.querySelector('button.bwd-sweep-button');
  const progress = root.querySelector('.bwd-sweep-progress');
  const busy = root.querySelector('.bwd-busy');
  const paintedBefore = root.dataset.paintedAt;
  const clicked = performance.timeOrigin + performance.now();
  button.click();
  let firstPoint = null;
  for (;;) {
    const text = progress.textContent || '';
    const counted = /^(\\d+)\\/(\\d+)/.exec(text);
    const points = root.querySelectorAll('.bwd-sweep-point').length;
    if (points > 0 && firstPoint === null) firstPoint = performance.timeOrigin + performance.now();
    if (counted && counted[1] === counted[2] && points === Number(counted[2]) && busy.style.display === 'none') break;
    const failed = [...root.querySelectorAll('.bwd-error')].map((e) => e.textContent).join(' ').trim();
    if (failed) throw new Error(`sweep failed: ${failed}`);
    if (performance.timeOrigin + performance.now() - clicked > limitMs) throw new Error(`sweep not done: ${text}`);
    await new Promise((r) => setTimeout(r, 10));
  }
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const done = performance.timeOrigin + performance.now();
  const graph = root.querySelectorAll('g.node').length;
  return { clicked, firstPoint, done, progress: progress.textContent, points: root.querySelectorAll('.bwd-sweep-point').length,
           graphNodes: graph, repainted: root.dataset.paintedAt !== paintedBefore, error: root.querySelector('.bwd-error')?.textContent || '' };
}"""
HEAP = "() => performance.memory ? performance.memory.usedJSHeapSize : null"


def join(*names: str) -> str:
    """Kernel code: wait for the widget's threads of these names (made-ahead work a user's reading covers)."""
    return f"[t.join() for t in __import__('threading').enumerate() if t.name in {names!r}]"


class KernelMemory:
    """The kernel's RSS, and with it its forked children's own memory (USS: the pages a child does not share
    with the kernel), every 0.2 s, from /proc: peak and latest."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.process = psutil.Process(pid)
        self.peak = self.peak_with_children = 0
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def now(self) -> tuple[int, int]:
        import psutil

        own = self.process.memory_info().rss
        children = 0
        for child in self.process.children(recursive=True):
            try:
                children += child.memory_full_info().uss
            except psutil.Error:
                pass
        return own, own + children

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                own, total = self.now()
            except Exception:  # noqa: BLE001 - the kernel ended
                return
            self.peak, self.peak_with_children = max(self.peak, own), max(self.peak_with_children, total)

    def high_water(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) * 1024

    def stop(self) -> None:
        self._stop.set()


def kernel_log(folder: Path) -> list[dict]:
    path = folder / "timing.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def between(log: list[dict], name: str, start: float, end: float) -> list[dict]:
    """The kernel's `name` calls that began in [start, end] (seconds since the epoch)."""
    return [e for e in log if e["name"] == name and start <= e["start"] <= end]


def breakdown(log: list[dict], moved: float, painted: float, posts: list[float]) -> dict:
    """Where a move's time went, in seconds: the change reaching the kernel, partitioning, the payload built
    and sent, then the browser (transfer, decode and layout up to the paint); `posts` are the layout
    worker's requests (ms)."""
    switch = between(log, "_switch", moved - 0.2, painted)
    part = between(log, "_partitioned", moved - 0.2, painted)
    shown = between(log, "_show", moved - 0.2, painted)
    row = {"total": painted - moved}
    if switch:
        row["to kernel"] = switch[0]["start"] - moved
        row["partitioning"] = sum(e["end"] - e["start"] for e in part)
        row["payload built and sent"] = sum(e["end"] - e["start"] for e in shown)
        row["browser after the kernel"] = painted - switch[-1]["end"]
    else:
        row["(no kernel switch in the window)"] = 0.0
    if posts:
        if switch:
            row["  of which: kernel's send to the first layout request"] = posts[0] / 1000 - switch[-1]["end"]
        row["  of which: first layout request to the paint"] = painted - posts[0] / 1000
        row["layout requests"] = len(posts)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="whole scenarios, each in a fresh JupyterLab")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    runs = [scenario(args, repeat) for repeat in range(args.repeats)]
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2))


def scenario(args: argparse.Namespace, repeat: int) -> dict:
    from playwright.sync_api import sync_playwright

    load_before = os.getloadavg()
    print(f"run {repeat + 1}, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, load average {load_before}")
    limit_ms = 900_000
    out: dict = {"load_before": load_before}
    with tempfile.TemporaryDirectory() as name, sync_playwright() as playwright:
        folder = Path(name)
        browser = playwright.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        setup = SETUP.format(layers=args.layers, tokens=args.tokens)
        page, process = open_notebook(browser, folder, "gpt2.ipynb", [setup, SHOW])
        memory = None
        try:
            page.evaluate(WATCH_WORKER)

            def kernel(code: str) -> float:
                """Run `code` in the kernel (no cell); its seconds. Then let the page settle."""
                started = time.time()
                if failed := page.evaluate(IN_KERNEL, code):
                    raise SystemExit(f"{code}: {failed}")
                taken = time.time() - started
                page.wait_for_timeout(500)
                return taken

            run_cell(page, 0)
            page.wait_for_function(
                f"{CELL.replace('[1]', '[0]')}?.querySelector('.jp-OutputArea')?.innerText.includes('model built')",
                timeout=limit_ms,
            )
            print(page.locator(".jp-CodeCell").first.locator(".jp-OutputArea").inner_text().strip())
            memory = KernelMemory(int((folder / "kernel.pid").read_text()))
            rss_model = memory.now()[0]

            # the first extraction: the cell's start to the frame with the drawn graph
            run_cell(page, 1)
            page.wait_for_function(f"{ROOT}?.dataset.firstPaintedAt", timeout=limit_ms, polling=50)
            first_painted = int(page.evaluate(f"Number({ROOT}.dataset.firstPaintedAt)")) / 1000
            while not any(e["name"] == "cell" for e in kernel_log(folder)):
                time.sleep(0.1)
            log = kernel_log(folder)
            cell = next(e for e in log if e["name"] == "cell")
            extract = next(e for e in log if e["name"] == "extract")
            out["extraction (kernel, extract alone)"] = extract["end"] - extract["start"]
            out["bw.show in the kernel (extract + widget)"] = cell["end"] - cell["start"]
            out["first paint, cell start to painted graph"] = first_painted - cell["start"]
            out["first paint after bw.show returned"] = first_painted - cell["end"]
            out["nodes drawn at first paint"] = int(page.evaluate(f"Number({ROOT}.dataset.visibleNodes)"))
            rss_first = memory.now()[0]
            page.wait_for_timeout(1000)

            def step(label: str, control: str, value: object) -> None:
                moved = page.evaluate(MOVE, [control, value, limit_ms])
                result = breakdown(kernel_log(folder), moved["moved"] / 1000, moved["painted"] / 1000, moved["posts"])
                out[label] = result["total"]
                out[label + " (breakdown)"] = result
                print(
                    f"{label}: "
                    + ", ".join(
                        f"{k.strip()} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items()
                    )
                )

            step("switch to min-cut", "select.bwd-partitioner", "min_cut")
            out["neighbours made ahead after the switch (wait)"] = kernel(join("bwd-widgets-neighbours"))
            step("slider move to 0.5, before any sweep", "input.bwd-budget", 0.5)
            out["neighbours made ahead after the move (wait)"] = kernel(join("bwd-widgets-neighbours"))
            rss_before_sweep = memory.now()[0]

            swept = page.evaluate(SWEEP, [limit_ms])
            out["sweep, 11 budgets, click to the drawn chart"] = swept["done"] / 1000 - swept["clicked"] / 1000
            out["sweep: first point on the chart after the click"] = (
                swept["firstPoint"] / 1000 - swept["clicked"] / 1000 if swept["firstPoint"] else None
            )
            runs = between(kernel_log(folder), "run_sweep", swept["clicked"] / 1000 - 1, swept["done"] / 1000)
            if runs:
                out["sweep: run_sweep in the kernel"] = runs[0]["end"] - runs[0]["start"]
                out["sweep: click to run_sweep's start"] = runs[0]["start"] - swept["clicked"] / 1000
                out["sweep: run_sweep's end to the drawn chart"] = swept["done"] / 1000 - runs[0]["end"]
            print(
                f"sweep: {out['sweep, 11 budgets, click to the drawn chart']:.2f} s, progress {swept['progress']!r}, "
                f"{swept['points']} points, graph nodes drawn {swept['graphNodes']}, graph repainted {swept['repainted']}"
                + (f", error {swept['error']!r}" if swept["error"] else "")
            )
            out["sweep: graph nodes drawn at its end"] = swept["graphNodes"]
            rss_after_sweep = memory.now()[0]
            out["swept payloads prepared after the sweep (wait)"] = kernel(
                join("bwd-widgets-prepare", "bwd-widgets-neighbours")
            )
            step("slider move after the sweep, to a swept budget (0.3)", "input.bwd-budget", 0.3)
            kernel(join("bwd-widgets-neighbours"))
            step("slider move after the sweep, to an unswept budget (0.75)", "input.bwd-budget", 0.75)
            kernel(join("bwd-widgets-neighbours"))
            own, total = memory.now()
            out["kernel RSS: model built"] = rss_model
            out["kernel RSS: after the first extraction"] = rss_first
            out["kernel RSS: before the sweep"] = rss_before_sweep
            out["kernel RSS: after the sweep"] = rss_after_sweep
            out["kernel RSS: at the end"] = own
            out["kernel RSS: peak sampled"] = memory.peak
            out["kernel RSS plus its workers' own memory (USS): peak"] = memory.peak_with_children
            out["kernel VmHWM at the end"] = memory.high_water()
            out["page JS heap used at the end"] = page.evaluate(HEAP)
        finally:
            if memory is not None:
                memory.stop()
            browser.close()
            process.terminate()
            process.wait(timeout=30)
    out["load_after"] = os.getloadavg()
    report(out)
    return out


def report(out: dict) -> None:
    print()
    print(f"load average before {out['load_before']}, after {out['load_after']}")
    first = out["extraction (kernel, extract alone)"]
    shown = out["first paint, cell start to painted graph"]
    for key in (
        "extraction (kernel, extract alone)",
        "bw.show in the kernel (extract + widget)",
        "first paint, cell start to painted graph",
        "first paint after bw.show returned",
    ):
        print(f"{key:62} {out[key]:7.2f} s")
    print(f"{'nodes drawn at first paint':62} {out['nodes drawn at first paint']:7d}")
    goals = {
        "switch to min-cut": 0.25,
        "slider move to 0.5, before any sweep": 0.25,
        "sweep, 11 budgets, click to the drawn chart": 3.0,
        "slider move after the sweep, to a swept budget (0.3)": None,
        "slider move after the sweep, to an unswept budget (0.75)": None,
    }
    print(f"\n{'change -> redrawn graph':62} {'s':>7} {'/extract':>9} {'/1st paint':>10}  goal")
    for key, goal in goals.items():
        value = out[key]
        verdict = "" if goal is None else f"<= {goal}x  {'PASS' if value / first <= goal else 'FAIL'}"
        if goal is not None and (value / first <= goal) != (value / shown <= goal):
            verdict += f" (against the first paint: {'PASS' if value / shown <= goal else 'FAIL'})"
        print(f"{key:62} {value:7.2f} {value / first:8.2f}x {value / shown:9.2f}x  {verdict}")
    print()
    for key, value in out.items():
        if (
            key in goals
            or key.endswith("(breakdown)")
            or key.startswith("load")
            or key
            in (
                "extraction (kernel, extract alone)",
                "bw.show in the kernel (extract + widget)",
                "first paint, cell start to painted graph",
                "first paint after bw.show returned",
                "nodes drawn at first paint",
            )
        ):
            continue
        if "heap" in key:
            print(f"{key:62} {value / 2**20:7.0f} MB" if value is not None else f"{key:62}    n/a")
        elif "RSS" in key or "VmHWM" in key:
            print(f"{key:62} {value / 2**30:7.2f} GB" if value is not None else f"{key:62}    n/a")
        elif isinstance(value, float):
            print(f"{key:62} {value:7.2f} s")
        else:
            print(f"{key:62} {value}")


if __name__ == "__main__":
    main()
