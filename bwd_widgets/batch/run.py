"""Running a planned batch: pick the pool, skip what `resume` finds done, extract the rest, keep the summary.

The client (this process) reads each sample's files and sends them out; a worker process loads, extracts and
writes into its own scratch folder and returns the files; the client stages them with a copy of the input
and swaps all three splits into place at once. `summary.json` is replaced after every sample, so a killed
batch keeps what it did and `resume` goes on from there.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING

from ..core.cores import cores
from ..core.errors import BatchError, OutputError
from ..core.text import visible
from ..graphnet.writer import SPLITS, Layout, check_target, clean_stale_staging, is_complete, prepare_output
from .dask import DaskPool, TLSFiles
from .lock import OutputLock, describe
from .plan import Batch, Job, PathLike, plan
from .pool import InProcessPool, LocalPool, Pool
from .records import DEFAULT_BACKEND
from .scratch import clean_stale_scratch
from .summary import BatchSummary, read_previous, write_summary
from .transport import files_digest, make_request, read_files, store

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from ..core.kinds import Backend, Mode
    from .records import SampleRecord, SampleRequest

DEFAULT_TIMEOUT = 900.0


def _pool(scheduler: object, workers: int, timeout: float, tls: TLSFiles | None) -> Pool:
    if tls is not None and (not isinstance(scheduler, str) or scheduler in ("local", "in-process")):
        raise BatchError(
            "the TLS files are for a Dask scheduler at a tls:// address: pass --scheduler tls://HOST:PORT."
        )
    if scheduler == "in-process":
        return InProcessPool()
    if scheduler is not None:
        return DaskPool(scheduler, workers, timeout, tls)
    return LocalPool(workers, timeout)


def _expected_work(job: Job) -> int:
    """The size of a sample's model.py: a cheap guess at how long it takes."""
    try:
        return (job.folder / "model.py").stat().st_size
    except OSError:
        return 0


class _Records:
    """The summary's records as the batch goes: each finished sample rewrites `summary.json` at once.

    Every earlier record stays until its sample is redone, so a batch stopped halfway drops none (its outputs
    are still there). A summary's rows stay where they were; new samples follow in the batch's order.
    """

    def __init__(self, batch: Batch, progress: bool, on_record: Callable[[SampleRecord], None] | None):
        from tqdm.auto import tqdm

        self.batch, self.on_record = batch, on_record
        names = [job.name for job in batch.jobs]
        self.records = dict(batch.previous)
        self.done: set[str] = set()
        """This batch's samples that have their record from this batch."""
        self.order = list(batch.previous) + [n for n in names if n not in batch.previous]
        self.bar = tqdm(total=len(batch.jobs), desc="bwd-extract", unit="sample", file=sys.stderr, disable=not progress)

    def finish(self, record: SampleRecord) -> None:
        self.records[record["name"]] = record
        self.done.add(record["name"])
        batch = self.batch
        write_summary(
            batch.out, batch.settings, [self.records[n] for n in self.order if n in self.records], batch.layout
        )
        self.bar.update(1)
        self.bar.set_postfix_str(visible(record["name"])[-40:])
        if self.on_record is not None:
            self.on_record(record)

    def summary(self, interrupted: bool) -> BatchSummary:
        """This batch's records, in its order."""
        records = [self.records[job.name] for job in self.batch.jobs if job.name in self.done]
        return BatchSummary(self.batch.out, self.batch.settings, records, interrupted)


def _to_extract(batch: Batch, records: _Records) -> list[Job]:
    """The jobs left to do, longest first; a resumed sample is recorded `skipped`, an unwritable one `error`."""
    out, settings, layout = batch.out, batch.settings, batch.layout
    todo = []
    for job in batch.jobs:
        kept = batch.previous.get(job.name)
        if batch.resume and _unchanged(job, kept) and is_complete(out, job.name, settings, layout=layout):
            skipped: SampleRecord = {"name": job.name, "status": "skipped", "settings": settings}
            if kept is not None and kept.get("settings") == settings:
                skipped = {**kept, **skipped}  # its figures are still true of its outputs
            records.finish(skipped)
            continue
        try:
            for split in SPLITS:
                check_target(out, split, job.name, layout)
        except OutputError as error:
            records.finish({"name": job.name, "status": "error", "reason": str(error)})
            continue
        todo.append(job)
    todo.sort(key=_expected_work, reverse=True)  # the longest first: workers finish closer together
    return todo


def _unchanged(job: Job, kept: SampleRecord | None) -> bool:
    """Whether the sample's input files are those its record says its outputs were made from. A record without a
    digest (written before there was one) or none at all proves nothing: the sample is done again."""
    digest = None if kept is None else kept.get("inputs_digest")
    if digest is None:
        return False
    try:
        return files_digest(read_files(job.folder)) == digest
    except OSError:
        return False  # the extraction reads it again and says why it cannot


