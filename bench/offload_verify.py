"""What verifying an offload plan costs: its pasted hooks around an eager step over fake tensors on the stand-in
device (`core/eager_memory.py`), against one min-cut extraction of the same model in fake mode (the advisor's
own first step), alternating in the same run. Batch 8, sequence 512, vocabulary 32000.
Run: .venv/bin/python bench/offload_verify.py [--only big|small] [--rounds 3]
"""

import argparse
import statistics
import time

import torch

import bwd_widgets as bw
from bwd_widgets.core.eager_memory import eager_step_memory
from bwd_widgets.examples import big_transformer_on_meta
from bwd_widgets.studio.advisor.code import offload_code

from _util import timed  # noqa: F401  (sets up the import path)

MODELS = {"big": (32, 4096, 32), "small": (12, 768, 12)}


def race(name: str, depth: int, width: int, heads: int, rounds: int) -> None:
    model = big_transformer_on_meta(depth=depth, width=width, heads=heads)
    with torch.device("meta"):
        tokens = torch.randint(0, 32000, (8, 512))
    namespace = {"model": model}
    exec(offload_code(1 << 20), namespace)  # saved tensors of 1 MiB or more go to the CPU
    seconds: dict[str, list[float]] = {"verify": [], "extract": []}
    step = None
    for turn in range(rounds):
        for label in ("verify", "extract") if turn % 2 == 0 else ("extract", "verify"):
            started = time.perf_counter()
            if label == "verify":
                step = eager_step_memory(model, (tokens,), hooks=namespace["offload"])
            else:
                bw.clear_trace_cache()
                bw.extract(model, tokens, mode="fake", partitioner="min_cut")
            seconds[label].append(time.perf_counter() - started)
    ours, baseline = statistics.median(seconds["verify"]), statistics.median(seconds["extract"])
    print(
        f"{name} ({depth} x {width}): offload verification {ours:.2f} s, one fake min-cut extraction "
        f"{baseline:.2f} s (medians of {rounds}, alternating): ratio {ours / baseline:.2f}; {step}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(MODELS))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for name, (depth, width, heads) in MODELS.items():
        if args.only in (None, name):
            race(name, depth, width, heads, args.rounds)


if __name__ == "__main__":
    main()
