"""Fake mode on a 32-layer, width-4096 transformer built on the meta device (about 6.4 B parameters).

Batch 8, sequence 512. Goal: under 30 s and under 2 GB peak RSS on a 2-core machine.
Run: .venv/bin/python bench/fake_big_model.py [--depth 32 --width 4096]
"""

import argparse
import resource
import time

import torch

import bwd_widgets as bw
from bwd_widgets.examples import big_transformer_on_meta

from _util import timed  # noqa: F401  (sets up the import path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=32)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    args = parser.parse_args()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    started = time.perf_counter()
    model = big_transformer_on_meta(depth=args.depth, width=args.width, heads=args.width // 128)
    with torch.device("meta"):
        tokens = torch.randint(0, 32000, (args.batch, args.seq))
    extraction = bw.extract(model, tokens, mode="fake")
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    parameters = sum(p.numel() for p in model.parameters())
    print(f"parameters: {parameters / 1e9:.2f} B (meta device)")
    print(f"seconds: {seconds:.1f} (goal < 30)")
    print(f"peak RSS: {peak:.2f} GB (goal < 2; {rss_before:.2f} GB after importing torch)")
    print(f"forward nodes: {extraction.forward_node_count}, backward nodes: {extraction.backward_node_count}")
    print(
        f"saved: {len(extraction.saved_tensors)} values, activations {extraction.saved_activation_bytes / 1e9:.1f} GB, "
        f"forward inputs kept {extraction.saved_input_bytes / 1e9:.1f} GB"
    )
    print("a real-mode run would need the parameters plus these activations in memory")


if __name__ == "__main__":
    main()
