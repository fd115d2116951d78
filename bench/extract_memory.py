"""Real-mode peak memory and time: bw.extract against a bare capture of the same model.

The model: an 8-block, width-1024 transformer (about 100 M parameters), batch 8 x 256 tokens.
Each run is a fresh process (peak RSS is per process), alternating bare and ours; medians of
the runs and the ratios ours/bare. Goals: peak RSS at most 1.25x, time at most 1.15x.

    .venv/bin/python bench/extract_memory.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RUN = r"""
import json, resource, sys, time, warnings
warnings.filterwarnings("ignore")
import torch
sys.path.insert(0, {bench!r})
from _util import bare_capture
import bwd_widgets as bw
from bwd_widgets.examples import Transformer

torch.manual_seed(0)
model = Transformer(width=1024, depth=8, heads=16, vocab=2048)
tokens = torch.randint(0, 2048, (8, 256))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
if {which!r} == "ours":
    extraction = bw.extract(model, tokens)
    assert extraction.partitions[0].backward_inputs is not None
else:
    bare_capture(model, [tokens], [False])
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print("RESULT " + json.dumps({{"seconds": seconds, "peak_gb": peak / 2**20, "model_gb": base / 2**20,
      "parameters": sum(p.numel() for p in model.parameters())}}))
"""


def run(which: str) -> dict:
    code = RUN.format(bench=str(ROOT / "bench"), which=which)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise SystemExit(f"{which} run failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][7:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"bare": [], "ours": []}
    for round_number in range(args.rounds):
        for which in ("bare", "ours") if round_number % 2 == 0 else ("ours", "bare"):
            results[which].append(run(which))
            r = results[which][-1]
            print(
                f"round {round_number + 1} {which:4}: {r['seconds']:6.2f} s, peak RSS {r['peak_gb']:.2f} GB", flush=True
            )
    parameters = results["ours"][0]["parameters"]
    print(f"\nmodel: {parameters / 1e6:.0f} M parameters, batch 8 x 256; medians of {args.rounds} fresh processes each")
    for key, label, goal in (("peak_gb", "peak RSS (GB)", 1.25), ("seconds", "seconds", 1.15)):
        bare = statistics.median(r[key] for r in results["bare"])
        ours = statistics.median(r[key] for r in results["ours"])
        print(f"{label:14} bare {bare:6.2f}   bw.extract {ours:6.2f}   ratio {ours / bare:.2f}x (goal <= {goal}x)")


if __name__ == "__main__":
    main()
