"""`bwd-extract`: batch backward extraction over GraphNet sample folders."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import warnings
from pathlib import Path

from .batch import DEFAULT_TIMEOUT, plan, run
from .core.errors import BwdWidgetsError
from .core.partitioners import partitioner_names

EXAMPLE = """examples:
  bwd-extract ../shared/graphnet_samples/torchvision/mobilenet_v2 --out out/
  bwd-extract --list ../shared/graphnet_samples/dev_list.txt --out out/ --workers 2 --resume
  bwd-extract --list samples.txt --out out/ --scheduler tcp://10.0.0.5:8786
Writes out/eval_forward/REL, out/train_forward/REL and out/train_backward/REL (REL: the sample's
path relative to the samples root) and out/summary.json; exits 1 if any sample failed.
A sample is code: its model.py runs (in a worker process), so extract only samples you trust.
Its weight_meta.py and input_meta.py are read as data, never run."""


def _positive(kind: type):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
        return value

    return parse


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
        "--root",
        type=Path,
        metavar="DIR",
        help="samples root that output names are relative to (default: the list's folder when it holds "
        "every sample, else the samples' common parent)",
    )
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="output folder")
    parser.add_argument(
        "--partitioner", default="default", help=f"one of {', '.join(partitioner_names())} (default: %(default)s)"
    )
    parser.add_argument("--budget", type=float, help="activation memory budget in [0, 1]; implies min_cut")
    parser.add_argument(
        "--mode", choices=("real", "fake"), default="real", help="real runs the model; fake only traces shapes"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="skip samples whose outputs are complete and made with the same settings",
    )
    parser.add_argument("--device", default="cpu", help="device for the sample tensors (default: %(default)s)")
    parser.add_argument("--workers", type=_positive(int), metavar="N", help="worker processes (default: one per core)")
    parser.add_argument(
        "--timeout",
        type=_positive(float),
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="per sample; a sample past it is stopped and marked timeout (default: %(default)g)",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run on a Dask cluster: a scheduler address, or 'local' for a local cluster of --workers workers",
    )
    return parser


def _status_line(record: dict) -> str:
    line = f"{record['status']:7} {record['name']}"
    if record["status"] == "ok":
        line += (
            f"  {record['seconds']:.1f}s  fw={record['forward_nodes']} bw={record['backward_nodes']}"
            f"  saved activations={record['saved_activation_bytes'] / 1e6:.2f} MB"
        )
    elif "reason" in record:
        line += f"  {record['reason']}"
    return line


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_intermixed_args(argv)  # sample folders may follow options too
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.|copyreg")
    from tqdm import tqdm

    partitioner = "min_cut" if args.budget is not None and args.partitioner == "default" else args.partitioner
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous_handler = signal.signal(signal.SIGTERM, _interrupt) if in_main_thread else None  # stop like Ctrl-C
    try:
        batch = plan(
            args.samples,
            args.out,
            list_file=args.list,
            root=args.root,
            partitioner=partitioner,
            memory_budget=args.budget,
            mode=args.mode,
            device=args.device,
            resume=args.resume,
        )
        summary = run(
            batch,
            workers=args.workers,
            timeout=args.timeout,
            scheduler=args.scheduler,
            resume=args.resume,
            on_record=lambda record: tqdm.write(_status_line(record), file=sys.stderr),
        )
    except BwdWidgetsError as error:
        print(f"bwd-extract: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(
            f"bwd-extract: error: cannot write to {args.out}: {error.strerror or error}; "
            "fix that and rerun with --resume.",
            file=sys.stderr,
        )
        return 1
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous_handler)
    done = len(summary.records)
    if summary.interrupted:
        print(f"interrupted: {done} of {len(batch.jobs)} samples done; rerun with --resume", file=sys.stderr)
        return 130
    failed = len(summary.failed)
    print(
        f"{done - failed} of {done} samples ok; summary in {args.out / 'summary.json'}",
        file=sys.stderr,
    )
    return 1 if failed else 0
