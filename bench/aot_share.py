"""How much of each extractor's time per sample is torch's `aot_module_simplified`, the call both make.

Per sample of the 16 shared samples, GraphNet's extractor (../shared/peer/run_backward_extractor.py,
`--cuda-metas-to-cpu`) and ours (one batch sample, as `corpus_throughput.py --cold` runs it), each in a
fresh process, alternating which goes first, imports excluded. Inside each process a timer wraps
`aot_module_simplified` (the peer's module-level name is wrapped from outside; its code is not changed).
Prints, per sample both extract: total and AOT seconds for both, and `floor` = our AOT seconds over the
peer's total: the ratio ours would reach if everything but AOT Autograd took no time at all.

Run: .venv/bin/python bench/aot_share.py --rounds 3
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _util import add_sample_arguments, chosen_samples

PEER = Path(__file__).resolve().parents[2] / "shared" / "peer"
TIMEOUT = 900


def _timed(owner: object, name: str, spent: list[float]) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    setattr(owner, name, timed)


def child(who: str, root: str, name: str, out: str) -> None:
    """One sample in this fresh process; prints the runner's RESULT line and then `AOT <seconds>`."""
    spent: list[float] = []
    if who == "peer":
        sys.path.insert(0, str(PEER))
        import graph_net.torch.sample_pass.backward_graph_extractor as peer_extractor
        import run_backward_extractor

        _timed(peer_extractor, "aot_module_simplified", spent)
        sys.argv = [str(PEER / "run_backward_extractor.py"), root, name, out, "--cuda-metas-to-cpu"]
        run_backward_extractor.main()
    else:
        from corpus_throughput import run_ours_once

        import bwd_widgets.core.capture as capture

        _timed(capture, "aot_module_simplified", spent)
        gc.collect()
        gc.freeze()  # as a batch worker does after its imports
        run_ours_once(Path(root), name, Path(out))
    print(f"AOT {sum(spent)}", flush=True)


def run_child(who: str, root: Path, name: str, out: str) -> dict:
    command = [sys.executable, __file__, "--child", who, str(root), name, out]
    try:
        finished = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"status": "timeout"}
    result = {"status": "crash"}
    for line in finished.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
        elif line.startswith("AOT "):
            result["aot"] = float(line.split()[1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds; medians are reported")
    add_sample_arguments(parser)
    parser.add_argument("--child", nargs=4, metavar=("WHO", "ROOT", "NAME", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    root, names = chosen_samples(args)
    runs: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bwd_aot_share_") as scratch:
        for round_index in range(args.rounds):
            for index, name in enumerate(names):
                order = ["ours", "peer"] if (index + round_index) % 2 == 0 else ["peer", "ours"]
                for who in order:
                    out = f"{scratch}/{who}_{round_index}"
                    runs.setdefault((who, name), []).append(run_child(who, root, name, out))
                print(f"round {round_index + 1}: {name}", flush=True)
    print(f"\nper sample both extract, medians of {args.rounds} round(s), seconds (imports excluded)")
    print(f"{'sample':48} {'peer':>6} {'p.AOT':>6} {'ours':>6} {'o.AOT':>6} {'ratio':>6} {'floor':>6}")
    ratios, floors, shares = [], [], []
    for name in names:
        both = [runs[(who, name)] for who in ("peer", "ours")]
        if any(r["status"] != "ok" for results in both for r in results):
            continue
        peer, peer_aot, ours, ours_aot = (
            statistics.median(r[key] for r in results) for results in both for key in ("seconds", "aot")
        )
        ratios.append(ours / peer)
        floors.append(ours_aot / peer)
        shares.append(peer_aot / peer)
        print(
            f"{name[-48:]:48} {peer:6.2f} {peer_aot:6.2f} {ours:6.2f} {ours_aot:6.2f} "
            f"{ours / peer:6.2f} {ours_aot / peer:6.2f}"
        )
    if ratios:
        print(
            f"medians over {len(ratios)} samples: ratio {statistics.median(ratios):.2f}, "
            f"floor {statistics.median(floors):.2f}, AOT share of the peer's time {statistics.median(shares):.2f}"
        )


if __name__ == "__main__":
    main()
