"""The 16 shared GraphNet samples: ours against GraphNet's own extractor, live; and batch throughput.

--race-peer: per sample, GraphNet's backward graph extractor (../shared/peer/run_backward_extractor.py,
    `--cuda-metas-to-cpu`, a fresh process per sample as GraphNet runs it, timed inside the process,
    imports excluded) and ours as `bwd-extract` runs it (one worker process per round, started and
    imported before the clock; a sample's seconds run from sending it to its three splits stored),
    alternating which goes first. Prints per-sample seconds, the ratio over the samples both extract
    (sum and median of per-sample ratios) and how many each extracts. `--rounds 3` gives medians over
    three alternating rounds. (`aot_share.py` runs ours in a fresh process per sample too.)
--race-peer-loop: the whole corpus as each tool's user runs it: GraphNet's loop (its extractor as a fresh
    process per sample, one after another, interpreter start-up and imports included, as GraphNet's
    scripts run it) against `bwd-extract --workers 2` (one command, its start-up included), on the same
    samples, alternating which goes first each round; wall seconds of each and their ratio (goal: ours at
    most 0.25x the peer's loop).
--workers-throughput: the whole batch (`bwd_widgets.batch.run`, worker start-up included, the client's
    imports not) with 1 worker, 2 workers and a local Dask cluster of 2 workers; samples per minute for
    each and the speed-up over one worker (goal: 2 workers >= 1.7x on a 2-core machine).

Run: .venv/bin/python bench/corpus_throughput.py --race-peer --race-peer-loop --workers-throughput --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bwd_widgets.batch as batch
from bwd_widgets.graphnet.writer import prepare_output

from _util import ROOT, add_sample_arguments, chosen_samples

PEER = ROOT.parent / "shared" / "peer" / "run_backward_extractor.py"
SAMPLE_TIMEOUT = 900


# --- one sample of ours, in this process (aot_share.py runs it in a fresh process per sample) -------


def run_ours_once(root: Path, name: str, out: Path) -> None:
    """Time one sample as a batch worker and the client do it, after the imports; print RESULT."""
    started = time.perf_counter()
    planned = batch.plan([root / name], out, root=root)
    prepare_output(planned.out)
    request = batch.make_request(planned, planned.jobs[0])
    result = batch.run_sample(request)
    if result["status"] == "ok":
        batch.store(planned.out, request, result)
    seconds = time.perf_counter() - started
    record = {"name": name, "status": result["status"], "seconds": seconds, "reason": result.get("reason", "")}
    print("RESULT " + json.dumps(record), flush=True)


def _in_fresh_process(command: list[str], name: str) -> dict:
    """RESULT of one process; none (an abort, a signal) is a crash."""
    try:
        finished = subprocess.run(command, capture_output=True, text=True, timeout=SAMPLE_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"name": name, "status": "timeout", "seconds": None, "reason": f"over {SAMPLE_TIMEOUT} s"}
    for line in finished.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    tail = (finished.stderr.strip().splitlines() or [""])[-1][:160]
    return {"name": name, "status": "crash", "seconds": None, "reason": f"exit {finished.returncode}: {tail}"}


class OursInBatch:
    """Ours as `bwd-extract` runs it: one worker process for the round (started, imports done, before the
    clock), a sample at a time; a sample's seconds are the client's wall time from sending it to its three
    splits stored. A worker that crashes is replaced, and the next sample pays the new one's warm-up."""

    def __init__(self, root: Path, names: list[str], out: Path):
        self.planned = batch.plan([root / n for n in names], out, root=root)
        prepare_output(self.planned.out)
        self.root = root
        self.worker: batch.WorkerProcess | None = None

    def run(self, name: str) -> dict:
        if self.worker is None or not self.worker.alive:
            self.worker = batch.WorkerProcess(threads=batch.cores())
            self.worker.wait_ready()
        job = next(j for j in self.planned.jobs if j.name == name)
        request = batch.make_request(self.planned, job)
        started = time.perf_counter()
        result = self.worker.run(request, SAMPLE_TIMEOUT)
        if result["status"] == "ok":
            batch.store(self.planned.out, request, result)
        seconds = time.perf_counter() - started
        return {"name": name, "status": result["status"], "seconds": seconds, "reason": result.get("reason", "")}

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()


