"""A GPT-2 small session in the widget, real mode: the kernel's memory at each step against its memory right
after the first extraction (issue 43, item 4).

The scenario a user ran into the OOM killer with (20.7 GB): transformers' GPT2LMHeadModel from its config
(12 layers, width 768, 124 M parameters, random weights, no download), tokens 4 x 256, real mode, in one
process as in a kernel:
  1. `w = bw.show(model, tokens)` (the first extraction): the reference RSS;
  2. the partitioner switched to min-cut, then the slider moved to 0.5 and to 0.3 (each move's neighbours
     are partitioned ahead in a thread, as in the widget);
  3. the Sweep button's work (`start_sweep`, 11 budgets, in its thread), then two slider moves;
  4. `bw.show(model, tokens, mode="fake")` on the same model;
  5. both widgets closed and deleted, `gc.collect()`; 6. `del model` (the trace cache holds models weakly, so
     their kept traces go with them); 7. glibc's `malloc_trim`: what comes back, against the RSS with the model
     built before any extraction, and the bytes of CPU tensors still alive beyond the tokens.
A thread samples the RSS every 0.1 s for the peak. Goal: the peak under 2x the RSS after step 1, and after
step 5 at most the RSS after step 1. It also times, in the kernel, the switch to min-cut and a slider move
before any sweep (goal: at most 0.25x the first extraction) and the sweep (goal: at most 3x), against the
first extraction in the same run.
Works on older commits too (`git worktree add /tmp/base <commit>`, then run this file from there), for the
same run's baseline.

    .venv/bin/python bench/session_memory.py [--layers 12] [--tokens 256]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import threading
import time
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


class PeakSampler:
    """The highest RSS seen since `reset`, sampled every 0.1 s in a thread."""

    def __init__(self) -> None:
        self.peak = rss_bytes()
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, rss_bytes())

    def reset(self) -> None:
        self.peak = rss_bytes()

    def stop(self) -> None:
        self._stop.set()


LAST: list = [None]


def timed(work: Callable[..., object], *args: object) -> float:
    """Seconds `work(*args)` takes; what it returns is kept in LAST[0]."""
    started = time.perf_counter()
    LAST[0] = work(*args)
    return time.perf_counter() - started


def tensor_bytes_alive(torch: object, kept: set) -> int:
    """Bytes of the distinct storages of CPU tensors still alive, less those of `kept` (modules and tensors)."""
    held = set()
    for item in kept:
        tensors = [*item.parameters(), *item.buffers()] if hasattr(item, "parameters") else [item]
        held |= {t.untyped_storage().data_ptr() for t in tensors}
    seen, total = set(), 0
    for obj in gc.get_objects():
        if not isinstance(obj, torch.Tensor) or obj.device.type != "cpu":  # type: ignore[attr-defined]
            continue
        try:
            storage = obj.untyped_storage()
            pointer = storage.data_ptr()
        except (RuntimeError, NotImplementedError):  # fake tensors and other subclasses without real storage
            continue
        if pointer and pointer not in held and pointer not in seen:
            seen.add(pointer)
            total += storage.nbytes()
    return total


def _join(name: str) -> None:
    for thread in threading.enumerate():
        if thread.name == name:
            thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=256)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import bwd_widgets as bw

    gc.collect()
    before = rss_bytes()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=args.layers, n_embd=768, n_head=12)).train()
    tokens = torch.randint(0, 50257, (4, args.tokens))
    gc.collect()
    sampler = PeakSampler()
    rows: list[tuple[str, float, int, int]] = []
    started = time.perf_counter()

    def step(label: str) -> None:
        gc.collect()
        rows.append((label, time.perf_counter() - started, rss_bytes(), sampler.peak))
        print(f"{label:45} {rows[-1][1]:7.1f} s  RSS {rows[-1][2] / 2**30:6.2f} GB  peak {rows[-1][3] / 2**30:6.2f} GB")

    print(f"GPT-2, {args.layers} layers, {sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters")
    step("model built")
    seconds = {"extraction": timed(bw.show, model, tokens)}
    widget = LAST[0]
    step("1. first extraction (real)")
    first = rows[-1][2]
    seconds["switch to min-cut"] = timed(setattr, widget, "partitioner", "min_cut")
    _join("bwd-widgets-neighbours")
    seconds["slider move, no sweep yet"] = timed(setattr, widget, "memory_budget", 0.5)
    _join("bwd-widgets-neighbours")
    widget.memory_budget = 0.3
    _join("bwd-widgets-neighbours")
    step("2. min-cut, slider 0.5 and 0.3, neighbours")
    sweeping = widget.start_sweep()
    assert sweeping is not None, widget.error
    seconds["sweep, 11 budgets"] = timed(sweeping.join)
    _join("bwd-widgets-prepare")
    assert widget.error == "", widget.error
    widget.memory_budget = 0.6
    widget.memory_budget = 0.65
    _join("bwd-widgets-neighbours")
    step("3. sweep of 11 budgets, two slider moves")
    fake = bw.show(model, tokens, mode="fake")
    step("4. the same model in fake mode")
    widget.close()  # ipywidgets keeps every widget alive until it is closed
    fake.close()
    del widget, fake
    step("5. both widgets closed and deleted, gc.collect()")
    left_with_model = tensor_bytes_alive(torch, {model, tokens})
    del model  # the trace cache holds a model weakly: its kept traces go with it
    step("6. del model, gc.collect()")
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # what glibc kept of the freed memory for later
    step("7. malloc_trim(0)")
    sampler.stop()
    left = tensor_bytes_alive(torch, {tokens})
    print(f"CPU tensors alive beyond the model and its tokens after step 5 (the kept traces): {left_with_model:,} B")
    print(f"CPU tensors alive beyond the tokens after del model: {left:,} B (goal 0)")
    for label, taken in seconds.items():  # the kernel's part: the browser's drawing comes on top
        print(f"{label:30} {taken:7.2f} s  / the first extraction {taken / seconds['extraction']:.2f}")
    peak = max(row[3] for row in rows)
    closed = next(row[2] for row in rows if row[0].startswith("5."))
    print(f"peak / after the first extraction: {peak / first:.2f} (goal under 2)")
    print(f"after closing the widgets / after the first extraction: {closed / first:.2f} (goal at most 1)")
    print(
        f"after del model and malloc_trim / with the model built, before any extraction: {rows[-1][2] / rows[0][2]:.2f}"
    )
    print(
        f"  (before the model was built: {before / 2**30:.2f} GB; what torch imports and compiles on first use stays)"
    )


if __name__ == "__main__":
    main()
