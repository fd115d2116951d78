"""The memory-budget sweep on a 12-layer, width-768 transformer in fake mode, as the widget runs it (issue 24).

Baseline, in the same run: one partition at one budget (min-cut at 0.5 and the numbers a sweep point
carries), on a trace of its own, so that nothing is shared yet. Then, each on a fresh trace too:
(a) the 11-point sweep through the widget (`run_sweep`, points drawn as they come): goal at most 5 s or
    3x the baseline, whichever is larger;
(b) the first point drawn: the first `sweep_points` update after the sweep starts (goal within 1 s);
(c) with --unshared, the same sweep with nothing shared (core/reuse.py turned off): the speed-up;
(d) with --collector-on, the same sweep with Python's garbage collector left running during torch's work
    (core/trace.py TORCH_WORK pauses it): the speed-up;
(e) with --one-process, the same sweep with no worker process forked (`bwd_widgets/studio/forked.py`):
    the speed-up of the workers;
(f) with --splits-unshared, the same sweep with only the graphs of a saved set chosen again built anew
    (`core/reuse.py` `Splits` turned off): the speed-up of sharing them.
Run: .venv/bin/python bench/sweep_speed.py [--repeats 1] [--unshared] [--collector-on] [--one-process]
     [--splits-unshared]
"""

import argparse
import contextlib
import threading
import time
from unittest import mock

import torch

import bwd_widgets as bw
from bwd_widgets.core.trace import TORCH_WORK
from bwd_widgets.examples import Transformer

from _util import median, timed


def fresh(model, tokens):
    return bw.extract(model, tokens, mode="fake", cache=False)  # a trace of its own: nothing shared yet


def widget_sweep(extraction) -> tuple[float, float, int]:
    """(seconds in all, seconds to the first point drawn, points)."""
    widget = bw.show(extraction)
    arrivals = []
    widget.observe(lambda change: arrivals.append(time.perf_counter()), "sweep_points")
    started = time.perf_counter()
    result = widget.run_sweep()
    seconds = time.perf_counter() - started
    widget.session.ahead.stop_preparing()  # the swept payloads' preparation stops: the next measurement has the cores alone
    for thread in threading.enumerate():
        if thread.name == "bwd-widgets-prepare":
            thread.join()
    return seconds, arrivals[0] - started, len(result.points)


def splits_unshared():
    return mock.patch("bwd_widgets.core.reuse.Splits.made", lambda self, partition: partition())


@contextlib.contextmanager
def nothing_shared():
    with (
        mock.patch("bwd_widgets.core.reuse.MinCuts.sharing", lambda self: contextlib.nullcontext()),
        mock.patch("bwd_widgets.core.trace.counted_flops", lambda gm, kept: None),
        splits_unshared(),
    ):
        yield


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--unshared", action="store_true", help="also time the sweep with nothing shared")
    parser.add_argument("--collector-on", action="store_true", help="also time it with the collector running")
    parser.add_argument("--one-process", action="store_true", help="also time it with no worker process")
    parser.add_argument("--splits-unshared", action="store_true", help="also time it with min-cut's graphs unshared")
    args = parser.parse_args()
    with torch.device("meta"):
        model = Transformer(width=768, depth=12, heads=12, vocab=32000)
        tokens = torch.randint(0, 32000, (8, 512))
    ones, sweeps, firsts, unshared, collected, alone, built = [], [], [], [], [], [], []
    for _ in range(args.repeats):
        base = fresh(model, tokens)
        ones.append(timed(lambda base=base: bw.sweep(base, budgets=[0.5], progress=False)))
        seconds, first, points = widget_sweep(fresh(model, tokens))
        sweeps.append(seconds)
        firsts.append(first)
        if args.unshared:
            with nothing_shared():
                unshared.append(widget_sweep(fresh(model, tokens))[0])
        if args.collector_on:
            with mock.patch.object(TORCH_WORK, "pause_collector", False):
                collected.append(widget_sweep(fresh(model, tokens))[0])
        if args.one_process:
            with mock.patch("bwd_widgets.studio.forked.spare_cores", lambda: 0):
                alone.append(widget_sweep(fresh(model, tokens))[0])
        if args.splits_unshared:
            with splits_unshared():
                built.append(widget_sweep(fresh(model, tokens))[0])
    one, all_points, first = median(ones), median(sweeps), median(firsts)
    goal = max(5.0, 3 * one)
    print(f"one partition at budget 0.5 (with its sweep numbers): {one:.2f} s")
    print(
        f"(a) {points}-point sweep in the widget: {all_points:.2f} s = {all_points / one:.2f}x one partition "
        f"(goal: at most {goal:.1f} s, {'met' if all_points <= goal else 'NOT met'})"
    )
    print(f"(b) first point drawn after {first:.2f} s (goal within 1 s, {'met' if first <= 1 else 'NOT met'})")
    if unshared:
        print(
            f"(c) the same sweep with nothing shared: {median(unshared):.2f} s; shared is "
            f"{median(unshared) / all_points:.2f}x faster"
        )
    if collected:
        print(
            f"(d) the same sweep with the garbage collector running: {median(collected):.2f} s; paused is "
            f"{median(collected) / all_points:.2f}x faster"
        )
    if alone:
        print(
            f"(e) the same sweep in this process alone: {median(alone):.2f} s; with workers it is "
            f"{median(alone) / all_points:.2f}x faster"
        )
    if built:
        print(
            f"(f) the same sweep with min-cut's graphs built for every budget: {median(built):.2f} s; shared is "
            f"{median(built) / all_points:.2f}x faster"
        )


if __name__ == "__main__":
    main()
