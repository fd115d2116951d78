"""Helpers shared by the bench scripts: shared-data paths, timing, a bare capture baseline."""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

import bwd_widgets as bw

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(ROOT))
warnings.filterwarnings("ignore", category=FutureWarning)


def add_sample_arguments(parser) -> None:
    """`--samples ROOT` and `--list FILE`: the 16 shared samples by default, any other set (held-out ones) alike."""
    parser.add_argument("--samples", type=Path, help="samples root (default ../shared/graphnet_samples)")
    parser.add_argument(
        "--list", type=Path, help="sample paths relative to the root, one a line (default ROOT/dev_list.txt)"
    )


def chosen_samples(args) -> tuple[Path, list[str]]:
    root = args.samples or shared("graphnet_samples")
    listing = args.list or root / "dev_list.txt"
    names = [line.strip() for line in listing.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return root, names


def shared(*parts) -> Path:
    path = SHARED.joinpath(*parts)
    if not path.exists():
        raise SystemExit(f"{path} is missing: the benchmarks read ../shared next to the project root.")
    return path


def bare_capture(model, inputs, requires_grad):
    """The baseline: torch.compile with an aot_autograd backend that keeps the graphs, plus backward."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    inputs = [
        t.detach().requires_grad_(flag) if isinstance(t, torch.Tensor) else t for t, flag in zip(inputs, requires_grad)
    ]
    compiled = torch.compile(model, backend=aot_autograd(fw_compiler=keep, bw_compiler=keep), dynamic=False)
    out = compiled(*inputs)
    outs = [
        o for o in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(o, torch.Tensor) and o.requires_grad
    ]
    torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    torch._dynamo.reset()
    return graphs


def timed(fn) -> float:
    """Seconds for one call, with garbage collected before and the collector off during, as timeit does."""
    import gc

    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        fn()
        return time.perf_counter() - started
    finally:
        gc.enable()


def median(values):
    return statistics.median(values)


CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def browser_first_paints(extraction, chromium="/usr/bin/chromium", loads=3) -> list:
    """Milliseconds from the viewer's start to its first drawn graph, in headless Chromium."""
    import tempfile

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as folder, sync_playwright() as playwright:
        page_path = bw.to_html(extraction, Path(folder) / "view.html")
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 900})
        paints = []
        for _ in range(loads):
            page.goto(page_path.as_uri())
            page.wait_for_function(
                "Number(document.querySelector('.bwd-root')?.dataset.rendered || 0) > 0", timeout=60_000
            )
            paints.append(int(page.locator(".bwd-root").get_attribute("data-first-paint-ms")))
        browser.close()
    return paints
