"""How long a large TORCH_TRACE takes to open, and the memory it takes: issue 47's goal is a 2 GB trace whose
first region is drawn within 10 s, the kernel under 1 GB.

A real trace is made here first (the course Transformer under `torch.compile` with Inductor at budget 0.5 and
AOT_PARTITIONER_DEBUG=1: every entry a real run writes, Inductor's code, guards and min-cut's information
included), then copied into a folder of `--ranks` logs up to `--size` bytes, each copy of its region under a
new frame id, as a long run with many compiled regions writes them. Each measure runs in a fresh process:

- first region: `bw.load_trace(folder, ...)`'s first region built and its widget payload made;
- the whole folder: every region listed;
- the baseline in the same run: reading the folder's bytes once (`cat`-like), the least any reader spends.

With `--snapshot`, a memory snapshot beside the trace, as a user brings both from a run: the real run is then
the course Transformer under `torch.compile` with aot_eager at budget 0.5, its next step recorded by the profiler
(`_memory_viz._profile_to_snapshot`, what `_dump_snapshot` writes of a CPU run); the snapshot file is that step
followed by `bench/snapshot_open.py`'s simulated training loop up to `--size` bytes. The measure is then
`bw.load_trace`'s first region built, the snapshot attached to it (`TraceRegion.attach_snapshot`, streamed) and its
widget payload (graph and memory tab) made. (aot_eager: the profiler's CPU snapshot does not list the buffers only
Inductor's C++ kernels write, so an Inductor region pairs only in part in it.)

Run: `python bench/trace_open.py [--size 2e9] [--ranks 8] [--keep DIR] [--snapshot]`.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from snapshot_open import write_snapshot  # noqa: E402 - the snapshot bench's writer, after its path
from torch_trace_runs import STEP_WITH_SNAPSHOT, copied_regions, run_traced  # noqa: E402 - the tests' own, after its path

MAKE = """
import sys, torch
sys.path.insert(0, sys.argv[1])
from compiled_saves import counted_saves
from bwd_widgets.examples import Transformer
torch.manual_seed(0)
counted_saves(Transformer(), (torch.randint(0, 64, (2, 8)),), backend="inductor", budget=0.5)
"""


def real_trace(folder: Path, snapshot: Path | None = None) -> Path:
    """The real run's one log: Inductor's (MAKE), or given `snapshot`, aot_eager's with its next step's memory
    snapshot written there (the tests' `STEP_WITH_SNAPSHOT`)."""
    if snapshot is None:
        env = dict(os.environ, TORCH_TRACE=str(folder), AOT_PARTITIONER_DEBUG="1")
        subprocess.run([sys.executable, "-c", MAKE, str(ROOT / "tests")], env=env, check=True, capture_output=True)
    else:
        run_traced(folder, STEP_WITH_SNAPSHOT, "aot_eager", "0.5", str(snapshot), env={"AOT_PARTITIONER_DEBUG": "1"})
    (log,) = folder.iterdir()
    return log


def big_snapshot(step: Path, out: Path, size: float) -> int:
    """The real step's events, then the simulated loop's, up to `size` bytes; the events written."""
    with step.open("rb") as f:
        recorded = pickle.load(f)  # made here, by this bench's own run
    first = [dict(event, site=-1 - i) for i, event in enumerate(recorded["device_traces"][0])]
    return write_snapshot(out, size, first_events=first)["events"]


MEASURE = """
import json, resource, sys, time
started = time.perf_counter()
what, folder = sys.argv[1], sys.argv[2]
if what == "bytes":
    total = 0
    for path in sorted(__import__("pathlib").Path(folder).iterdir()):
        with path.open("rb") as f:
            while chunk := f.read(1 << 22):
                total += len(chunk)
    result = {"bytes": total}
else:
    import bwd_widgets as bw
    from bwd_widgets.views.memory_payload import memory_payload
    from bwd_widgets.views.payload import graph_payload
    load = bw.load_trace(folder)
    region = load[0]
    if what == "trace+snapshot":
        measured = region.attach_snapshot(sys.argv[3])
        memory_payload(region)
        result = {"paired": measured.paired, "saved_paired": measured.saved_paired, "note": measured.notes[-1]}
    else:
        result = {}
    graph_payload(region)
    result.update(regions=len(load), refused=len(load.refused), first_drawn_s=time.perf_counter() - started)
result["seconds"] = time.perf_counter() - started
result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(result))
"""


def measure(what: str, folder: Path, *more: str) -> dict:
    command = [sys.executable, "-c", MEASURE, what, str(folder), *more]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=float, default=2e9, help="bytes of trace to open (default 2e9)")
    parser.add_argument("--ranks", type=int, default=8, help="logs, one per rank (default 8)")
    parser.add_argument("--keep", type=Path, help="make the folder here and keep it (default: a temporary one)")
    parser.add_argument("--snapshot", action="store_true", help="open a snapshot of --size bytes with the trace")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        base = args.keep or Path(scratch)
        started = time.perf_counter()
        step = base / "step_snapshot.pickle" if args.snapshot else None
        log = real_trace(base / "real", step)
        copies = copied_regions(log, base / "big", args.size, args.ranks)
        size = sum(p.stat().st_size for p in (base / "big").iterdir())
        kind = "aot_eager" if args.snapshot else "Inductor"
        print(
            f"made {size / 1e9:.2f} GB: {copies} copies of a {log.stat().st_size / 1e6:.2f} MB real {kind} trace "
            f"over {args.ranks} logs in {time.perf_counter() - started:.0f} s"
        )
        what, more = ("trace", [])
        if step is not None:
            events = big_snapshot(step, base / "big_snapshot.pickle", args.size)
            snapshot_bytes = (base / "big_snapshot.pickle").stat().st_size
            print(f"made a {snapshot_bytes / 1e9:.2f} GB snapshot, {events} events, the real step's first")
            what, more = "trace+snapshot", [str(base / "big_snapshot.pickle")]
        for _ in range(2):  # alternating, the baseline first
            read, opened = measure("bytes", base / "big"), measure(what, base / "big", *more)
            print("bytes read once:", read)
            print("load_trace, first region's payload:", opened)
            print(
                f"first region drawn in {opened['first_drawn_s']:.2f} s, {opened['first_drawn_s'] / read['seconds']:.1f}x "
                f"the bytes read once; peak RSS {opened['peak_rss_mb']:.0f} MB (goal: under 10 s and 1 GB)"
            )


if __name__ == "__main__":
    main()
