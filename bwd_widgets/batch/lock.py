"""One batch at a time per output folder: two would each rewrite `summary.json` from their own records.

The lock is `OUT/.bwd_widgets.lock`, naming its holder (pid, host, start time, command), and an `flock` on
it, which the kernel drops when the holder dies; a lock whose holder is gone from this host is taken over.
Whether a holder is gone is graphnet/writer.py's `process_gone` (a pid dead, a zombie, or reused by another
process), the check its staging folders use too; it is also how scratch folders of a killed run are told
from those of a live one.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import uuid
from typing import TYPE_CHECKING, cast

from ..core.errors import BatchError
from ..graphnet.writer import Holder as Holder  # batch/scratch.py names its users by the same record and check
from ..graphnet.writer import holder_of as holder_of
from ..graphnet.writer import process_gone as process_gone

if TYPE_CHECKING:
    from pathlib import Path

LOCK_NAME = ".bwd_widgets.lock"
LOCK_WRITER = "bwd-extract"
_LOCK_DRAFT = ".bwd_widgets_lock_"
"""A lock is written under a draft name, then linked to `LOCK_NAME`, so that it never appears half written."""


def _read_holder(path: Path) -> Holder | None:
    """The holder a lock file names, or None when the file is not a lock this package wrote."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("written_by") != LOCK_WRITER:
        return None
    if not isinstance(document.get("pid"), int) or not isinstance(document.get("host"), str):
        return None
    return cast("Holder", {key: document[key] for key in Holder.__annotations__ if key in document})


def describe(holder: Holder) -> str:
    started = f", started {holder['started']}" if holder.get("started") else ""
    command = f": {holder['command']}" if holder.get("command") else ""
    return f"pid {holder['pid']} on {holder['host']}{started}{command}"


def _try_flock(fd: int) -> bool:
    """Take the kernel's lock without waiting; False when another process holds it. A file system without
    locks answers True: the holder the file names decides then."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == path.stat().st_ino
    except OSError:
        return False


class OutputLock:
    """Held while a batch writes `out`; `took_over` names the gone holder whose lock it took, if any."""

    def __init__(self, out: Path):
        self.out, self.path = out, out / LOCK_NAME
        self.fd: int | None = None
        self.took_over: Holder | None = None

    def __enter__(self) -> OutputLock:
        for _ in range(20):  # another batch may take or free the lock between two looks
            if self._create():
                self._clean_drafts()
                return self
            self._take_over_or_refuse()
        raise BatchError(f"the output folder {self.out} is being locked and unlocked by other batches: rerun later.")

    def __exit__(self, *exc_info: object) -> None:
        if self.fd is None:
            return
        if _same_file(self.fd, self.path):
            self.path.unlink(missing_ok=True)
        os.close(self.fd)
        self.fd = None

    def _create(self) -> bool:
        """Write the lock under a draft name, lock it, and link it into place; False when a lock is there."""
        draft = self.out / f"{_LOCK_DRAFT}{os.getpid()}_{uuid.uuid4().hex}.json"
        fd = os.open(draft, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, (json.dumps({"written_by": LOCK_WRITER, **holder_of()}, indent=2) + "\n").encode())
            _try_flock(fd)
            os.link(draft, self.path)
        except FileExistsError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        finally:
            draft.unlink(missing_ok=True)
        self.fd = fd
        return True

    def _take_over_or_refuse(self) -> None:
        """Remove a lock whose holder is gone from this host; refuse, naming the holder, any other."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return  # freed meanwhile
        try:
            free = _try_flock(fd)
            if not _same_file(fd, self.path):
                return  # replaced meanwhile
            holder = _read_holder(self.path)
            if holder is None:
                raise BatchError(
                    f"{self.path} is not a lock that bwd-extract wrote: move it away, or pass another --out."
                )
            if not free or not process_gone(holder):
                raise BatchError(self._in_use(holder))
            self.path.unlink()
            self.took_over = holder
        finally:
            os.close(fd)

    def _in_use(self, holder: Holder) -> str:
        here = holder["host"] == socket.gethostname()
        unless = "" if here else f" (if it is no longer running, delete {self.path})"
        return (
            f"the output folder {self.out} is in use by another batch ({describe(holder)}): wait for it to "
            f"end{unless}, or pass another --out."
        )

    def _clean_drafts(self) -> None:
        """Drafts of a lock whose writer was killed between writing and linking it."""
        for draft in self.out.glob(f"{_LOCK_DRAFT}*.json"):
            holder = _read_holder(draft)
            if holder is not None and process_gone(holder):
                draft.unlink(missing_ok=True)
