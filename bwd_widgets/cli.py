"""`bwd-extract`: batch backward extraction over GraphNet sample folders, or a TORCH_TRACE's regions read."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from .batch import DEFAULT_TIMEOUT, SampleRecord, TLSFiles, plan, run
from .core.errors import BatchError, BwdWidgetsError, TraceError
from .core.kinds import BACKENDS, DEFAULT_BACKEND, MODES
from .core.partitioners import partitioner_choices
from .core.text import visible
from .core.units import format_bytes, format_seconds
from .graphnet.writer import LAYOUTS

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

    from .extraction.loaded_trace import TraceRegion

EXAMPLE = """examples:
  bwd-extract ../shared/graphnet_samples/torchvision/mobilenet_v2 --out out/
  bwd-extract --list ../shared/graphnet_samples/dev_list.txt --out out/ --workers 2 --resume --validate
  bwd-extract --list samples.txt --root ~/GraphNet/samples --out out/ --scheduler tcp://10.0.0.5:8786
  bwd-extract --list samples.txt --out out/ --backend inductor --budget 0.5
  bwd-extract --trace /tmp/run_trace    (a TORCH_TRACE folder or one of its logs: each compiled region, read)
  bwd-extract --list samples.txt --out out/ --scheduler tls://10.0.0.5:8786 --tls-ca-file ca.pem \\
      --tls-cert client.pem --tls-key client.key
