"""Repartitioning a kept joint graph, on a 12-layer, width-768 transformer in fake mode.

(a) a repartition against a full extraction with the same partitioner (goal: at most 0.5);
(b) a repartition against the bare partition_fn call on the same joint graph (goal: at most 1.1x);
(c) switching the widget's partitioner: the kernel's share (repartition and the new payload);
(d) a full 11-point memory-budget sweep;
(e) the trace cache on reruns without edits: how many of them reuse the kept trace (the bench's model in fake
    mode, and small course models in real mode, on both capture routes), and what a miss and a hit cost.
Alternating runs in one process; medians.   Run: .venv/bin/python bench/repartition.py [--repeats 5]
"""

import argparse
import time

import torch

import bwd_widgets as bw
from bwd_widgets.core.codegen import copy_graph_module
from bwd_widgets.examples import MLP, ConvBN, Transformer

from _util import browser_first_paints, median, timed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with torch.device("meta"):
        model = Transformer(width=768, depth=12, heads=12, vocab=32000)
        tokens = torch.randint(0, 32000, (8, 512))
    base = bw.extract(model, tokens, mode="fake")
    partition = base.partitions[0]
    trace = partition.trace
    print(f"joint graph: {sum(1 for _ in trace.joint.graph.nodes)} nodes")
    from functorch.compile import min_cut_rematerialization_partition

    def full():  # saved tensors are analysed lazily: ask for them, as any view does
        return bw.extract(model, tokens, mode="fake", partitioner="min_cut", cache=False).saved_tensors

    def again():
        return base.rerun("min_cut").saved_tensors

    def bare():
        joint = copy_graph_module(trace.joint)  # min-cut rewrites node metadata: each call needs a fresh copy
        return timed(lambda: min_cut_rematerialization_partition(joint, trace.joint_inputs, **trace.partition_kwargs))

    again(), bare()  # warm-up
    full_times, again_times, bare_times = [], [], []
    for _ in range(args.repeats):
        full_times.append(timed(full))
        again_times.append(timed(again))
        bare_times.append(bare())
    print(f"full extraction, min-cut: {median(full_times):.2f} s")
    print(f"repartition, min-cut:     {median(again_times):.2f} s")
    print(f"bare partition_fn call:   {median(bare_times):.2f} s")
    print(
        f"(a) repartition / full extraction: {median([a / f for a, f in zip(again_times, full_times)]):.2f} (goal <= 0.5)"
    )
    print(
        f"(b) repartition / bare partition_fn: {median([a / b for a, b in zip(again_times, bare_times)]):.2f} (goal <= 1.1)"
    )

    widget = bw.show(base)
    switches = []
    for partitioner in ("min_cut", "default", "min_cut", "default"):
        started = time.perf_counter()
        widget.partitioner = partitioner
        switches.append(time.perf_counter() - started)
    widget.memory_budget = 0.3
    widget.partitioner = "min_cut"
    paint = median(browser_first_paints(widget.extraction)) / 1000
    print(
        f"(c) widget partitioner switch: kernel {median(switches):.2f} s (repartition + payload), "
        f"browser {paint:.2f} s (layout and first paint of the new graph), "
        f"{median(switches) + paint:.2f} s in all (goal < 3)"
    )

    started = time.perf_counter()
    result = bw.sweep(base, progress=False)
    print(
        f"(d) 11-point memory-budget sweep: {time.perf_counter() - started:.1f} s, {len(result.pareto())} Pareto points"
    )

    cache_reruns(model, tokens, args.repeats)


def cache_reruns(model, tokens, reruns):
    """(e): each model extracted once, then `reruns` times with nothing changed; a hit reuses the kept trace."""
    torch.manual_seed(0)
    cases = [
        ("transformer 12x768, fake", model, (tokens,), "fake", {}),
        (
            "transformer 2x64, real",
            Transformer(width=64, depth=2, heads=4, vocab=100),
            (torch.randint(0, 100, (2, 16)),),
            "real",
            {},
        ),
        ("MLP, real", MLP(), (torch.randn(8, 16),), "real", {}),
        ("ConvBN, real", ConvBN(), (torch.randn(2, 3, 16, 16),), "real", {}),
        ("MLP, real, keyword input (Dynamo route)", MLP(), (), "real", {"x": torch.randn(8, 16)}),
    ]
    hits = total = 0
    for name, net, inputs, mode, keywords in cases:
        bw.clear_trace_cache()
        started = time.perf_counter()
        first = bw.extract(net, *inputs, mode=mode, **keywords)
        miss = time.perf_counter() - started
        found, times = 0, []
        for _ in range(reruns):
            started = time.perf_counter()
            again = bw.extract(net, *inputs, mode=mode, **keywords)
            times.append(time.perf_counter() - started)
            found += again.partitions[0].trace is first.partitions[0].trace
        hits, total = hits + found, total + reruns
        print(
            f"    {name}: {found} of {reruns} reruns hit; first call {miss:.2f} s, a rerun {median(times) * 1000:.0f} ms"
        )
    print(f"(e) trace cache on reruns without edits: {hits} of {total} hit")


if __name__ == "__main__":
    main()
