"""A 2 GB TORCH_TRACE and a 2 GB memory snapshot opened in the widget inside JupyterLab, timed to the painted
frame (issue 47: the first region drawn within 10 s, the kernel under 1 GB).

The trace and the snapshot are `bench/trace_open.py --snapshot`'s (a real aot_eager run of the course Transformer
at budget 0.5, its log copied into `--ranks` rank logs up to `--size` bytes; the next step's profiler snapshot
followed by `bench/snapshot_open.py`'s simulated loop up to `--size` bytes). A real JupyterLab server and Debian's
headless Chromium run one notebook, its kernel started with bwd_widgets imported (as a user's is by then). Then,
twice, alternating:
  - the baseline cell reads the trace folder's and the snapshot's bytes once (the least any reader spends);
  - the cell a user types: `load = bw.load_trace(folder)`, `load[0].attach_snapshot(snapshot)`, `bw.show(load[0])`,
    timed from the cell's start to the frame with the region's graph painted (the widget's `firstPaintedAt`).
Then the kernel's peak RSS (VmHWM in its /proc status: torch and bwd_widgets imported, both opens done).
Run: .venv/bin/python bench/trace_widget_lab.py [--size 2e9] [--ranks 8] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from trace_open import big_snapshot, copied_regions, real_trace
from widget_speed import open_notebook, run_cell

from _util import CHROMIUM_ARGS

SETUP = """import json, os, time
import bwd_widgets as bw
from IPython.display import display
FOLDER, SNAPSHOT = {folder!r}, {snapshot!r}
def _log(**row):
    with open("timing.jsonl", "a") as f:
        f.write(json.dumps(row) + "\\n")
print("ready")"""
BASELINE = """started = time.time()
total = 0
for path in [*sorted(os.scandir(FOLDER), key=lambda e: e.name), SNAPSHOT]:
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            total += len(chunk)
_log(kind="bytes", seconds=time.time() - started, bytes=total)"""
OPEN = """started = time.time()
load = bw.load_trace(FOLDER)
region = load[0]
measured = region.attach_snapshot(SNAPSHOT)
widget = bw.show(region)
display(widget)
_log(kind="open", started=started, displayed=time.time(), regions=len(load), note=measured.notes[-1])"""
PEAK = """print([line for line in open("/proc/self/status") if line.startswith(("VmHWM", "VmRSS"))])"""
NEWEST = "document.querySelectorAll('.jp-CodeCell')[2]?.querySelector('.bwd-root')"


def _rows(folder: Path, count: int) -> list[dict]:
    timing = folder / "timing.jsonl"
    while not timing.exists() or len(timing.read_text().splitlines()) < count:
        time.sleep(0.1)
    return [json.loads(line) for line in timing.read_text().splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=float, default=2e9, help="bytes of trace, and of snapshot (default 2e9)")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--keep", type=Path, help="make the files here and keep them; reused when there")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as scratch, sync_playwright() as playwright:
        base = args.keep or Path(scratch)
        snapshot = base / "big_snapshot.pickle"
        if not snapshot.exists():
            log = real_trace(base / "real", base / "step_snapshot.pickle")
            copied_regions(log, base / "big", args.size, args.ranks)
            big_snapshot(base / "step_snapshot.pickle", snapshot, args.size)
        trace_bytes = sum(p.stat().st_size for p in (base / "big").iterdir())
        print(f"trace {trace_bytes / 1e9:.2f} GB in {args.ranks} logs, snapshot {snapshot.stat().st_size / 1e9:.2f} GB")
        lab = base / "lab"
        lab.mkdir(exist_ok=True)
        (lab / "timing.jsonl").unlink(missing_ok=True)
        setup = SETUP.format(folder=str(base / "big"), snapshot=str(snapshot))
        browser = playwright.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        page, process = open_notebook(browser, lab, "trace.ipynb", [setup, BASELINE, OPEN, PEAK])
        try:
            run_cell(page, 0)
            page.wait_for_function(
                "document.querySelector('.jp-CodeCell .jp-OutputArea')?.innerText.includes('ready')", timeout=300_000
            )
            logged = 0
            for repeat in range(2):
                run_cell(page, 1)
                logged += 1
                _rows(lab, logged)
                run_cell(page, 2)
                logged += 1
                page.wait_for_function(
                    f"{NEWEST}?.dataset.firstPaintedAt && Number({NEWEST}.dataset.firstPaintedAt) > (window.__last || 0)",
                    timeout=600_000,
                )
                painted = int(page.evaluate(f"window.__last = Number({NEWEST}.dataset.firstPaintedAt)")) / 1000
                baseline, opened = _rows(lab, logged)[-2:]
                drawn = painted - opened["started"]
                print(
                    f"round {repeat + 1}: bytes read once {baseline['seconds']:.2f} s; load_trace + attach_snapshot + "
                    f"bw.show to the painted graph {drawn:.2f} s ({drawn / baseline['seconds']:.1f}x), "
                    f"{opened['regions']} regions; {opened['note']}"
                )
            run_cell(page, 3)
            page.wait_for_function(
                "document.querySelectorAll('.jp-CodeCell')[3]?.querySelector('.jp-OutputArea')?.innerText.includes('VmHWM')",
                timeout=60_000,
            )
            print("kernel:", page.locator(".jp-CodeCell").nth(3).locator(".jp-OutputArea").inner_text().strip())
        finally:
            browser.close()
            process.terminate()
            process.wait(timeout=30)


if __name__ == "__main__":
    main()