Writes out/eval_forward/REL (a copy of the input), out/train_forward/REL/NAME_train_forward and
out/train_backward/REL/NAME_train_backward, as GraphNet's own extractor does (REL: the sample's path
relative to the samples root; NAME: the sample folder's name), and out/summary.json. Exits 1 if any
sample failed or failed validation.
A sample is code: its model.py runs (in a worker process), so extract only samples you trust.
Its weight_meta.py and input_meta.py are read as data, never run.
One batch at a time writes an output folder: it holds OUT/.bwd_widgets.lock (naming its pid, host, start
time and command) while it runs, and a second batch on the same --out is refused; a lock whose batch is
gone (killed) is taken over, and what that batch left (staging and scratch folders) is removed.
--trace reads what a torch.compile run wrote with TORCH_TRACE=DIR set: a line per compiled region (rank,
compile id, backend, budget, saved values and bytes) and a sentence per region it could not read; nothing of
the trace runs. With --out it writes OUT/trace_summary.json, and each region's GraphNet samples where that can
be done (exit 1 where it cannot)."""


def _positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
        return value

    return parse


def _add_samples(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("samples", nargs="*", type=Path, metavar="SAMPLE_DIR", help="GraphNet sample folders")
    parser.add_argument(
        "--list",
        type=Path,
        metavar="FILE",
        help="a file of sample paths, one a line; relative ones are relative to --root, else to the list's folder "
        "or the current folder, whichever holds more of them",
    )
    parser.add_argument(
        "--root",
        "--model-path-prefix",
        type=Path,
        metavar="DIR",
        help="samples root that list entries and output names are relative to, as GraphNet's --model-path-prefix "
        "(default: the folder list entries are found in when it holds every sample, else the samples' common parent)",
    )
    parser.add_argument("--out", type=Path, metavar="DIR", help="output folder (required, except with --trace)")
    parser.add_argument(
        "--trace",
        type=Path,
        metavar="PATH",
        help="instead of samples: a TORCH_TRACE folder (or one of its *.log files) a torch.compile run wrote; "
        "prints each compiled region's partition as the run made it (with --out, also writes what can be written)",
    )


def _add_settings(parser: argparse.ArgumentParser) -> None:
    """What makes an output (recorded in it and compared by --resume), and how it is laid out."""
    parser.add_argument(
        "--partitioner",
        help=f"one of {partitioner_choices()} (default: default; min_cut with --budget or --backend inductor)",
    )
    parser.add_argument("--budget", type=float, help="activation memory budget in [0, 1]; implies min_cut")
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default=DEFAULT_BACKEND,
        help="aot_eager (default): AOT Autograd's joint graph as traced; inductor: the partition torch.compile(model) "
        "makes, after Inductor's decompositions and joint-graph passes (min-cut only); recorded in each output, "
        "so --resume redoes outputs another backend made",
    )
    parser.add_argument("--mode", choices=MODES, default="real", help="real runs the model; fake only traces shapes")
    parser.add_argument(
        "--validate",
        action="store_true",
        help="run GraphNet's validation on each written sample (it runs as one graph, it re-extracts, the "
        "re-extraction runs) and write graph_hash.txt as GraphNet's validator does",
    )
    parser.add_argument(
        "--layout",
        choices=LAYOUTS,
        help="graphnet: train_*/REL/NAME_train_* as GraphNet's extractor writes; flat: train_*/REL "
        "(default: the layout an existing --out was written with, else graphnet)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="skip samples whose outputs are complete and made with the same settings",
    )
    parser.add_argument("--device", default="cpu", help="device for the sample tensors (default: %(default)s)")


def _add_running(parser: argparse.ArgumentParser) -> None:
    """Where and how long the samples run."""
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
        help="run on a Dask cluster: a scheduler address, or 'local' for a local cluster of --workers workers; "
        "results come back pickled from it, and unpickling can run any code here, so name only a cluster you "
        "trust; on a network you do not trust, use tls://HOST:PORT with --tls-ca-file (or Dask's own config, "
        "distributed.comm.tls.*)",
    )
    parser.add_argument(
        "--tls-ca-file",
        metavar="PEM",
        help="for a tls:// scheduler: the CA its certificate must be signed by, as `dask scheduler --tls-ca-file`",
    )
    parser.add_argument("--tls-cert", metavar="PEM", help="for a tls:// scheduler: this client's certificate")
    parser.add_argument("--tls-key", metavar="PEM", help="for a tls:// scheduler: this client's private key")


def _tls(args: argparse.Namespace) -> TLSFiles | None:
    """The TLS options as one setting; a certificate or key without the CA is refused, as it cannot work."""
    if args.tls_ca_file is None:
        if args.tls_cert is not None or args.tls_key is not None:
            raise BatchError("--tls-cert and --tls-key need --tls-ca-file: pass the CA that signed the scheduler's.")
        return None
    return TLSFiles(args.tls_ca_file, args.tls_cert, args.tls_key)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bwd-extract",
        description="Extract forward and backward graphs of GraphNet samples through AOT Autograd.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_samples(parser)
    _add_settings(parser)
    _add_running(parser)
    return parser


def _status_line(record: SampleRecord) -> str:
    line = f"{record['status']:7} {record['name']}"
    if record["status"] == "ok":
        line += (
            f"  {format_seconds(record['seconds'])}  fw={record['forward_nodes']} bw={record['backward_nodes']}"
            f"  saved activations={format_bytes(record['saved_activation_bytes'])}"
        )
        if "validation" in record:
            folders = record["validated_folders"]  # each written split and subgraph: not samples given
            line += f"  validation {record['validation']} ({folders} written folder{'' if folders == 1 else 's'})"
            line += "".join(f"; {failure}" for failure in record.get("validation_failures", ())[:2])
    elif "reason" in record:
        line += f"  {record['reason']}"
    return line


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_intermixed_args(argv)  # sample folders may follow options too
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.|copyreg")
    if args.trace is not None:
        return _read_trace(parser, args)
    if args.out is None:
        parser.error("the following arguments are required: --out")
    from tqdm import tqdm

    partitioner = "min_cut" if args.budget is not None and args.partitioner is None else args.partitioner
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous_handler = signal.signal(signal.SIGTERM, _interrupt) if in_main_thread else None  # stop like Ctrl-C
    try:
        tls = _tls(args)
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
            layout=args.layout,
            validate=args.validate,
            backend=args.backend,
        )
        summary = run(
            batch,
            workers=args.workers,
            timeout=args.timeout,
            scheduler=args.scheduler,
            tls=tls,
            on_record=lambda record: tqdm.write(visible(_status_line(record)), file=sys.stderr),
        )
    except BwdWidgetsError as error:
        print(f"bwd-extract: error: {visible(error)}", file=sys.stderr)
        return 2
    except OSError as error:
        print(
            f"bwd-extract: error: cannot write to {visible(args.out)}: {visible(error.strerror or error)}; "
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
    validation = summary.validation
    checked = f"; {validation['passed']} validated, {validation['failed']} failed validation" if args.validate else ""
    summary_path = visible(args.out / "summary.json")
    print(f"{done - failed} of {done} samples ok{checked}; summary in {summary_path}", file=sys.stderr)
    return 1 if failed or validation["failed"] else 0


_WRITING = ("layout", "validate")
"""Options that say how samples are written: with --trace, they need --out."""


def _refuse_with_trace(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """One sentence naming the options given with --trace that cannot apply to it: a trace holds the partition
    its run made, on the run's device, so nothing chooses, re-partitions or runs samples."""
    actions = parser._actions  # noqa: SLF001 - argparse lists its options nowhere public
    named = {action.dest: action.option_strings[0] if action.option_strings else "sample folders" for action in actions}
    given = [
        dest
        for dest in named
        if dest not in ("help", "trace", "out")
        and getattr(args, dest, None) not in (None, [])
        and getattr(args, dest) != parser.get_default(dest)
    ]
    unusable = [dest for dest in given if dest not in _WRITING]
    if unusable:
        names = ", ".join(str(named[dest]) for dest in unusable)
        raise TraceError(
            f"--trace reads the partition its run made, so {names} cannot apply to it: drop "
            f"{'it' if len(unusable) == 1 else 'them'}, or extract samples without --trace."
        )
    if given and args.out is None:
        names = " and ".join(str(named[dest]) for dest in given)
        verb = "says" if len(given) == 1 else "say"
        raise TraceError(f"{names} {verb} how samples are written: add --out DIR, or drop {names}.")


