"""Batch extraction of GraphNet samples: one worker process per sample at a time, or a Dask cluster.

The client (this process) plans the batch and refuses bad input before any work, reads each sample's
files and sends them out; a worker process loads, extracts and writes into its own scratch folder and
returns the files; the client stages them with a copy of the input (`eval_forward`) and swaps all three
splits into place at once (`graphnet_writer.install`). A crash or a hang costs one worker process,
which is replaced. `summary.json` is replaced atomically after every sample, so a killed batch keeps
what it did and `--resume` goes on from there.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from multiprocessing.connection import Connection, wait
from pathlib import Path

import torch

from .core.errors import BatchError, one_line
from .core.partitioners import resolve_partitioner
from .graphnet_writer import (
    LAYOUTS,
    SPLITS,
    TRAIN_SPLITS,
    Layout,
    OutputError,
    check_target,
    clean_stale_staging,
    install,
    is_complete,
    new_stamp,
    output_name,
    prepare_output,
    sample_path,
    staging,
    write_eval_copy,
    write_extraction,
)

STATUSES = ("ok", "error", "crash", "timeout", "skipped")
FAILED = ("error", "crash", "timeout")
DEFAULT_TIMEOUT = 900.0
SUMMARY_WRITER = "bwd-extract"
FIGURES = ("graphs", "forward_nodes", "backward_nodes", "saved", "saved_activation_bytes", "saved_input_bytes")
_THREADS_ENV = "BWD_WIDGETS_WORKER_THREADS"



def cores() -> int:
    """Cores this process may use (the default number of workers)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# --- the plan: every refusal before any work ----------------------------------------------------


@dataclass(frozen=True)
class Job:
    name: str
    """The output name: the sample's path relative to the samples root, as GraphNet keys its outputs."""
    folder: Path
    listed: ListBase | None = None
    """Set when the sample came from a list file: how its entry was resolved."""


@dataclass
class Batch:
    out: Path
    root: Path
    jobs: list[Job]
    settings: dict
    device: str = "cpu"
    previous: dict[str, dict] = field(default_factory=dict)
    """Records of earlier runs from `summary.json`, by name."""
    layout: Layout = "graphnet"
    validate: bool = False
    """Run GraphNet's validation steps on every written sample, in the worker that wrote it."""
    resume: bool = False
    """Skip samples whose outputs are complete and made with these settings."""


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


@dataclass(frozen=True)
class ListBase:
    """The folder a list file's relative entries were resolved against, and how it was chosen."""

    folder: Path
    list_file: Path
    how: str


