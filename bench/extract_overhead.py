"""extract() against a bare torch.compile + aot_autograd capture of the same models.

Alternating runs in one process; prints each model's median ratio and the overall median.
Goal: at most 1.15x.    Run: .venv/bin/python bench/extract_overhead.py [--repeats N]
"""

import argparse

import torch

import bwd_widgets as bw
from bwd_widgets.examples import MLP, Transformer

from _util import bare_capture, median, shared, timed


def cases():
    conv_bn = bw.load_graphnet_sample(shared("reference", "conv_bn"))
    mobilenet = bw.load_graphnet_sample(shared("graphnet_samples", "torchvision", "mobilenet_v2"))
    torch.manual_seed(0)
    yield "conv_bn reference", conv_bn.module, conv_bn.inputs, conv_bn
    yield "MLP, 4 blocks", MLP(width=256, depth=4), [torch.randn(64, 256)], None
    yield (
        "transformer, 4 blocks",
        Transformer(width=128, depth=4, heads=4, vocab=512),
        [torch.randint(0, 512, (4, 64))],
        None,
    )
    yield "mobilenet_v2 (GraphNet sample)", mobilenet.module, mobilenet.inputs, mobilenet


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    ratios = []
    print(f"{'model':34} {'bare s':>8} {'extract s':>10} {'ratio':>7}")
    for label, model, inputs, sample in cases():

        def ours(sample=sample, model=model, inputs=inputs):
            if sample is not None:
                bw.extract(sample, cache=False)
            else:
                bw.extract(model, *inputs, requires_grad=True, cache=False)

        if sample is not None:
            flags = [bw.default_requires_grad(sample.original_names[m.name], t) for m, t in zip(sample.metas, inputs)]
        else:
            flags = [isinstance(t, torch.Tensor) and t.is_floating_point() for t in inputs]

        def bare(model=model, inputs=inputs, flags=flags):
            bare_capture(model, inputs, flags)

        ours(), bare()  # warm-up
        bare_times, our_times = [], []
        for _ in range(args.repeats):
            bare_times.append(timed(bare))
            our_times.append(timed(ours))
        ratio = median([o / b for o, b in zip(our_times, bare_times)])
        ratios.append(ratio)
        print(f"{label:34} {median(bare_times):8.3f} {median(our_times):10.3f} {ratio:7.3f}")
    print(f"median ratio extract/bare: {median(ratios):.3f} (goal <= 1.15)")


if __name__ == "__main__":
    main()
