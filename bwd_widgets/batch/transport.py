"""Files travel as bytes, no shared file system assumed: the client reads a sample into its request, and
stages what a worker returns with a copy of the input, swapping all splits into place at once."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import OutputError
from ..graphnet.writer import SPLITS, TRAIN_SPLITS, install, new_stamp, sample_path, staging, write_eval_copy

if TYPE_CHECKING:
    from .plan import Batch, Job
    from .records import SampleRecord, SampleRequest


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


def files_digest(files: dict[str, bytes]) -> str:
    """sha256 of a sample's files: each relative path and its bytes, in path order, each with its length, so
    that no two different sets of files read the same."""
    digest = hashlib.sha256()
    for relative in sorted(files):
        for part in (relative.encode(), files[relative]):
            digest.update(len(part).to_bytes(8, "little"))
            digest.update(part)
    return digest.hexdigest()


def unpack(files: dict[str, bytes], folder: Path) -> None:
    """Write `files` under `folder`, refusing any path that would leave it."""
    for relative, data in files.items():
        parts = relative.split("/")
        if relative.startswith("/") or any(part in ("", ".", "..") for part in parts):
            raise OutputError(f"refusing the file path {relative!r}: it would leave {folder}.")
        path = folder.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def make_request(batch: Batch, job: Job) -> SampleRequest:
    """What a worker needs for one sample: its files, the settings, and the stamp its outputs carry."""
    request: SampleRequest = {
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


def store(out: Path, request: SampleRequest, result: SampleRecord) -> None:
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