def _list_entries(list_file: Path) -> list[str]:
    if not list_file.is_file():
        raise BatchError(f"the list {list_file} is not a file: give a file of sample paths, one a line.")
    lines = (line.strip() for line in list_file.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _list_base(entries: list[str], list_file: Path, root: str | os.PathLike | None) -> ListBase:
    """Relative entries are relative to `--root`; without it, to the list's folder or the current folder,
    whichever holds more of them (the list's folder on a tie), as GraphNet's lists are kept beside the samples
    while `tar -T` and `rsync --files-from` lists are relative to where one stands."""
    if root is not None:
        return ListBase(Path(os.path.abspath(root)), list_file, "--root")
    relative = [entry for entry in entries if not os.path.isabs(entry)]
    candidates = [(Path(os.path.abspath(list_file.parent)), "the list's folder"), (Path.cwd(), "the current folder")]
    found = [sum((folder / entry).is_dir() for entry in relative) for folder, _ in candidates]
    folder, how = candidates[1] if found[1] > found[0] else candidates[0]
    return ListBase(folder, list_file, how)


def _sample_paths(
    paths: Sequence, list_file: Path | None, root: str | os.PathLike | None
) -> tuple[list[Path], ListBase | None]:
    folders = [Path(os.path.abspath(p)) for p in paths]
    if list_file is None:
        return folders, None
    list_file = Path(list_file)
    entries = _list_entries(list_file)
    base = _list_base(entries, list_file, root)
    folders += [Path(os.path.abspath(base.folder / entry)) for entry in entries]
    return folders, base


def _samples_root(folders: list[Path], root: str | os.PathLike | None, list_base: Path | None) -> Path:
    """`root` if given; else the folder list entries are relative to when it holds every sample; else the
    samples' common parent."""
    if root is not None:
        root = Path(os.path.abspath(root))
        for folder in folders:
            if not _inside(folder, root) or folder == root:
                raise BatchError(f"the sample {folder} is not inside the samples root {root}: pass another --root.")
        return root
    if list_base is not None and all(folder != list_base and _inside(folder, list_base) for folder in folders):
        return list_base
    return Path(os.path.commonpath([folder.parent for folder in folders]))


def _read_previous(out: Path, resume: bool) -> tuple[dict[str, dict], Layout | None]:
    """The records of `summary.json` by name, and the layout it was written with (None: no summary)."""
    path = out / "summary.json"
    if not path.exists():
        return {}, None
    try:
        document = json.loads(path.read_text())
        ours = isinstance(document, dict) and document.get("written_by") == SUMMARY_WRITER
    except (OSError, ValueError):
        ours = False
    if not ours:
        raise BatchError(
            f"{path} is not a summary that bwd-extract wrote (foreign or corrupt): move it away or choose another "
            "output folder."
        )
    layout = document.get("layout", "flat")  # summaries from before the layout was recorded were flat
    if layout not in LAYOUTS:
        raise BatchError(f"{path} names the unknown layout {layout!r}: move it away or choose another output folder.")
    records = document.get("samples")
    if not isinstance(records, list) or not all(isinstance(r, dict) and "name" in r for r in records):
        if resume:
            raise BatchError(f"{path} has no list of sample records: move it away, or rerun without --resume.")
        return {}, layout
    return {r["name"]: r for r in records}, layout


def plan(
    paths: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    *,
    list_file: str | os.PathLike | None = None,
    root: str | os.PathLike | None = None,
    partitioner: str = "default",
    memory_budget: float | None = None,
    mode: str = "real",
    device: str = "cpu",
    resume: bool = False,
    layout: Layout | None = None,
    validate: bool = False,
) -> Batch:
    """Name every sample and check every path; one-sentence errors, and nothing written (`run` creates `out`).

    layout: None keeps the layout an existing output folder was written with, else GraphNet's ("graphnet").
    """
    if mode not in ("real", "fake"):
        raise BatchError(f"unknown mode {mode!r}: use 'real' or 'fake'.")
    if layout is not None and layout not in LAYOUTS:
        raise BatchError(f"unknown layout {layout!r}: use 'graphnet' (GraphNet's own) or 'flat'.")
    if not isinstance(partitioner, str):
        raise BatchError("a batch takes a registered partitioner name: worker processes cannot share a function.")
    resolved = resolve_partitioner(partitioner, memory_budget)
    settings = {
        "partitioner": resolved.name,
        "memory_budget": resolved.memory_budget,
        "mode": mode,
        "torch": torch.__version__,
    }
    if validate:
        settings["validate"] = True  # only then: outputs written before validation existed keep their settings
    folders, list_base = _sample_paths(paths, list_file, root)
    if not folders:
        raise BatchError("no samples given: pass sample folders or a list file of sample paths.")
    samples_root = _samples_root(folders, root, list_base.folder if list_base else None)
    jobs = [Job(output_name(folder.relative_to(samples_root).as_posix()), folder) for folder in folders]
    if list_base is not None:
        jobs = [Job(job.name, job.folder, list_base) if _inside(job.folder, list_base.folder) else job for job in jobs]

    repeated = [name for name, count in Counter(job.name for job in jobs).items() if count > 1]
    if repeated:
        raise BatchError(f"the sample {samples_root / repeated[0]} is listed twice: list each sample once.")
    names = sorted(job.name for job in jobs)
    for shorter, longer in zip(names, names[1:]):
        if longer.startswith(shorter + "/"):
            raise BatchError(
                f"the sample {samples_root / longer} is inside the sample {samples_root / shorter}: "
                "their outputs would be too; list only one of them."
            )

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputError(f"the output folder {out} is a file: name a folder.")
    out_real = Path(os.path.realpath(out))
    for job in jobs:
        real = Path(os.path.realpath(job.folder))
        if _inside(out_real, real):
            raise OutputError(
                f"the output folder {out} is inside the input sample {job.folder}: choose one outside the samples."
            )
        for split in SPLITS:
            target = Path(os.path.realpath(out / split / job.name))
            if _inside(real, target) or _inside(target, real):
                raise OutputError(
                    f"the input sample {job.folder} overlaps {out / split / job.name}, which this batch writes: "
                    "choose another output folder."
                )
    previous, previous_layout = _read_previous(out, resume) if out.is_dir() else ({}, None)
    chosen: Layout = layout or previous_layout or "graphnet"
    return Batch(out, samples_root, jobs, settings, device, previous, chosen, validate, resume)


# --- the summary ----------------------------------------------------------------------------------


@dataclass
class BatchSummary:
    """What a batch did, one record per sample (name, status, reason, seconds, node counts, saved bytes)."""

    out: Path
    settings: dict
    records: list[dict]
    interrupted: bool = False

    @property
    def counts(self) -> dict[str, int]:
        return {status: sum(r["status"] == status for r in self.records) for status in STATUSES}

    @property
    def validation(self) -> dict[str, int]:
        """Samples whose written folders all passed GraphNet's validation steps, and those where one failed."""
        return validation_counts(self.records)

    @property
    def failed(self) -> list[dict]:
        return [r for r in self.records if r["status"] in FAILED]

    def __repr__(self) -> str:
        header = f"{'name':40} {'status':8} {'seconds':>8} {'fw':>6} {'bw':>6} {'saved MB':>9}  reason"
        lines = [header]
        for r in self.records:
            megabytes = r.get("saved_activation_bytes")
            lines.append(
                f"{r['name'][-40:]:40} {r['status']:8} {r.get('seconds', ''):>8} {r.get('forward_nodes', ''):>6} "
                f"{r.get('backward_nodes', ''):>6} {'' if megabytes is None else f'{megabytes / 1e6:.2f}':>9}  "
                f"{r.get('reason', '')}"
            )
        counts = ", ".join(f"{n} {s}" for s, n in self.counts.items() if n)
        validated = self.validation
        if any(validated.values()):
            counts += f"; validated {validated['passed']} passed, {validated['failed']} failed"
        lines.append(f"{counts}{'; interrupted' if self.interrupted else ''}; summary in {self.out / 'summary.json'}")
        return "\n".join(lines)


def validation_counts(records: list[dict]) -> dict[str, int]:
    return {outcome: sum(r.get("validation") == outcome for r in records) for outcome in ("passed", "failed")}


def write_summary(out: Path, settings: dict, records: list[dict], layout: Layout = "graphnet") -> None:
    """Replace `summary.json` atomically: a killed batch leaves the previous one or this one, whole."""
    document = {
        "written_by": SUMMARY_WRITER,
        "layout": layout,
        "settings": settings,
        "counts": {status: sum(r["status"] == status for r in records) for status in STATUSES},
        "validation": validation_counts(records),
        "samples": records,
    }
    temporary = out / f".bwd_widgets_summary_{uuid.uuid4().hex}.json"
    try:
        with open(temporary, "x") as file:
            file.write(json.dumps(document, indent=2) + "\n")
        os.replace(temporary, out / "summary.json")
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


# --- files travel as bytes: no shared file system is assumed ----------------------------------


def read_files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` by its relative path (Python caches left out)."""
    files = {}
    for directory, subdirectories, names in os.walk(folder):
        subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
        for name in sorted(names):
            path = Path(directory) / name
            if path.is_file():
                files[path.relative_to(folder).as_posix()] = path.read_bytes()
    return files


def unpack(files: dict[str, bytes], folder: Path) -> None:
    """Write `files` under `folder`, refusing any path that would leave it."""
    for relative, data in files.items():
        parts = relative.split("/")
        if relative.startswith("/") or any(part in ("", ".", "..") for part in parts):
            raise OutputError(f"refusing the file path {relative!r}: it would leave {folder}.")
        path = folder.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def make_request(batch: Batch, job: Job) -> dict:
    """What a worker needs for one sample: its files, the settings, and the stamp its outputs carry."""
    request = {
        "name": job.name,
        "folder_name": job.folder.name,
        "display": str(job.folder),
        "device": batch.device,
        "settings": batch.settings,
        "stamp": new_stamp(batch.settings),
        "layout": batch.layout,
        "validate": batch.validate,
        "files": {},
    }
    if not job.folder.is_dir():
        request["error"] = f"SampleError: {_missing(job)}"
        return request
    try:
        request["files"] = read_files(job.folder)
    except OSError as error:
        request["error"] = f"SampleError: {job.folder} could not be read: {error.strerror or error}."
    return request


def _missing(job: Job) -> str:
    """Why a sample folder is not there, saying where a list entry was looked for and how to change it."""
    if job.listed is None:
        return f"{job.folder} is not a folder: pass a GraphNet sample folder holding model.py."
    listed = job.listed
    entry = job.folder.relative_to(listed.folder).as_posix()
    return (
        f"{entry} from the list {listed.list_file} is not a folder under {listed.folder} ({listed.how}): list "
        "entries are relative to --root DIR, else to the list's folder or the current folder, whichever holds "
        "them; pass --root."
    )


def run_sample(request: dict) -> dict:
    """In a worker: load the sample from its files, extract, write both splits; return a record with the files.

    Never raises for a sample's fault: errors become `error` records, `sys.exit` in the sample's code a `crash`.
    """
    from .extractor import clear_trace_cache, extract
    from .graphnet import load_graphnet_sample
    from .graphnet_validate import Validator

    name, started = request["name"], time.perf_counter()
    record: dict = {"name": name}
    if request.get("error"):
        return {**record, "status": "error", "reason": request["error"], "settings": request["settings"]}
    with tempfile.TemporaryDirectory(prefix="bwd_widgets_sample_") as scratch:
        folder = Path(scratch) / "in" / request["folder_name"]
        folder.mkdir(parents=True)
        unpack(request["files"], folder)
        settings = request["settings"]
        validator = Validator() if request.get("validate") else None
        try:
            sample = load_graphnet_sample(folder, device=request["device"])
            extraction = extract(
                sample,
                partitioner=settings["partitioner"],
                memory_budget=settings["memory_budget"],
                mode=settings["mode"],
                name=name,
                cache=False,
            )
            layout = request.get("layout", "graphnet")
            write_extraction(extraction, Path(scratch) / "out", name, request["stamp"], layout, validator)
            summary, notes = extraction.summary(), extraction.notes
            del sample, extraction
            files = read_files(Path(scratch) / "out")
        except SystemExit as exit_:
            return {**record, "status": "crash", "reason": f"the sample's code called sys.exit({exit_.code!r})"}
        except Exception as error:  # one sample never stops the batch
            reason = one_line(error).replace(str(folder), request["display"])
            return {**record, "status": "error", "reason": reason, "settings": settings}
        finally:
            clear_trace_cache()
            gc.collect()
    record.update(status="ok", seconds=round(time.perf_counter() - started, 3), settings=settings)
    record.update({key: summary[key] for key in FIGURES})
    if validator is not None:
        record.update(validator.record(Path(scratch) / "out"))
    if notes:
        record["notes"] = notes
    record["files"] = files
    return record


def store(out: Path, request: dict, result: dict) -> None:
    """In the client: stage the worker's files and the input's copy, then swap all splits in at once."""
    name, layout = result["name"], request["layout"]
    files = result.pop("files")
    folders = tuple(sample_path(split, name, layout) + "/" for split in TRAIN_SPLITS)
    for relative in files:
        if not relative.startswith(folders):
            raise OutputError(f"a worker returned the file {relative!r}, which is not an output of {name}.")
    with staging(out) as stage:
        unpack(files, stage)
        write_eval_copy(stage, name, request["files"], request["stamp"])
        install(out, stage, name, SPLITS, layout)


# --- worker processes -------------------------------------------------------------------------------


_WORKER_COMMAND = "from bwd_widgets.batch import serve; serve()"


def serve() -> None:
    """A worker process: requests on stdin, results on stdout; whatever a sample prints goes to stderr."""
    requests = Connection(os.dup(0), writable=False)
    results = Connection(os.dup(1), readable=False)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the client's to handle
    parent = os.getppid()

    def exit_with_parent() -> None:
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(1)

    threading.Thread(target=exit_with_parent, daemon=True).start()
    threads = int(os.environ.get(_THREADS_ENV, "0"))
    if threads:
        torch.set_num_threads(threads)
    from . import extractor  # noqa: F401  (the imports are paid before the first sample's clock starts)

    gc.collect()
    gc.freeze()  # torch's import-time objects live as long as the worker: collections after each sample skip them
    results.send({"ready": True})
    while True:
        try:
            request = requests.recv()
        except EOFError:
            return
        results.send(run_sample(request))


class WorkerProcess:
    """One worker process and its pipes; a sample in it at a time."""

    def __init__(self, threads: int):
        request_read, request_write = os.pipe()
        result_read, result_write = os.pipe()
        handle, self.log_path = tempfile.mkstemp(prefix="bwd_widgets_worker_", suffix=".log")
        env = {**os.environ, _THREADS_ENV: str(threads)}
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _WORKER_COMMAND], stdin=request_read, stdout=result_write, stderr=handle, env=env
            )
        finally:
            os.close(request_read)
            os.close(result_write)
            os.close(handle)
        self.requests = Connection(request_write, readable=False)
        self.results = Connection(result_read, writable=False)
        self.ready = False
        self.alive = True
        self.request: dict | None = None
        self.started = 0.0
        self.deadline = float("inf")
        self.log_offset = 0

    def dispatch(self, request: dict, timeout: float) -> None:
        self.request, self.started = request, time.monotonic()
        self.deadline = self.started + timeout
        self.log_offset = os.path.getsize(self.log_path)
        self.requests.send(request)

    def receive(self) -> dict | None:
        """The result of the sample in flight (a crash record if the process died), or None for `ready`."""
        try:
            message = self.results.recv()
        except (EOFError, OSError):
            returncode = self.process.wait()
            self.alive = False
            if self.request is None:
                if self.ready:
                    return None
                detail = self._log_tail(0) or f"exit code {returncode}"
                raise BatchError(f"a worker process could not start: {detail}") from None
            return self.failure("crash", returncode)
        if message.get("ready"):
            self.ready = True
            return None
        self.request = None
        return message

    def failure(self, status: str, returncode: int | None = None, timeout: float | None = None) -> dict:
        request, self.request = self.request, None
        if status == "timeout":
            reason = f"took longer than the {timeout:g} s timeout; its worker process was stopped"
        else:
            reason = _crash_reason(returncode, self._log_tail(self.log_offset), request["files"])
        seconds = round(time.monotonic() - self.started, 3)
        return {"name": request["name"], "status": status, "reason": reason, "seconds": seconds}

    def wait_ready(self) -> None:
        """Block until the worker has imported torch and bwd_widgets (raises BatchError if it cannot start)."""
        while not self.ready:
            self.receive()

    def run(self, request: dict, timeout: float) -> dict:
        """Blocking: one sample, with its timeout; the process is stopped if it crashed or hung."""
        self.wait_ready()
        self.dispatch(request, timeout)
        if not wait([self.results], timeout):
            self.close()
            return self.failure("timeout", timeout=timeout)
        return self.receive()

    def _log_tail(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                text = log.read()[-8192:].decode(errors="replace")
        except OSError:
            return ""
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        chosen = [line for line in lines if "what():" in line] or lines
        return chosen[-1].replace("what():", "").strip()[:200] if chosen else ""

    def close(self) -> None:
        self.alive = False
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.requests.close()
        self.results.close()
        Path(self.log_path).unlink(missing_ok=True)


def _crash_reason(returncode: int | None, detail: str, files: dict[str, bytes]) -> str:
    if returncode is not None and returncode < 0:
        try:
            signal_name = signal.Signals(-returncode).name
        except ValueError:
            signal_name = f"signal {-returncode}"
        how = {
            "SIGABRT": "aborted (SIGABRT)",
            "SIGKILL": "was killed (SIGKILL, as the out-of-memory killer does)",
            "SIGSEGV": "crashed (SIGSEGV)",
        }.get(signal_name, f"was killed by {signal_name}")
        reason = f"the worker process {how}"
    else:
        reason = f"the worker process exited with code {returncode} (os._exit or a fatal error in the sample's code)"
    if detail:
        reason += f": {detail}"
    if b"cuda" in files.get("model.py", b"") and not torch.cuda.is_available():
        reason += "; model.py mentions cuda, which this machine has not got"
    return " ".join(reason.split())[:300]


class InProcessPool:
    """Samples run in this process, one after another: for callers that are themselves a worker (GraphNet's
    sample-pass driver runs each pass in the process it starts)."""

    def results(self, requests: Iterator[dict], count: int) -> Iterator[dict]:
        for request in requests:
            yield run_sample(request)

    def close(self) -> None:
        pass


class LocalPool:
    """`workers` worker processes on this machine; a crashed or hung one is replaced."""

    def __init__(self, workers: int, timeout: float):
        self.size, self.timeout = workers, timeout
        self.workers: list[WorkerProcess] = []

    def results(self, requests: Iterator[dict], count: int) -> Iterator[dict]:
        if count == 0:
            return
        threads = max(1, cores() // self.size)
        self.workers = [WorkerProcess(threads) for _ in range(min(self.size, count))]
        exhausted = False
        while True:
            for worker in self.workers:
                if worker.ready and worker.request is None and not exhausted:
                    request = next(requests, None)
                    if request is None:
                        exhausted = True
                    else:
                        worker.dispatch(request, self.timeout)
            busy = [w for w in self.workers if w.request is not None]
            if exhausted and not busy:
                return
            deadline = min((w.deadline for w in busy), default=None)
            pause = None if deadline is None else max(0.0, deadline - time.monotonic())
            readable = wait([w.results for w in self.workers], pause)
            finished = []
            for worker in self.workers:
                if worker.results in readable:
                    finished.append(worker.receive())
                elif worker.request is not None and time.monotonic() >= worker.deadline:
                    worker.close()
                    finished.append(worker.failure("timeout", timeout=self.timeout))
            for worker in [w for w in self.workers if not w.alive]:
                worker.close()  # replaced while samples remain
                self.workers.remove(worker)
                if not exhausted:
                    self.workers.append(WorkerProcess(threads))
            yield from (result for result in finished if result is not None)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()


_dask_workers: dict[str, WorkerProcess] = {}
"""The worker process of each Dask worker living in this process, by the Dask worker's address."""
_dask_locks: dict[str, threading.Lock] = {}
_dask_locks_lock = threading.Lock()


def run_on_dask_worker(request: dict, timeout: float) -> dict:
    """A Dask task: the sample runs in this Dask worker's own worker process, one at a time, so a crash or
    a hang costs that process, not the Dask worker."""
    from distributed import get_worker

    dask_worker = get_worker()
    with _dask_locks_lock:
        lock = _dask_locks.setdefault(dask_worker.address, threading.Lock())
    with lock:
        worker = _dask_workers.get(dask_worker.address)
        if worker is None or not worker.alive:
            worker = _dask_workers[dask_worker.address] = WorkerProcess(threads=max(1, dask_worker.state.nthreads))
        return worker.run(request, timeout)


class DaskPool:
    """The same batch on a Dask cluster: requests go out with their files, results come back with theirs.

    A lost Dask worker's samples are rescheduled by Dask on the others; each result reaches the client once.
    """

    def __init__(self, scheduler: object, workers: int, timeout: float):
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise BatchError("Dask is not installed: pip install 'bwd_widgets[dask]'.") from None
        self.timeout = timeout
        self.own: list = []
        self.local_workers: list[str] = []
        self.futures: list = []
        if isinstance(scheduler, Client):
            self.client = scheduler
        elif scheduler == "local":
            # Dask workers as threads of this process: each drives its own worker process, which does the work
            cluster = LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=False,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
            self.client = Client(cluster)
            self.own = [self.client, cluster]
            self.local_workers = list(cluster.scheduler_info["workers"])
        else:
            try:
                self.client = Client(str(scheduler), timeout=10)
            except (OSError, TimeoutError) as error:
                raise BatchError(
                    f"cannot reach the Dask scheduler at {scheduler} ({one_line(error)}): start one with "
                    "`dask scheduler`, or pass --scheduler local."
                ) from None
            self.own = [self.client]
        try:
            self.client.wait_for_workers(1, timeout=60)
        except TimeoutError:
            self.close()
            raise BatchError(
                f"the Dask cluster at {scheduler} has no workers: start some with `dask worker`."
            ) from None

    def results(self, requests: Iterator[dict], count: int) -> Iterator[dict]:
        from distributed import as_completed
        from distributed.scheduler import KilledWorker

        window = 2 * max(1, sum(self.client.nthreads().values()))
        names = {}
        completed = as_completed()

        def submit(request: dict) -> None:
            future = self.client.submit(
                run_on_dask_worker, request, self.timeout, key=f"bwd-extract-{uuid.uuid4().hex}", pure=False
            )
            names[future.key] = request["name"]
            self.futures.append(future)
            completed.add(future)

        for request in islice(requests, window):
            submit(request)
        for future in completed:
            try:
                result = future.result()
            except KilledWorker as error:
                result = {
                    "name": names[future.key],
                    "status": "crash",
                    "reason": f"Dask workers died running it: {error}",
                }
            except Exception as error:
                result = {"name": names[future.key], "status": "error", "reason": one_line(error)}
            self.futures.remove(future)
            future.release()
            yield result
            request = next(requests, None)
            if request is not None:
                submit(request)

    def close(self) -> None:
        if self.futures:
            self.client.cancel(self.futures)
        for owned in self.own:
            owned.close()
        for address in self.local_workers:
            worker = _dask_workers.pop(address, None)
            if worker is not None:
                worker.close()


# --- the batch ------------------------------------------------------------------------------------


def _expected_work(job: Job) -> int:
    """The size of a sample's model.py: a cheap guess at how long it takes."""
    try:
        return (job.folder / "model.py").stat().st_size
    except OSError:
        return 0


def run(
    batch: Batch,
    *,
    workers: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    scheduler: object = None,
    resume: bool | None = None,
    progress: bool = True,
    on_record: Callable[[dict], None] | None = None,
) -> BatchSummary:
    """Extract every sample of `batch`; Ctrl-C stops it with the summary of what is done.

    scheduler: None for worker processes here, "local" for a local Dask cluster, a Dask scheduler
    address, a `distributed.Client`, or "in-process" to run the samples in this process. resume: as
    planned (`plan(resume=...)`), unless given here.
    """
    from tqdm.auto import tqdm

    resume = batch.resume if resume is None else resume
    workers = workers or cores()
    out, settings, layout = batch.out, batch.settings, batch.layout
    pool: InProcessPool | LocalPool | DaskPool
    if scheduler == "in-process":
        pool = InProcessPool()
    elif scheduler is not None:
        pool = DaskPool(scheduler, workers, timeout)
    else:
        pool = LocalPool(workers, timeout)
    try:
        prepare_output(out)
    except OutputError:
        pool.close()
        raise
    clean_stale_staging(out)
    job_names = [job.name for job in batch.jobs]
    in_batch = set(job_names)
    # other samples' records are kept; this batch's own only when resuming (else they are redone)
    records: dict[str, dict] = {n: r for n, r in batch.previous.items() if resume or n not in in_batch}
    bar = tqdm(total=len(batch.jobs), desc="bwd-extract", unit="sample", file=sys.stderr, disable=not progress)

    order = list(batch.previous) + [n for n in job_names if n not in batch.previous]  # a summary's rows stay put

    def ordered() -> list[dict]:
        return [records[n] for n in order if n in records]

    def finish(record: dict) -> None:
        records[record["name"]] = record
        write_summary(out, settings, ordered(), layout)
        bar.update(1)
        bar.set_postfix_str(record["name"][-40:])
        if on_record is not None:
            on_record(record)

    todo = []
    for job in batch.jobs:
        if resume and is_complete(out, job.name, settings, layout=layout):
            kept = batch.previous.get(job.name, {})
            kept = kept if kept.get("settings") == settings else {}
            finish({**kept, "name": job.name, "status": "skipped", "settings": settings})
            continue
        try:
            for split in SPLITS:
                check_target(out, split, job.name, layout)
        except OutputError as error:
            finish({"name": job.name, "status": "error", "reason": str(error)})
            continue
        todo.append(job)

    todo.sort(key=_expected_work, reverse=True)  # the longest first: workers finish closer together
    in_flight: dict[str, dict] = {}

    def requests() -> Iterator[dict]:
        for job in todo:
            request = make_request(batch, job)
            in_flight[job.name] = request
            yield request

    interrupted = False
    try:
        for result in pool.results(requests(), len(todo)):
            request = in_flight.pop(result["name"])
            if result["status"] == "ok":
                try:
                    store(out, request, result)
                except OutputError as error:
                    result = {"name": result["name"], "status": "error", "reason": str(error)}
            result.pop("files", None)
            finish(result)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        pool.close()
        bar.close()
    return BatchSummary(out, settings, [records[n] for n in job_names if n in records], interrupted)


def extract_many(
    paths: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    *,
    root: str | os.PathLike | None = None,
    partitioner: str = "default",
    memory_budget: float | None = None,
    mode: str = "real",
    device: str = "cpu",
    workers: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    client: object = None,
    resume: bool = False,
    progress: bool = True,
    layout: Layout | None = None,
    validate: bool = False,
) -> BatchSummary:
    """Extract many GraphNet samples into `out` as `bwd-extract` does, with a progress bar.

    Writes `out/eval_forward/REL`, `out/train_forward/REL/NAME_train_forward`,
    `out/train_backward/REL/NAME_train_backward` (REL: the sample's path relative to `root`, by default the
    samples' common parent; NAME: its folder's name), as GraphNet's extractor does, and `out/summary.json`.
    `layout="flat"` writes `train_*/REL` instead. validate: run GraphNet's validation steps on every written
    sample and write its `graph_hash.txt`. Each sample runs in a worker process (`workers`, default one per
    core; `timeout` seconds each), or on Dask with `client` (a `distributed.Client`, a scheduler address,
    or "local"). Returns the summary, one row per sample.
    """
    batch = plan(
        paths,
        out,
        root=root,
        partitioner=partitioner,
        memory_budget=memory_budget,
        mode=mode,
        device=device,
        resume=resume,
        layout=layout,
        validate=validate,
    )
    return run(batch, workers=workers, timeout=timeout, scheduler=client, progress=progress)
