"""Scratch folders for worker processes: a sample's copy, its outputs and the worker's log, in one folder.

Each folder is named with its owner's pid and names every process that uses it, so that what a killed run
left (kill -9 skips every `finally`) is removed by the next run on this host, and only that: a folder
without our owner file, another user's, or one whose processes live is never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from .lock import Holder, holder_of, process_gone

SCRATCH_PREFIX = "bwd_widgets_work_"
SCRATCH_OWNER = ".bwd_widgets_owner.json"
SCRATCH_ENV = "BWD_WIDGETS_WORKER_SCRATCH"
"""Where a worker process puts each sample's scratch folder: its `ScratchFolder`."""


class ScratchFolder:
    """A fresh folder in the temporary folder, owned by this process and the worker processes it adds."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}_"))
        self.users: list[Holder] = []
        self.add(os.getpid())

    def add(self, pid: int) -> None:
        """Name one more process using the folder: it is stale only once they are all gone."""
        self.users.append(holder_of(pid))
        draft = self.path / f"{SCRATCH_OWNER}.draft"
        draft.write_text(json.dumps({"users": self.users}))
        os.replace(draft, self.path / SCRATCH_OWNER)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _users(folder: Path) -> list[Holder] | None:
    """The processes a scratch folder of ours names, or None when it is not provably ours."""
    try:
        if folder.is_symlink() or folder.stat().st_uid != os.getuid():
            return None
        users = json.loads((folder / SCRATCH_OWNER).read_text())["users"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(users, list) or not users:
        return None
    if not all(isinstance(user, dict) and isinstance(user.get("pid"), int) for user in users):
        return None
    return users


def clean_stale_scratch() -> list[Path]:
    """Remove the scratch folders of runs whose processes are all gone from this host (a killed client)."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(SCRATCH_PREFIX + "*"):
        users = _users(folder)
        if users is not None and all(process_gone(user) for user in users):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed
