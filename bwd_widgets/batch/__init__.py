"""Batch extraction of GraphNet samples: one worker process per sample at a time, or a Dask cluster.

`plan` refuses bad input before any work and decides `resume`; `run` extracts (`pool`: worker processes
here, `dask`: a Dask cluster, `worker`: what runs in them, `transport`: files as bytes both ways) and keeps
`summary.json` (`summary`) up to date; `records` types what crosses processes. `extract_many` is both.
"""

from ..core.cores import cores
from .dask import DaskPool, TLSFiles, run_on_dask_worker
from .plan import Batch, Job, ListBase, plan
from .pool import InProcessPool, LocalPool, Pool, WorkerProcess
from .records import DEFAULT_BACKEND, FAILED, FIGURES, STATUSES, SampleRecord, SampleRequest, Settings, Status
from .run import DEFAULT_TIMEOUT, extract_many, run
from .summary import SUMMARY_WRITER, BatchSummary, read_previous, validation_counts, write_summary
from .transport import make_request, read_files, store, unpack
from .worker import run_sample, serve

__all__ = [
    "DEFAULT_BACKEND",
    "DEFAULT_TIMEOUT",
    "FAILED",
    "FIGURES",
    "STATUSES",
    "SUMMARY_WRITER",
    "Batch",
    "BatchSummary",
    "DaskPool",
    "InProcessPool",
    "Job",
    "ListBase",
    "LocalPool",
    "Pool",
    "SampleRecord",
    "SampleRequest",
    "Settings",
    "Status",
    "TLSFiles",
    "WorkerProcess",
    "cores",
    "extract_many",
    "make_request",
    "plan",
    "read_files",
    "read_previous",
    "run",
    "run_on_dask_worker",
    "run_sample",
    "serve",
    "store",
    "unpack",
    "validation_counts",
    "write_summary",
]
