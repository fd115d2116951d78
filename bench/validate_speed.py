"""GraphNet's validation of written samples: `bwd-extract --validate`'s steps against GraphNet's validator, live.

The first `--count` samples of the list (default: the 16 shared samples' list) are written once by bwd-extract
(not timed). Then, per round, for every written `train_forward` and `train_backward` folder, alternating which
goes first:
- ours: `bw.validate_sample(folder)` in this process, torch and bwd_widgets already imported, as in a batch
  worker;
- GraphNet: `python -m graph_net.torch.validate --model-path FOLDER --no-check-redundancy --workspace WS`
  run from ../shared/peer, wall clock (it starts three Python processes per sample, as GraphNet runs it).
Each side gets its own copy of the folder. Prints seconds per folder, the ratio ours/GraphNet's, and its median
and the ratio of the sums; both must agree on the hash.

Run: .venv/bin/python bench/validate_speed.py --rounds 3
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bwd_widgets as bw
from bwd_widgets.cli import main as bwd_extract
from bwd_widgets.graphnet.writer import TRAIN_SPLITS

from _util import add_sample_arguments, chosen_samples, shared


def graphnet_validate(peer: Path, folder: Path, workspace: Path) -> float:
    started = time.perf_counter()
    command = [sys.executable, "-m", "graph_net.torch.validate", "--model-path", str(folder)]
    command += ["--no-check-redundancy", "--workspace", str(workspace)]
    run = subprocess.run(command, cwd=peer, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    if run.returncode != 0:
        raise SystemExit(f"GraphNet's validator failed on {folder}: {run.stderr[-400:]}")
    return seconds


def ours_validate(folder: Path) -> float:
    started = time.perf_counter()
    outcome = bw.validate_sample(folder, use_graphnet=False)
    seconds = time.perf_counter() - started
    if not outcome.passed:
        raise SystemExit(f"our validation failed on {folder}: {outcome.failure}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_sample_arguments(parser)
    parser.add_argument("--count", type=int, default=3, help="samples to write and validate (default 3)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root, names = chosen_samples(args)
    peer = shared("peer")
    with tempfile.TemporaryDirectory(prefix="validate_speed_") as scratch:
        out = Path(scratch) / "out"
        written = bwd_extract([*(str(root / n) for n in names[: args.count]), "--root", str(root), "--out", str(out)])
        if written != 0:
            raise SystemExit("bwd-extract failed on a chosen sample: choose others with --list.")
        folders = [p.parent for split in TRAIN_SPLITS for p in sorted((out / split).rglob("graph_net.json"))]
        ours: dict[Path, list[float]] = {f: [] for f in folders}
        theirs: dict[Path, list[float]] = {f: [] for f in folders}
        hashes: dict[Path, set[str]] = {f: set() for f in folders}
        for round_ in range(args.rounds):
            for index, folder in enumerate(folders):
                copies = {}
                for side in ("ours", "graphnet"):
                    copies[side] = Path(scratch) / f"r{round_}" / side / str(index) / folder.name
                    shutil.copytree(folder, copies[side])
                order = ["ours", "graphnet"] if (round_ + index) % 2 == 0 else ["graphnet", "ours"]
                for side in order:
                    if side == "ours":
                        ours[folder].append(ours_validate(copies[side]))
                    else:
                        workspace = Path(scratch) / f"ws{round_}_{index}"
                        theirs[folder].append(graphnet_validate(peer, copies[side], workspace))
                    hashes[folder].add((copies[side] / "graph_hash.txt").read_text())
        print(f"{'sample folder':70} {'ours s':>8} {'GraphNet s':>10} {'ratio':>6}  hash")
        ratios = []
        for folder in folders:
            mine, their = statistics.median(ours[folder]), statistics.median(theirs[folder])
            ratios.append(mine / their)
            same = "same" if len(hashes[folder]) == 1 else "DIFFERENT"
            name = folder.relative_to(out).as_posix()[-70:]
            print(f"{name:70} {mine:8.2f} {their:10.2f} {mine / their:6.2f}  {same}")
        total_ours = sum(statistics.median(v) for v in ours.values())
        total_theirs = sum(statistics.median(v) for v in theirs.values())
        print(
            f"{len(folders)} folders, {args.rounds} rounds: median ratio {statistics.median(ratios):.2f}, "
            f"sum {total_ours:.1f} s against {total_theirs:.1f} s ({total_ours / total_theirs:.2f}x)"
        )


if __name__ == "__main__":
    main()
