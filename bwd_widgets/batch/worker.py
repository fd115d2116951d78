"""What runs in a worker process: `serve` reads requests and sends records; `run_sample` does one sample.

A worker process is started as `python -c "...; from bwd_widgets.batch import serve; serve()"` and pays its
imports once (warm-up) before it says it is ready, so a sample's clock never includes them.
"""

from __future__ import annotations

import gc
import os
import signal
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..core.errors import one_line
from ..graphnet.writer import write_extraction
from .records import backend_of
from .scratch import SCRATCH_ENV
from .transport import read_files, unpack

if TYPE_CHECKING:
    from .records import SampleRecord, SampleRequest

THREADS_ENV = "BWD_WIDGETS_WORKER_THREADS"
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
WORKER_COMMAND = (
    # `python -c` puts the current folder first on sys.path, where a user's `select.py` would shadow the
    # standard library: take it off, and find this package where the client found it, after everything else.
    "import sys, os; sys.path[:] = [p for p in sys.path if p not in ('', '.', os.getcwd())] + "
    f"[{_PACKAGE_ROOT!r}]; from bwd_widgets.batch import serve; serve()"
)
READY = "ready"
"""A worker's first message: its imports are done."""


def run_sample(request: SampleRequest, scratch_folder: Path | None = None) -> SampleRecord:
    """In a worker: load the sample from its files, extract, write both splits; return a record with the files.

    Never raises for a sample's fault: errors become `error` records, `sys.exit` in the sample's code a `crash`.
    scratch_folder: where its copy goes, the worker's `ScratchFolder`, which a later run removes if we are killed.
    """
    from ..extraction.extract import clear_trace_cache, extract
    from ..graphnet.sample import load_graphnet_sample
    from ..graphnet.validate import Validator

    name, started, settings = request["name"], time.perf_counter(), request["settings"]
    if request.get("error"):
        return {"name": name, "status": "error", "reason": request["error"], "settings": settings}
    with tempfile.TemporaryDirectory(prefix="bwd_widgets_sample_", dir=scratch_folder) as scratch:
        folder = Path(scratch) / "in" / request["folder_name"]
        folder.mkdir(parents=True)
        unpack(request["files"], folder)
        validator = Validator() if request.get("validate") else None
        try:
            sample = load_graphnet_sample(folder, device=request["device"])
            extraction = extract(
                sample,
                partitioner=settings["partitioner"],
                memory_budget=settings["memory_budget"],
                mode=settings["mode"],
                backend=backend_of(settings),
                name=name,
                cache=False,
            )
            layout = request.get("layout", "graphnet")
            write_extraction(extraction, Path(scratch) / "out", name, request["stamp"], layout, validator)
            summary, notes = extraction.summary(), extraction.notes
            del sample, extraction
            files = read_files(Path(scratch) / "out")
        except SystemExit as exit_:
            return {"name": name, "status": "crash", "reason": f"the sample's code called sys.exit({exit_.code!r})"}
        except Exception as error:  # noqa: BLE001 - one sample never stops the batch
            reason = one_line(error).replace(str(folder), request["display"])
            return {"name": name, "status": "error", "reason": reason, "settings": settings}
        finally:
            clear_trace_cache()  # the caller collects what the sample left once its record is on its way
    record: SampleRecord = {
        "name": name,
        "status": "ok",
        "seconds": round(time.perf_counter() - started, 3),
        "settings": settings,
        "graphs": summary["graphs"],
        "forward_nodes": summary["forward_nodes"],
        "backward_nodes": summary["backward_nodes"],
        "saved": summary["saved"],
        "saved_activation_bytes": summary["saved_activation_bytes"],
        "saved_input_bytes": summary["saved_input_bytes"],
    }
    if validator is not None:
        record = {**record, **validator.record(Path(scratch) / "out")}
    if notes:
        record["notes"] = notes
    record["files"] = files
    return record


def _exit_with_parent(parent: int) -> None:
    """A worker whose client died (killed, out of memory) stops too, instead of waiting forever."""
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(1)


def serve() -> None:
    """A worker process: requests on stdin, results on stdout; whatever a sample prints goes to stderr."""
    requests = Connection(os.dup(0), writable=False)
    results = Connection(os.dup(1), readable=False)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the client's to handle
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    scratch_folder = Path(os.environ[SCRATCH_ENV]) if os.environ.get(SCRATCH_ENV) else None
    threads = int(os.environ.get(THREADS_ENV, "0"))
    if threads:
        torch.set_num_threads(threads)
    from ..extraction import extract  # noqa: F401  (the imports are paid before the first sample's clock starts)

    gc.collect()
    gc.freeze()  # torch's import-time objects live as long as the worker: collections after each sample skip them
    results.send(READY)
    while True:
        try:
            request = requests.recv()
        except EOFError:
            return
        # The cycle collector is paused for the sample (as TORCH_WORK pauses it for a capture) and run once
        # after its record is sent, on what the sample left (its graphs, fake tensors, modules), while the
        # client stores the record: collections inside a sample cost 2-14% of its time (docs/benchmarks.md).
        gc.disable()
        try:
            record = run_sample(request, scratch_folder)
        finally:
            gc.enable()
        results.send(record)
        del record
        gc.collect()
