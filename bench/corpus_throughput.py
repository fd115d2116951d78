"""Seconds per sample of the batch extraction over the 16 shared GraphNet samples.

Real mode, default partitioner, one process, torch import excluded: the same loop
`bwd-extract` runs (load, extract, write both samples). Compared with GraphNet's own
backward graph extractor as measured on this machine (seconds inside the process).
Run: .venv/bin/python bench/corpus_throughput.py
"""

import tempfile
import time

from bwd_widgets.cli import build_parser, extract_one

from _util import shared

GRAPHNET_SECONDS = {  # GraphNet's extractor, measured here on CPU (from the issue)
    "transformers-auto-model/hf-tiny-model-private_tiny-random-DebertaForSequenceClassification": 2.84,
    "transformers-auto-model/hf-tiny-model-private_tiny-random-LEDForSequenceClassification": 1.99,
    "timm/test_byobnet.r160_in1k": 2.07,
    "transformers-auto-model/hf-tiny-model-private_tiny-random-TimesformerForVideoClassification": 5.32,
    "timm/rexnet_100.nav_in1k": 7.62,
    "timm/semnasnet_075.rmsp_in1k": 4.95,
    "timm/test_efficientnet.r160_in1k": 1.61,
    "torchvision/mobilenet_v2": 5.57,
    "torchvision/lraspp_mobilenet_v3_large": 7.70,
    "mmpose/simcc_mobilenetv2": 4.02,
    "mmpose/rtmpose-t": 5.02,
}


def main():
    root = shared("graphnet_samples")
    names = [line.strip() for line in (root / "dev_list.txt").read_text().splitlines() if line.strip()]
    with tempfile.TemporaryDirectory() as out:
        args = build_parser().parse_args(["--out", out, "x"])
        ours = {}
        for name in names:
            started = time.perf_counter()
            try:
                record = extract_one(name, root / name, args)
                status = f"ok, {record['graphs']} graph(s)"
            except Exception as error:
                status = f"error: {error}"
            ours[name] = time.perf_counter() - started
            theirs = GRAPHNET_SECONDS.get(name)
            print(
                f"{name[-58:]:58} {ours[name]:6.2f}s  graphnet {f'{theirs:.2f}s' if theirs else 'failed':>8}  {status}"
            )
    common = [n for n in names if n in GRAPHNET_SECONDS]
    others = [n for n in names if n not in GRAPHNET_SECONDS]
    total, baseline = sum(ours[n] for n in common), sum(GRAPHNET_SECONDS[n] for n in common)
    print(
        f"the {len(common)} samples GraphNet extracts: ours {total:.1f} s, GraphNet {baseline:.1f} s, ratio {total / baseline:.2f} (goal <= 1.0)"
    )
    print(f"the other {len(others)} (GraphNet fails on them): ours {sum(ours[n] for n in others):.1f} s")
    print(f"all {len(names)}: {sum(ours.values()) / len(names):.2f} s per sample")


if __name__ == "__main__":
    main()
