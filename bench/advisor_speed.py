"""Advisor seconds in fake mode: the 6.7 B transformer at a 24 GB target, and a 12-layer width-768 one.

Beside each, one min-cut extraction's seconds (the advisor's own first step) as the reference ratio:
there is no other tool to race. Batch 8, sequence 512, vocabulary 32000. Goal: under 60 s for the 6.7 B model.
With --one-process, each model is advised a second time with no worker process forked (`bwd_widgets/studio/forked.py`),
the order alternating by model, and the speed-up of the workers printed.
Run: .venv/bin/python bench/advisor_speed.py [--only small|big|big-bf16] [--small-target BYTES] [--one-process]
"""

import argparse
import contextlib
import logging
import time
from unittest import mock

import torch

import bwd_widgets as bw
from bwd_widgets.examples import big_transformer_on_meta

from _util import timed  # noqa: F401  (sets up the import path)

MODELS = {
    "big": (32, 4096, 32, "24GB", torch.float32),
    "big-bf16": (32, 4096, 32, "16GB", torch.bfloat16),
    "small": (12, 768, 12, None, torch.float32),
}
"""Targets are activation memory (`peak_activation_only_bytes`): in float32 the 6.7 B model's gradients are
26.8 GB of the memory pane's peak but not of the target's (they are the step bill's, with optimizer=...)."""


def one(name, depth, width, heads, target, dtype, batch, seq, alone=False):
    model = big_transformer_on_meta(depth=depth, width=width, heads=heads).to(dtype)
    with torch.device("meta"):
        tokens = torch.randint(0, 32000, (batch, seq))
    parameters = sum(p.numel() for p in model.parameters()) / 1e9
    started = time.perf_counter()
    reference = bw.extract(model, tokens, mode="fake", partitioner="min_cut", memory_budget=1.0)
    extract_seconds = time.perf_counter() - started
    bw.clear_trace_cache()  # the advisor traces for itself
    target = target or int(reference.peak_activation_only_bytes * 0.5)
    no_workers = (
        mock.patch("bwd_widgets.studio.advisor.default_workers", lambda mode: 0) if alone else contextlib.nullcontext()
    )
    started = time.perf_counter()
    with no_workers:
        advice = bw.advise(model, tokens, target=target, mode="fake", progress=False)
    seconds = time.perf_counter() - started
    how = "one process" if alone else "with workers"
    print(f"== {name} ({how}): {depth} layers x width {width}, {parameters:.2f} B parameters, {dtype}, target {target}")
    print(advice)
    best = advice.best
    verified = (
        f"none fits: {advice.why}"
        if best is None
        else f"{best.label}: verified activation peak {best.verified_peak_bytes / 1e9:.2f} GB"
    )
    print(
        f"advisor seconds: {seconds:.1f}; one min-cut extraction: {extract_seconds:.1f} s "
        f"(ratio {seconds / extract_seconds:.1f}); {len(advice.tried)} plans tried; best {verified}; "
        f"min-cut 1.0: whole peak {reference.peak_activation_bytes / 1e9:.2f} GB, activation-only "
        f"{reference.peak_activation_only_bytes / 1e9:.2f} GB"
    )
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(MODELS))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--small-target", type=int, help="bytes for the 12-layer model (default: half its peak)")
    parser.add_argument("--one-process", action="store_true", help="also advise with no worker process, alternating")
    args = parser.parse_args()
    logging.getLogger("torch").setLevel(logging.ERROR)  # torch's reminder about in-place ops under context_fn
    chosen_models = [(n, m) for n, m in MODELS.items() if args.only in (None, n)]
    for turn, (name, (depth, width, heads, target, dtype)) in enumerate(chosen_models):
        chosen = args.small_target if name == "small" and args.small_target else target
        order = [False, True] if turn % 2 == 0 else [True, False]
        seconds = {
            alone: one(name, depth, width, heads, chosen, dtype, args.batch, args.seq, alone)
            for alone in (order if args.one_process else [False])
        }
        if args.one_process:
            print(
                f"{name}: {seconds[True]:.1f} s in one process, {seconds[False]:.1f} s with workers: "
                f"{seconds[True] / seconds[False]:.2f}x faster"
            )


if __name__ == "__main__":
    main()