def race(root: Path, names: list[str], rounds: int) -> None:
    ours: dict[str, list[dict]] = {n: [] for n in names}
    peer: dict[str, list[dict]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="bwd_race_") as scratch:
        for round_index in range(rounds):
            print(f"round {round_index + 1} of {rounds}", flush=True)
            in_batch = OursInBatch(root, names, Path(scratch) / f"ours_{round_index}")
            try:
                for index, name in enumerate(names):
                    peer_command = _peer_command(root, name, Path(scratch) / f"peer_{round_index}")
                    order = ["ours", "peer"] if (index + round_index) % 2 == 0 else ["peer", "ours"]
                    for who in order:
                        if who == "peer":
                            peer[name].append(_in_fresh_process(peer_command, name))
                        else:
                            ours[name].append(in_batch.run(name))
                    o, p = ours[name][-1], peer[name][-1]
                    print(f"  {name[-60:]:60} ours {_cell(o):>9}  graphnet {_cell(p):>9}", flush=True)
            finally:
                in_batch.close()
    report(names, ours, peer, rounds)


def _peer_command(root: Path, name: str, out: Path) -> list[str]:
    return [sys.executable, str(PEER), str(root), name, str(out), "--cuda-metas-to-cpu"]


def _peer_loop(root: Path, names: list[str], out: Path) -> tuple[float, int]:
    """GraphNet's way through a corpus: a fresh process per sample, one after another."""
    started, extracted = time.perf_counter(), 0
    for name in names:
        extracted += _in_fresh_process(_peer_command(root, name, out), name)["status"] == "ok"
    return time.perf_counter() - started, extracted


def _ours_batch(root: Path, names: list[str], out: Path, workers: int) -> tuple[float, int]:
    """`bwd-extract --workers N` as a user types it: one command, its start-up included."""
    listing = out.parent / f"{out.name}.list"
    listing.write_text("".join(f"{n}\n" for n in names))
    command = [sys.executable, "-m", "bwd_widgets", "--list", str(listing), "--root", str(root), "--out", str(out)]
    started = time.perf_counter()
    subprocess.run([*command, "--workers", str(workers)], capture_output=True, text=True, timeout=SAMPLE_TIMEOUT * 4)
    seconds = time.perf_counter() - started
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    return seconds, summary.get("counts", {}).get("ok", 0)


def race_loop(root: Path, names: list[str], rounds: int, workers: int = 2) -> None:
    walls: dict[str, list[float]] = {"graphnet loop": [], f"bwd-extract --workers {workers}": []}
    with tempfile.TemporaryDirectory(prefix="bwd_race_loop_") as scratch:
        for round_index in range(rounds):
            labels = list(walls) if round_index % 2 == 0 else list(reversed(walls))
            for label in labels:
                out = Path(scratch) / f"{'peer' if label.startswith('graphnet') else 'ours'}_{round_index}"
                if label.startswith("graphnet"):
                    seconds, extracted = _peer_loop(root, names, out)
                else:
                    seconds, extracted = _ours_batch(root, names, out, workers)
                walls[label].append(seconds)
                print(
                    f"round {round_index + 1}: {label:26} {seconds:6.1f} s, {extracted} of {len(names)} extracted",
                    flush=True,
                )
    peer, ours = (statistics.median(v) for v in walls.values())
    print(f"\nthe {len(names)} samples, median of {rounds} round(s), wall seconds of the whole corpus")
    print(f"graphnet loop {peer:.1f} s, bwd-extract --workers {workers} {ours:.1f} s, ratio {ours / peer:.2f}x")


def _cell(result: dict) -> str:
    return f"{result['seconds']:.2f} s" if result["status"] == "ok" else result["status"]


def _median_ok(results: list[dict]) -> float | None:
    """Median seconds over rounds, for a sample extracted in every round."""
    if any(r["status"] != "ok" for r in results):
        return None
    return statistics.median(r["seconds"] for r in results)


