"""The plan of a batch: every sample named and every path checked before any work, `resume` decided once."""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..core.errors import BatchError, OutputError
from ..core.kinds import MODES, Backend, Mode
from ..core.partitioners import resolve_for_backend
from ..graphnet.writer import LAYOUTS, SPLITS, Layout, output_name
from .records import DEFAULT_BACKEND, SampleRecord, Settings
from .summary import read_previous

if TYPE_CHECKING:
    from collections.abc import Sequence

PathLike = str | os.PathLike


@dataclass(frozen=True)
class ListBase:
    """The folder a list file's relative entries were resolved against, and how it was chosen."""

    folder: Path
    list_file: Path
    how: str


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
    settings: Settings
    device: str = "cpu"
    previous: dict[str, SampleRecord] = field(default_factory=dict)
    """Records of earlier runs from `summary.json`, by name."""
    layout: Layout = "graphnet"
    validate: bool = False
    """Run GraphNet's validation steps on every written sample, in the worker that wrote it."""
    resume: bool = False
    """Skip samples whose outputs are complete and made with these settings; decided here, once."""

    def resuming(self, resume: bool | None) -> Batch:
        """This batch as `run(resume=...)` asks: itself when None or the same; else re-planned (deprecated)."""
        if resume is None or resume == self.resume:
            return self
        warnings.warn(
            "run(resume=...) that differs from the plan is deprecated: pass resume to plan().",
            DeprecationWarning,
            stacklevel=3,
        )
        previous = read_previous(self.out, resume)[0] if self.out.is_dir() else {}
        return dataclasses.replace(self, previous=previous, resume=resume)


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _list_entries(list_file: Path) -> list[str]:
    if not list_file.is_file():
        raise BatchError(f"the list {list_file} is not a file: give a file of sample paths, one a line.")
    lines = (line.strip() for line in list_file.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _list_base(entries: list[str], list_file: Path, root: PathLike | None) -> ListBase:
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
    paths: Sequence[PathLike], list_file: PathLike | None, root: PathLike | None
) -> tuple[list[Path], ListBase | None]:
    folders = [Path(os.path.abspath(p)) for p in paths]
    if list_file is None:
        return folders, None
    list_path = Path(list_file)
    entries = _list_entries(list_path)
    base = _list_base(entries, list_path, root)
    folders += [Path(os.path.abspath(base.folder / entry)) for entry in entries]
    return folders, base


def _samples_root(folders: list[Path], root: PathLike | None, list_base: Path | None) -> Path:
    """`root` if given; else the folder list entries are relative to when it holds every sample; else the
    samples' common parent."""
    if root is not None:
        root_path = Path(os.path.abspath(root))
        for folder in folders:
            if not _inside(folder, root_path) or folder == root_path:
                raise BatchError(
                    f"the sample {folder} is not inside the samples root {root_path}: pass another --root."
                )
        return root_path
    if list_base is not None and all(folder != list_base and _inside(folder, list_base) for folder in folders):
        return list_base
    return Path(os.path.commonpath([folder.parent for folder in folders]))


def _settings(
    partitioner: str | None, memory_budget: float | None, mode: Mode, validate: bool, backend: Backend
) -> Settings:
    """What makes an output, refusing a mode, backend or partitioner a worker process could not use (a
    partitioner the backend's partition never uses is refused in `resolve_for_backend`'s words)."""
    if mode not in MODES:
        raise BatchError(f"unknown mode {mode!r}: use {' or '.join(repr(m) for m in MODES)}.")
    if partitioner is not None and not isinstance(partitioner, str):
        raise BatchError("a batch takes a registered partitioner name: worker processes cannot share a function.")
    resolved = resolve_for_backend(partitioner, memory_budget, backend)
    settings: Settings = {
        "partitioner": resolved.name,
        "memory_budget": resolved.memory_budget,
        "mode": mode,
        "torch": torch.__version__,
    }
    if validate:
        settings["validate"] = True  # only then: outputs written before validation existed keep their settings
    if backend != DEFAULT_BACKEND:
        settings["backend"] = backend  # only then: outputs written before --backend existed keep their settings
    return settings


def checked_device(device: object) -> str:
    """The device as the user named it (`cuda:1` stays `cuda:1`, `xpu` stays `xpu`), once torch can read it as a
    device; nothing runs there yet, so no such device need be present."""
    try:
        if not isinstance(device, str) or not device:
            raise TypeError
        torch.device(device)
    except (RuntimeError, TypeError):
        raise BatchError(
            f"device {device!r} is not a device torch knows: name one such as 'cpu', 'cuda', 'cuda:1', 'xpu' or 'mps'."
        ) from None
    return device


def _jobs(paths: Sequence[PathLike], list_file: PathLike | None, root: PathLike | None) -> tuple[Path, list[Job]]:
    """The samples root and one job per sample, refusing samples listed twice or nested in one another."""
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
    return samples_root, jobs


def _check_output(out: Path, jobs: list[Job]) -> None:
    """Refuse an output folder that is a file, lies inside an input, or whose outputs would overlap one."""
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


def plan(
    paths: Sequence[PathLike],
    out: PathLike,
    *,
    list_file: PathLike | None = None,
    root: PathLike | None = None,
    partitioner: str | None = None,
    memory_budget: float | None = None,
    mode: Mode = "real",
    device: str = "cpu",
    resume: bool = False,
    layout: Layout | None = None,
    validate: bool = False,
    backend: Backend = DEFAULT_BACKEND,
) -> Batch:
    """Name every sample and check every path; one-sentence errors, and nothing written (`run` creates `out`).

    layout: None keeps the layout an existing output folder was written with, else GraphNet's ("graphnet").
    resume: skip samples whose outputs are complete with these settings and made from the same input files (and
    keep their records). device: where the samples' tensors are built, kept as named (`cuda:1`, `xpu`, `mps`).
    backend: whose partition each sample's outputs hold, as `extract`'s; partitioner None is that backend's own
    default ("default" after aot_eager, min-cut after Inductor).
    """
    if layout is not None and layout not in LAYOUTS:
        raise BatchError(f"unknown layout {layout!r}: use 'graphnet' (GraphNet's own) or 'flat'.")
    settings = _settings(partitioner, memory_budget, mode, validate, backend)
    device = checked_device(device)
    samples_root, jobs = _jobs(paths, list_file, root)
    out_path = Path(out)
    _check_output(out_path, jobs)
    previous, previous_layout = read_previous(out_path, resume) if out_path.is_dir() else ({}, None)
    chosen: Layout = layout or previous_layout or "graphnet"
    return Batch(out_path, samples_root, jobs, settings, device, previous, chosen, validate, resume)