def _extract(batch: Batch, todo: list[Job], pool: Pool, records: _Records) -> None:
    """Send the jobs to the pool and store each result as it comes back."""
    in_flight: dict[str, SampleRequest] = {}

    def requests() -> Iterator[SampleRequest]:
        for job in todo:
            request = make_request(batch, job)
            in_flight[job.name] = request
            yield request

    for result in pool.results(requests(), len(todo)):
        request = in_flight.pop(result["name"])
        if result["status"] == "ok":
            try:
                store(batch.out, request, result)
                result["inputs_digest"] = files_digest(request["files"])  # what `resume` compares the files with
            except OutputError as error:
                result = {"name": result["name"], "status": "error", "reason": str(error)}
        result.pop("files", None)
        records.finish(result)


def run(
    batch: Batch,
    *,
    workers: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    scheduler: object = None,
    resume: bool | None = None,
    progress: bool = True,
    on_record: Callable[[SampleRecord], None] | None = None,
    tls: TLSFiles | None = None,
) -> BatchSummary:
    """Extract every sample of `batch`; Ctrl-C stops it with the summary of what is done.

    scheduler: None for worker processes here, "local" for a local Dask cluster, a Dask scheduler
    address, a `distributed.Client`, or "in-process" to run the samples in this process. Results from a
    Dask scheduler are unpickled here: name only a cluster you trust. tls: the certificate files for a
    tls:// scheduler (None: Dask's config, `distributed.comm.tls.*`). resume: decided by the plan
    (`plan(resume=...)`); kept here for old callers, None or the plan's own value. One batch at a time
    writes an output folder: another one is refused (BatchError) naming it.
    """
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise BatchError(
            f"workers={workers!r}: pass a whole number of worker processes, 1 or more (or None: one per core)."
        )
    batch = batch.resuming(resume)
    pool = _pool(scheduler, workers or cores(), timeout, tls)
    try:
        prepare_output(batch.out)
        with OutputLock(batch.out) as lock:
            return _run_locked(batch, lock, pool, progress, on_record)
    finally:
        pool.close()


def _run_locked(
    batch: Batch, lock: OutputLock, pool: Pool, progress: bool, on_record: Callable[[SampleRecord], None] | None
) -> BatchSummary:
    """The batch, holding the output folder's lock: what killed runs left is cleaned, the summary read again."""
    if lock.took_over is not None:
        print(
            visible(
                f"bwd-extract: the lock of a batch that is gone ({describe(lock.took_over)}) is taken over; "
                "its leftovers are removed."
            ),
            file=sys.stderr,
        )
    clean_stale_staging(batch.out)
    clean_stale_scratch()
    # another batch may have finished since the plan read the summary: keep its records too
    batch = dataclasses.replace(batch, previous=read_previous(batch.out, batch.resume)[0])
    records = _Records(batch, progress, on_record)
    interrupted = False
    try:
        _extract(batch, _to_extract(batch, records), pool, records)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        records.bar.close()
    return records.summary(interrupted)


def extract_many(
    paths: Sequence[PathLike],
    out: PathLike,
    *,
    root: PathLike | None = None,
    partitioner: str | None = None,
    memory_budget: float | None = None,
    mode: Mode = "real",
    device: str = "cpu",
    workers: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    client: object = None,
    resume: bool = False,
    progress: bool = True,
    layout: Layout | None = None,
    validate: bool = False,
    tls: TLSFiles | None = None,
    backend: Backend = DEFAULT_BACKEND,
) -> BatchSummary:
    """Extract many GraphNet samples into `out` as `bwd-extract` does, with a progress bar.

    Writes `out/eval_forward/REL`, `out/train_forward/REL/NAME_train_forward`,
    `out/train_backward/REL/NAME_train_backward` (REL: the sample's path relative to `root`, by default the
    samples' common parent; NAME: its folder's name), as GraphNet's extractor does, and `out/summary.json`.
    `layout="flat"` writes `train_*/REL` instead. validate: run GraphNet's validation steps on every written
    sample and write its `graph_hash.txt`. Each sample runs in a worker process (`workers`, default one per
    core; `timeout` seconds each), or on Dask with `client` (a `distributed.Client`, a scheduler address,
    or "local"; results come back pickled from it, so name only a cluster you trust; `tls`: certificate
    files for a tls:// scheduler). backend: whose partition the outputs hold, as `extract`'s (recorded in
    their settings where it is not the default). Returns the summary, one row per sample.
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
        backend=backend,
    )
    return run(batch, workers=workers, timeout=timeout, scheduler=client, progress=progress, tls=tls)
