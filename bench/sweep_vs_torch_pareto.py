"""bwd_widgets' one-trace budget sweep against torch's own ways of getting the same answers (issue 45, item 5).

The same model, inputs and budgets, the sides alternating in one process (by default A T F B C, A T F B C, ...):

(A) `bw.sweep(model, tokens, budgets=..., progress=False, cache=False)` in real mode: one trace of its own
    (`cache=False`: no kept trace from an earlier repeat), then min-cut again at every budget. The cold number.
(B) torch, budget by budget: `torch.compile(model, backend="aot_eager")` called once per budget under
    `torch._functorch.config.patch(activation_memory_budget=b)`, Dynamo reset between, its saved set counted by a
    `saved_tensors_hooks` pack hook around the compiled call (each new storage once, parameters, buffers and
    inputs left out: the partition tests' own count, tests/compiled_saves.py). No
    backward is run: the saved set is fixed once the forward has run, so torch is spared the backward's compile.
    This is what a user without bwd_widgets does to learn what torch saves at N budgets.
(C) torch's Pareto mode as torch ships it: `PARTITIONER_MEMORY_BUDGET_PARETO=1` is read at import into
    `torch._functorch.config.visualize_memory_budget_pareto`; set here with `config.patch(...)` for one compile at
    `--pareto-budget`. Inside that one compile, `choose_saved_values_set` (torch/_functorch/partitioners.py)
    bisects the budget interval [0, 1] (down to 1e-3 wherever the knapsack's answer changes), running the
    knapsack and a min-cut at every probe, then plots (memory ratio, recompute runtime) with matplotlib into an
    SVG. It outputs that curve, not a saved set per chosen budget; it is reached only for a budget in (0, 1)
    that survives min-cut's early returns. matplotlib is not a dependency of this project: when it is not
    installed a stand-in module is put in `sys.modules` that records the plotted points and draws nothing, so
    torch's own computation runs to the end and only the drawing (which would make torch slower) is left out.
    Its saved set at its own budget is counted as in (B) and held against (A)'s point at that budget.

(F) for comparison only (not the issue's measure): the same sweep with `mode="fake"`, shapes only, nothing run (the
    widget's way for big models; it forks workers), its saved bytes held against (B) too.
(W) for comparison only: the same real-mode sweep from an extraction made before the timer starts
    (`bw.sweep(extraction, budgets=...)`, `bw.extract(model, tokens, cache=False)` untimed): what the widget's sweep
    button does, the model being traced already when it is shown. Its saved bytes are held against (B) too.
(U) for the breakdown only: (W) with min-cut's graphs built at every budget (`core/reuse.py` `Splits` off), where
    (W) builds them once per saved set that several budgets choose; (U) / (W) is what that sharing saves.
(T) for the breakdown only: `bw.extract(model, tokens, partitioner="min_cut", memory_budget=1.0, cache=False)`, the
    one trace (A) starts with; (A) - (T) is roughly what its further budgets cost.

(C) is unsteady from one version of this script to the next, nothing on its path changed: 53-64 s with the script as of
e492a58, 78-91 s with this one (torch 2.13.0, Python 3.11, 2026-12-06), the slow case with 24 s of system time
against 3.5 s. strace of the slow case shows some 4,500 pairs of 16 KiB mmap/munmap a second, the size of CPython
3.11's frame-stack chunk: a call depth that keeps crossing a chunk's edge allocates and frees it each time. Compare
(C) only within one run, and quote the ratio against torch's fast case too (docs/benchmarks.md).

Per budget the saved bytes of (A) and (B) are printed with EQUAL / DIFFER. At the defaults one repeat takes about
2.3 minutes on the 2-core machine (torch 2.13.0), so the default 2 repeats finish in about 5 minutes.
Run: .venv/bin/python bench/sweep_vs_torch_pareto.py [--repeats 2] [--depth 12 --width 768 --heads 12]
     [--vocab 50257 --batch 4 --seq 128] [--pareto-budget 0.1] [--sides ATFBC; W and U too where asked]
     [--workers N: for W and U]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import types
from unittest import mock

import torch

import bwd_widgets as bw
from bwd_widgets.examples import Transformer

from _util import ROOT, timed

sys.path.insert(0, str(ROOT / "tests"))
from compiled_saves import torch_compile_saved_bytes  # noqa: E402 - the tests' own count, one copy


class PlotRecorder:
    """A stand-in for `matplotlib.pyplot` (only when matplotlib is not installed): keeps what torch plots."""

    def __init__(self) -> None:
        self.points: list[tuple[float, float]] = []
        self.saved: list[str] = []

    def module(self) -> tuple[types.ModuleType, types.ModuleType]:
        recorder = self
        pyplot = types.ModuleType("matplotlib.pyplot")

        class Figure:
            def savefig(self, name: str, *args: object, **kwargs: object) -> None:
                recorder.saved.append(str(name))

        def plot(x: list[float], y: list[float], *args: object, **kwargs: object) -> None:
            recorder.points = list(zip(x, y))

        def nothing(*args: object, **kwargs: object) -> None:
            return None

        pyplot.plot = plot
        pyplot.gcf = Figure
        for name in ("figure", "annotate", "xlabel", "ylabel", "title", "grid", "show", "close"):
            setattr(pyplot, name, nothing)
        package = types.ModuleType("matplotlib")
        package.pyplot = pyplot
        return package, pyplot


@contextlib.contextmanager
def pareto_mode(recorder: PlotRecorder, probes: list[float]):
    """torch's Pareto mode on for one compile; counts the knapsack's probes (one per budget it tries)."""
    from torch._functorch import partitioners

    stand_in = importlib.util.find_spec("matplotlib") is None
    original = partitioners._optimize_runtime_with_given_memory

    def counted(joint_graph, memories, runtimes, max_memory, *rest, **kwargs):
        probes.append(float(max_memory))
        return original(joint_graph, memories, runtimes, max_memory, *rest, **kwargs)

    saved_modules = {name: sys.modules.get(name) for name in ("matplotlib", "matplotlib.pyplot")}
    partitioners._optimize_runtime_with_given_memory = counted
    if stand_in:
        sys.modules["matplotlib"], sys.modules["matplotlib.pyplot"] = recorder.module()
    try:
        with tempfile.TemporaryDirectory() as folder:
            yield {"visualize_memory_budget_pareto": True, "memory_budget_pareto_dir": folder}
    finally:
        partitioners._optimize_runtime_with_given_memory = original
        for name, module in saved_modules.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def timed_call(fn, *args: object, **kwargs: object) -> tuple[float, object]:
    """(seconds, result) of one call, timed as bench/_util.py `timed` does (garbage collected before, off during)."""
    result: list = []
    return timed(lambda: result.append(fn(*args, **kwargs))), result[0]


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--depth", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--budgets", default=",".join(f"{i / 10:g}" for i in range(11)))
    parser.add_argument("--pareto-budget", type=float, default=0.1)
    parser.add_argument("--sides", default="ATFBC", help="which sides to run, in this order each repeat")
    parser.add_argument("--workers", type=int, default=None, help="(W) and (U): forked workers (default: the sweep's)")
    args = parser.parse_args()
    budgets = [float(b) for b in args.budgets.split(",")]

    torch.manual_seed(0)
    model = Transformer(width=args.width, depth=args.depth, heads=args.heads, vocab=args.vocab)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq))
    params = sum(p.numel() for p in model.parameters())
    print(
        f"torch {torch.__version__}; Transformer(width={args.width}, depth={args.depth}, heads={args.heads}, "
        f"vocab={args.vocab}), {params / 1e6:.1f} M parameters, tokens {args.batch} x {args.seq}, real mode"
    )
    print(f"budgets {budgets}; Pareto compile at {args.pareto_budget}; repeats {args.repeats}; sides {args.sides}")
    print(f"load at start: {load()}", flush=True)

    seconds: dict[str, list[float]] = {"A": [], "T": [], "F": [], "W": [], "U": [], "B": [], "C": []}
    ours: list[list[int]] = []
    fake: list[list[int]] = []
    warm: list[list[int]] = []
    theirs: list[list[int]] = []
    pareto: list[tuple[int, int, int]] = []  # (saved bytes at its budget, knapsack probes, plotted points)

    for repeat in range(args.repeats):
        for side in args.sides:
            if side == "A":
                took, sweep = timed_call(bw.sweep, model, tokens, budgets=budgets, progress=False, cache=False)
                assert not sweep.interrupted and len(sweep.points) == len(budgets)
                ours.append([p.saved_activation_bytes for p in sweep.points])
                del sweep
            elif side == "F":
                took, sweep = timed_call(
                    bw.sweep, model, tokens, budgets=budgets, progress=False, cache=False, mode="fake"
                )
                assert not sweep.interrupted and len(sweep.points) == len(budgets)
                fake.append([p.saved_activation_bytes for p in sweep.points])
                del sweep
            elif side in "WU":
                shown = bw.extract(model, tokens, cache=False)  # untimed: the widget shows it before any sweep
                built = mock.patch("bwd_widgets.core.reuse.Splits.made", lambda self, partition: partition())
                with built if side == "U" else contextlib.nullcontext():
                    took, sweep = timed_call(bw.sweep, shown, budgets=budgets, progress=False, workers=args.workers)
                assert not sweep.interrupted and len(sweep.points) == len(budgets)
                warm.append([p.saved_activation_bytes for p in sweep.points])
                del sweep, shown
            elif side == "T":
                took, _ = timed_call(bw.extract, model, tokens, partitioner="min_cut", memory_budget=1.0, cache=False)
            elif side == "B":
                took, row = timed_call(lambda: [torch_compile_saved_bytes(model, (tokens,), {}, b) for b in budgets])
                theirs.append(row)
            elif side == "C":
                recorder, probes = PlotRecorder(), []
                with pareto_mode(recorder, probes) as patch:
                    took, saved = timed_call(
                        torch_compile_saved_bytes, model, (tokens,), {}, args.pareto_budget, **patch
                    )
                pareto.append((saved, len(probes), len(recorder.points)))
                if not probes:
                    print(
                        f"  (C) Pareto mode never ran at budget {args.pareto_budget}: min-cut returned "
                        "before the knapsack; pick another --pareto-budget"
                    )
            else:
                raise SystemExit(f"unknown side {side!r}: use A, T, F, W, U, B, C")
            seconds[side].append(took)
            print(f"repeat {repeat + 1} side {side}: {took:.2f} s", flush=True)

    print(f"load at end: {load()}")
    print()
    med = {side: statistics.median(v) for side, v in seconds.items() if v}
    names = {
        "A": "bw.sweep, cold (one trace + min-cut per budget)",
        "B": f"torch.compile aot_eager, one compile per budget ({len(budgets)})",
        "C": "torch Pareto mode, one compile",
        "F": "bw.sweep in fake mode, cold (shapes only, forked workers)",
        "W": "bw.sweep of an extraction made before (the widget's sweep button), real mode",
        "T": "bw.extract alone, cold (the sweep's one trace, min-cut at budget 1)",
        "U": "(W) with min-cut's graphs built at every budget (Splits off)",
    }
    for side, value in med.items():
        runs = ", ".join(f"{s:.2f}" for s in seconds[side])
        print(f"({side}) {names[side]}: median {value:.2f} s  [{runs}]")
    if "W" in med and "U" in med:
        print(f"sharing the graphs of a saved set chosen again: (U) / (W) = {med['U'] / med['W']:.2f}x")
    for ours_side in ("A", "F", "W", "U"):
        for side in ("B", "C"):
            if ours_side in med and side in med:
                print(f"speed-up of ({ours_side}) over ({side}): {med[side] / med[ours_side]:.2f}x")
    if pareto:
        saved, probes, points = pareto[-1]
        print(f"(C) knapsack probes per Pareto compile: {[p[1] for p in pareto]}; points plotted: {points}")

    if ours and theirs:
        print()
        print(f"{'budget':>7} {'bw.sweep saved B':>18} {'torch.compile saved B':>22}  verdict")
        differ = 0
        for i, budget in enumerate(budgets):
            a = {r[i] for r in ours}
            b = {r[i] for r in theirs}
            same = len(a) == 1 and a == b
            differ += not same
            delta = "" if same else f" (difference {max(b) - max(a):+,} B)"
            print(
                f"{budget:>7g} {','.join(f'{v:,}' for v in sorted(a)):>18} "
                f"{','.join(f'{v:,}' for v in sorted(b)):>22}  {'EQUAL' if same else 'DIFFER'}{delta}"
            )
        print(f"{len(budgets) - differ} of {len(budgets)} budgets EQUAL")
    for name, rows in (("F", fake), ("W", warm)):
        if rows and theirs:
            equal = sum(
                len({r[i] for r in rows}) == 1 and {r[i] for r in rows} == {r[i] for r in theirs}
                for i in range(len(budgets))
            )
            print(
                f"({name}) sweep against torch.compile: {equal} of {len(budgets)} budgets EQUAL"
                + ("" if equal == len(budgets) else f": ({name}) {rows[-1]} against torch {theirs[-1]}")
            )
    if ours and pareto and args.pareto_budget in budgets:
        a = ours[-1][budgets.index(args.pareto_budget)]
        c = {p[0] for p in pareto}
        print(
            f"Pareto compile's saved set at {args.pareto_budget:g}: {sorted(c)} B against bw.sweep {a:,} B: "
            f"{'EQUAL' if c == {a} else 'DIFFER'}"
        )


if __name__ == "__main__":
    main()
