"""`bwd-extract`: batch backward extraction over GraphNet sample folders."""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import warnings
from pathlib import Path

from .core.errors import BwdWidgetsError, one_line
from .core.partitioners import partitioner_names, resolve_partitioner

EXAMPLE = """example:
  bwd-extract ../shared/graphnet_samples/torchvision/mobilenet_v2 --out out/
  bwd-extract --list ../shared/graphnet_samples/dev_list.txt --out out/ --resume
Writes out/train_forward/<name>/ and out/train_backward/<name>/ GraphNet samples
and out/summary.json; exits 1 if any sample failed."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bwd-extract",
        description="Extract forward and backward graphs of GraphNet samples through AOT Autograd.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("samples", nargs="*", type=Path, metavar="SAMPLE_DIR", help="GraphNet sample folders")
    parser.add_argument("--list", type=Path, metavar="FILE", help="a file of sample paths, one a line")
    parser.add_argument(
        "--root", type=Path, help="folder the --list paths are relative to (default: the list's folder)"
    )
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="output folder")
    parser.add_argument(
        "--partitioner", default="default", help=f"one of {', '.join(partitioner_names())} (default: %(default)s)"
    )
    parser.add_argument("--budget", type=float, help="activation memory budget in [0, 1]; implies min_cut")
    parser.add_argument(
        "--mode", choices=("real", "fake"), default="real", help="real runs the model; fake only traces shapes"
    )
    parser.add_argument("--resume", action="store_true", help="skip samples whose output is already complete")
    parser.add_argument("--device", default="cpu", help="device for the sample tensors (default: %(default)s)")
    return parser


def collect_samples(args, parser) -> list:
    """(name, folder) pairs: a list entry keeps its relative path as its name."""
    samples = [(path.resolve().name, path) for path in args.samples]
    if args.list is not None:
        if not args.list.is_file():
            parser.error(f"--list {args.list} is not a file")
        root = args.root or args.list.parent
        for line in args.list.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                samples.append((line, root / line))
    if not samples:
        parser.error("give at least one SAMPLE_DIR or --list FILE")
    return samples


def is_complete(out: Path, name: str) -> bool:
    return all((out / split / name).is_dir() for split in ("train_forward", "train_backward"))


def extract_one(name, folder, args) -> dict:
    from .extractor import extract
    from .graphnet import load_graphnet_sample

    started = time.perf_counter()
    sample = load_graphnet_sample(folder, device=args.device)
    extraction = extract(sample, partitioner=args.partitioner, memory_budget=args.budget, mode=args.mode, name=name)
    extraction.save_graphnet(args.out, name)
    summary = extraction.summary()
    return {
        "name": name,
        "status": "ok",
        "seconds": round(time.perf_counter() - started, 3),
        "graphs": summary["graphs"],
        "forward_nodes": summary["forward_nodes"],
        "backward_nodes": summary["backward_nodes"],
        "saved": summary["saved"],
        "saved_activation_bytes": summary["saved_activation_bytes"],
        "saved_input_bytes": summary["saved_input_bytes"],
    }


def write_summary(out: Path, records: list, args) -> None:
    summary = {
        "partitioner": args.partitioner,
        "memory_budget": args.budget,
        "mode": args.mode,
        "counts": {s: sum(r["status"] == s for r in records) for s in ("ok", "error", "skipped")},
        "samples": records,
    }
    temporary = out / ".summary.json.tmp"
    temporary.write_text(json.dumps(summary, indent=2) + "\n")
    os.replace(temporary, out / "summary.json")


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    samples = collect_samples(args, parser)
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.|copyreg")
    from tqdm import tqdm

    if args.budget is not None and args.partitioner == "default":
        args.partitioner = "min_cut"
    try:
        resolve_partitioner(args.partitioner, args.budget)
    except BwdWidgetsError as error:
        parser.error(str(error))
    args.out.mkdir(parents=True, exist_ok=True)
    previous = {}
    if args.resume and (args.out / "summary.json").is_file():
        previous = {r["name"]: r for r in json.loads((args.out / "summary.json").read_text()).get("samples", [])}
    records = []
    progress = tqdm(samples, desc="bwd-extract", unit="sample", file=sys.stderr, dynamic_ncols=True)
    try:
        for name, folder in progress:
            progress.set_postfix_str(name[-40:])
            if args.resume and is_complete(args.out, name):
                record = dict(previous.get(name, {"name": name}), status="skipped")
            else:
                try:
                    record = extract_one(name, folder, args)
                except Exception as error:  # one sample never stops the batch
                    record = {"name": name, "status": "error", "reason": one_line(error)}
                gc.collect()
            records.append(record)
            line = f"{record['status']:7} {name}"
            if record["status"] == "ok":
                line += (
                    f"  {record['seconds']:.1f}s  fw={record['forward_nodes']} bw={record['backward_nodes']}"
                    f"  saved activations={record['saved_activation_bytes'] / 1e6:.2f} MB"
                )
            elif record["status"] == "error":
                line += f"  {record['reason']}"
            tqdm.write(line, file=sys.stderr)
    except KeyboardInterrupt:
        write_summary(args.out, records, args)
        print(f"interrupted: {len(records)} of {len(samples)} samples done; rerun with --resume", file=sys.stderr)
        return 130
    finally:
        progress.close()
    write_summary(args.out, records, args)
    errors = sum(r["status"] == "error" for r in records)
    print(
        f"{len(records) - errors} of {len(records)} samples ok; summary in {args.out / 'summary.json'}", file=sys.stderr
    )
    return 1 if errors else 0