def _read_trace(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """`--trace PATH`: each region's line, each refused region's sentence; with --out, OUT/trace_summary.json (each
    region's figures and the refused sentences) and each region's GraphNet samples, named as `save_graphnet` names
    a region's. One pass over the regions: a long run's are built one at a time, once (the load keeps only the
    last few). A refusal to write samples is one sentence, said once, and exit 1: the user asked for them."""
    from .extraction.loaded_trace import load_trace, region_line

    try:
        _refuse_with_trace(parser, args)
        load = load_trace(args.trace)
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
    except BwdWidgetsError as error:
        print(f"bwd-extract: error: {visible(error)}", file=sys.stderr)
        return 2
    except OSError as error:
        return _unwritable(args.out, error)
    rows: list[dict] = []
    refusals: list[str] = []
    for region in load:
        print(visible(region_line(region)))
        rows.append({"rank": region.rank, "compile_id": region.compile_id, "backend": region.backend})
        rows[-1].update({**region.summary(), "notes": region.notes})
        if args.out is not None:
            _save_region(region, args, refusals)
    for sentence in load.refused:
        print(f"not read: {visible(sentence)}")
    print(
        f"{len(rows)} region{'' if len(rows) == 1 else 's'} read, {len(load.refused)} not, "
        f"in {format_seconds(load.seconds)}",
        file=sys.stderr,
    )
    if args.out is None:
        return 0 if rows else 1
    summary = {"trace": str(args.trace), "regions": rows, "refused": load.refused}
    try:
        (args.out / "trace_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    except OSError as error:
        return _unwritable(args.out, error)
    print(f"summary in {visible(args.out / 'trace_summary.json')}", file=sys.stderr)
    for reason in refusals:
        print(f"bwd-extract: GraphNet samples not written: {reason}", file=sys.stderr)
    return 1 if refusals or not rows else 0


def _save_region(region: TraceRegion, args: argparse.Namespace, refusals: list[str]) -> None:
    """The region's GraphNet samples under --out; a refusal's sentence goes to `refusals`, once."""
    try:
        written = region.save_graphnet(args.out, layout=args.layout or "graphnet", validate=args.validate)
    except (BwdWidgetsError, OSError) as error:
        reason = visible(error if isinstance(error, BwdWidgetsError) else error.strerror or error)
        if reason not in refusals:
            refusals.append(reason)
        return
    print(f"saved {', '.join(visible(path) for path in written.values())}", file=sys.stderr)


def _unwritable(out: Path, error: OSError) -> int:
    print(f"bwd-extract: error: cannot write to {visible(out)}: {visible(error.strerror or error)}", file=sys.stderr)
    return 1