def report(names: list[str], ours: dict, peer: dict, rounds: int) -> None:
    print(f"\nper sample, median of {rounds} round(s), seconds after the imports (ours: in a batch worker)")
    print(f"{'sample':60} {'ours':>8} {'graphnet':>9} {'ratio':>7}")
    both, ratios = [], []
    for name in names:
        o, p = _median_ok(ours[name]), _median_ok(peer[name])
        ratio = f"{o / p:.2f}" if o is not None and p is not None else ""
        reason = "" if p is not None else f"  graphnet: {peer[name][-1]['reason'][:70]}"
        if o is None:
            reason += f"  ours: {ours[name][-1]['reason'][:70]}"
        print(
            f"{name[-60:]:60} {'-' if o is None else f'{o:.2f}':>8} {'-' if p is None else f'{p:.2f}':>9} {ratio:>7}{reason}"
        )
        if o is not None and p is not None:
            both.append((o, p))
            ratios.append(o / p)
    extracted_ours = sum(_median_ok(ours[n]) is not None for n in names)
    extracted_peer = sum(_median_ok(peer[n]) is not None for n in names)
    print(f"extracted: ours {extracted_ours} of {len(names)}, graphnet {extracted_peer} of {len(names)}")
    if both:
        total_ours, total_peer = sum(o for o, _ in both), sum(p for _, p in both)
        print(
            f"the {len(both)} both extract: ours {total_ours:.1f} s, graphnet {total_peer:.1f} s, "
            f"ratio (sum) {total_ours / total_peer:.2f}, median per-sample ratio {statistics.median(ratios):.2f}"
        )


# --- batch throughput -------------------------------------------------------------------------------


def throughput(root: Path, names: list[str], rounds: int) -> None:
    setups = {
        "1 worker": {"workers": 1},
        "2 workers": {"workers": 2},
        "Dask local, 2 workers": {"workers": 2, "scheduler": "local"},
    }
    seconds: dict[str, list[float]] = {label: [] for label in setups}
    with tempfile.TemporaryDirectory(prefix="bwd_throughput_") as scratch:
        for round_index in range(rounds):
            labels = list(setups) if round_index % 2 == 0 else list(reversed(setups))
            for label in labels:
                out = Path(scratch) / f"{label.replace(' ', '_').replace(',', '')}_{round_index}"
                planned = batch.plan([root / n for n in names], out, root=root)
                started = time.perf_counter()
                summary = batch.run(planned, progress=False, **setups[label])
                seconds[label].append(time.perf_counter() - started)
                ok = summary.counts["ok"]
                print(
                    f"round {round_index + 1}: {label:22} {seconds[label][-1]:6.1f} s, {ok} of {len(names)} ok",
                    flush=True,
                )
    one = statistics.median(seconds["1 worker"])
    print(f"\nthe {len(names)} samples, median of {rounds} round(s), wall seconds of the whole batch")
    for label in setups:
        wall = statistics.median(seconds[label])
        print(f"{label:22} {wall:6.1f} s  {len(names) / wall * 60:5.1f} samples/min  speed-up {one / wall:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--race-peer", action="store_true", help="ours against GraphNet's extractor, per sample")
    parser.add_argument("--race-peer-loop", action="store_true", help="the corpus: GraphNet's loop against bwd-extract")
    parser.add_argument("--workers-throughput", action="store_true", help="batch samples/min, 1 and 2 workers, Dask")
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds; medians are reported")
    add_sample_arguments(parser)
    args = parser.parse_args()
    root, names = chosen_samples(args)
    if not (args.race_peer or args.race_peer_loop or args.workers_throughput):
        args.race_peer = args.race_peer_loop = args.workers_throughput = True
    if args.race_peer:
        race(root, names, args.rounds)
    if args.race_peer_loop:
        race_loop(root, names, args.rounds)
    if args.workers_throughput:
        throughput(root, names, args.rounds)


if __name__ == "__main__":
    main()
