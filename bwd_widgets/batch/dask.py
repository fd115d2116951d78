"""The same batch on a Dask cluster: requests go out with their files, records come back with theirs.

Records come back pickled, and unpickling runs code: only a scheduler one trusts may be named, over TLS
(`TLSFiles`, or Dask's own `distributed.comm.tls.*` config) where the network is not trusted either.
Each Dask worker drives one worker process of its own (`WorkerProcess`), so a sample that crashes or
hangs costs that process, not the Dask worker; a lost Dask worker's samples are rescheduled by Dask.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import uuid
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

from ..core.errors import BatchError, one_line
from .pool import WorkerProcess
from .scratch import clean_stale_scratch

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .records import SampleRecord, SampleRequest

_dask_workers: dict[str, WorkerProcess] = {}
"""The worker process of each Dask worker living in this process, by the Dask worker's address."""
_dask_locks: dict[str, threading.Lock] = {}
_dask_locks_lock = threading.Lock()


def run_on_dask_worker(request: SampleRequest, timeout: float) -> SampleRecord:
    """A Dask task: the sample runs in this Dask worker's own worker process, one at a time, so a crash or
    a hang costs that process, not the Dask worker."""
    from distributed import get_worker

    dask_worker = get_worker()
    with _dask_locks_lock:
        lock = _dask_locks.setdefault(dask_worker.address, threading.Lock())
    with lock:
        worker = _dask_workers.get(dask_worker.address)
        if worker is None or not worker.alive:
            clean_stale_scratch()  # what a killed Dask worker on this host left
            worker = _dask_workers[dask_worker.address] = WorkerProcess(threads=max(1, dask_worker.state.nthreads))
        return worker.run(request, timeout)


@dataclass(frozen=True)
class TLSFiles:
    """Certificate files for a tls:// scheduler, as `dask scheduler --tls-ca-file --tls-cert --tls-key` takes them."""

    ca_file: str
    """The CA that signed the scheduler's certificate: a scheduler without such a certificate is refused."""
    cert: str | None = None
    """This client's certificate (its key too, when `key` is None), for a scheduler that asks for one."""
    key: str | None = None

    def security(self) -> Any:
        from distributed.security import Security

        for path in (self.ca_file, self.cert, self.key):
            if path is not None and not os.path.isfile(path):
                raise BatchError(f"the TLS file {path} is not a file: pass the paths of your PEM files.")
        if self.key is not None and self.cert is None:
            raise BatchError("--tls-key needs --tls-cert: pass the certificate the key belongs to.")
        return Security(
            tls_ca_file=self.ca_file, tls_client_cert=self.cert, tls_client_key=self.key, require_encryption=True
        )


def _security(address: str, tls: TLSFiles | None) -> Any:
    """The TLS settings for `address`: `tls`, else Dask's own config (`distributed.comm.tls.*`)."""
    from distributed.security import Security

    if tls is None:
        security = Security()  # reads distributed.comm.tls.* from Dask's config
        if address.startswith("tls://") and getattr(security, "tls_ca_file", None) is None:
            raise BatchError(
                f"the scheduler {address} speaks TLS: pass --tls-ca-file (and --tls-cert, --tls-key if it asks for a "
                "client certificate), or set distributed.comm.tls.* in Dask's config."
            )
        return security
    if not address.startswith("tls://"):
        raise BatchError(f"the TLS files are for a tls:// scheduler, not {address}: write it as tls://HOST:PORT.")
    return tls.security()


def _client(scheduler: object, workers: int, tls: TLSFiles | None) -> tuple[Any, list[Any], list[str]]:
    """A client of the cluster `scheduler` names; what this pool started (to close) and its local workers."""
    from distributed import Client, LocalCluster

    if isinstance(scheduler, Client):
        return scheduler, [], []
    if scheduler == "local":
        # Dask workers as threads of this process: each drives its own worker process, which does the work
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=False,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )
        client = Client(cluster)
        return client, [client, cluster], list(cluster.scheduler_info["workers"])
    address = str(scheduler)
    if not re.fullmatch(r"(tcp|tls|ucx|ws|wss)://[^\s/:]+(:\d+)?/?", address):
        raise BatchError(
            f"{address!r} is not a Dask scheduler address: write it as tcp://HOST:PORT (what `dask scheduler` "
            "prints), or pass --scheduler local."
        )
    security = _security(address, tls)
    try:
        client = Client(address, timeout=10, security=security)
    except (OSError, TimeoutError, ValueError) as error:
        raise BatchError(
            f"cannot reach the Dask scheduler at {scheduler} ({one_line(error)}): start one with "
            "`dask scheduler`, or pass --scheduler local."
        ) from None
    return client, [client], []


class DaskPool:
    """The same batch on a Dask cluster: requests go out with their files, results come back with theirs.

    A lost Dask worker's samples are rescheduled by Dask on the others; each result reaches the client once.
    """

    def __init__(self, scheduler: object, workers: int, timeout: float, tls: TLSFiles | None = None):
        try:
            import distributed  # noqa: F401  (refuse early, with the command that installs it)
        except ImportError:
            raise BatchError("Dask is not installed: pip install 'bwd_widgets[dask]'.") from None
        self.timeout = timeout
        self.futures: list[Any] = []
        self.client, self.own, self.local_workers = _client(scheduler, workers, tls)
        try:
            self.client.wait_for_workers(1, timeout=60)
        except TimeoutError:
            self.close()
            raise BatchError(
                f"the Dask cluster at {scheduler} has no workers: start some with `dask worker`."
            ) from None

    def results(self, requests: Iterator[SampleRequest], count: int) -> Iterator[SampleRecord]:
        from distributed import as_completed
        from distributed.scheduler import KilledWorker

        window = 2 * max(1, sum(self.client.nthreads().values()))
        names: dict[str, str] = {}
        completed = as_completed()

        def submit(request: SampleRequest) -> None:
            future = self.client.submit(
                run_on_dask_worker, request, self.timeout, key=f"bwd-extract-{uuid.uuid4().hex}", pure=False
            )
            names[future.key] = request["name"]
            self.futures.append(future)
            completed.add(future)

        for request in islice(requests, window):
            submit(request)
        for future in completed:
            result: SampleRecord
            try:
                result = future.result()
            except KilledWorker as error:
                result = {
                    "name": names[future.key],
                    "status": "crash",
                    "reason": f"Dask workers died running it: {error}",
                }
            except Exception as error:  # noqa: BLE001 - a sample's own failure, whatever it is, is its record
                result = {"name": names[future.key], "status": "error", "reason": one_line(error)}
            self.futures.remove(future)
            future.release()
            yield result
            next_request = next(requests, None)
            if next_request is not None:
                submit(next_request)

    def close(self) -> None:
        if self.futures:
            self.client.cancel(self.futures)
        for owned in self.own:
            owned.close()
        for address in self.local_workers:
            worker = _dask_workers.pop(address, None)
            if worker is not None:
                worker.close()
