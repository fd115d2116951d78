"""Write GraphNet samples of an extraction, with the layout and files of GraphNet's own extractor.

GraphNet's `BackwardGraphExtractor` writes `train_forward/<rel>/<basename>_train_forward/` (and the same
for `train_backward`), each holding `model.py`, `weight_meta.py`, `input_meta.py`,
`input_tensor_constraints.py` and `graph_net.json`; `eval_forward/<rel>` is a copy of the input sample.
We write the same (`layout="flat"` keeps the layout of bwd_widgets 0.1: `train_backward/<rel>/`), plus
`graph_hash.txt` when the sample is validated the way GraphNet's validator does it.

A user's folders are never touched: names stay inside the output folder, and an existing output is
replaced only when its `graph_net.json` carries our marker and it holds nothing we did not write (but
the `graph_hash.txt` that GraphNet's validator adds). All splits of a sample are staged, then swapped
in with renames, the old ones deleted last.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Literal, Protocol, TypedDict

import torch

from ..core.codegen import graphnet_code
from ..core.errors import OutputError
from ..core.units import format_bytes
from .files import INLINE_DATA_LIMIT as INLINE_DATA_LIMIT
from .files import INLINE_FLOAT_LIMIT as INLINE_FLOAT_LIMIT
from .files import MARKER, for_graphnet_tools, placeholder_values, write_sample
from .files import meta_class as meta_class
from .files import sample_files as sample_files

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from ..core.kinds import Mode
    from ..core.trace import Partition


class Extracted(Protocol):
    """What the writer reads of an extraction (a `BackwardExtraction`). A protocol, not an import:
    results depend on the writer (`extraction.save_graphnet`) and never the other way."""

    @property
    def partitions(self) -> list[Partition]: ...

    @property
    def partitioner(self) -> str: ...

    @property
    def memory_budget(self) -> float | None: ...

    @property
    def mode(self) -> Mode: ...


EVAL_SPLIT = "eval_forward"
TRAIN_SPLITS = ("train_forward", "train_backward")
SPLITS = (EVAL_SPLIT, *TRAIN_SPLITS)
Layout = Literal["graphnet", "flat"]
LAYOUTS: tuple[Layout, ...] = ("graphnet", "flat")
"""graphnet: as GraphNet's extractor nests its outputs (the default); flat: `split/<rel>/`, as bwd_widgets 0.1 did."""
VALIDATOR_FILES = frozenset({"graph_hash.txt"})
"""Files GraphNet's validator writes into a sample it checks: a folder of ours holding them is still ours."""
STAGING_PREFIX = ".bwd_widgets_tmp_"
STAGING_OWNER = ".bwd_widgets_staging.json"
MIN_FREE_BYTES = 16 * 2**20
_SUBGRAPH = re.compile(r"subgraph_\d+")


# --- names, settings, markers -------------------------------------------------------------------


def output_name(name: str | os.PathLike) -> str:
    """A sample's name below each split folder: relative, normalised, never absolute, never `..`."""
    text = os.fspath(name)
    if os.path.isabs(text):
        raise OutputError(
            f"the sample name {text!r} is an absolute path: give a name relative to the output folder, "
            f"such as {Path(text).name or 'my_model'!r}."
        )
    parts = [part for part in text.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise OutputError(f"the sample name {text!r} contains '..': give a name that stays inside the output folder.")
    if not parts:
        raise OutputError(f"the sample name {text!r} names no folder: give a sample name such as 'my_model'.")
    return "/".join(parts)


def sample_path(split: str, name: str, layout: Layout = "graphnet") -> str:
    """Where the sample `name` of `split` lives below the output folder.

    GraphNet's extractor writes `train_*` splits into `<split>/<rel>/<basename>_<split>` and copies the
    input to `eval_forward/<rel>`.
    """
    if layout not in LAYOUTS:
        raise OutputError(f"unknown layout {layout!r}: use 'graphnet' (GraphNet's own) or 'flat'.")
    if layout == "flat" or split == EVAL_SPLIT:
        return f"{split}/{name}"
    return f"{split}/{name}/{PurePosixPath(name).name}_{split}"


def settings_of(extraction: Extracted) -> dict:
    """What made an output: compared by `--resume`, stored in every marker and in `summary.json`."""
    return {
        "partitioner": extraction.partitioner,
        "memory_budget": extraction.memory_budget,
        "mode": extraction.mode,
        "torch": torch.__version__,
    }


def new_stamp(settings: Mapping[str, object]) -> dict:
    """One run token shared by all splits of one write: splits with different tokens were not written together."""
    return {"run": uuid.uuid4().hex, "settings": dict(settings)}


def _marker(graph_net_json: Path) -> dict | None:
    try:
        info = json.loads(graph_net_json.read_text())
    except (OSError, ValueError):
        return None
    marker = info.get(MARKER) if isinstance(info, dict) else None
    return marker if isinstance(marker, dict) else None


def owned_markers(folder: Path, name: str, split: str) -> list[dict] | None:
    """The markers proving that bwd_widgets wrote `folder` as `split/name`, or None when it cannot prove it.

    Proof: a real folder (no links inside) whose `graph_net.json` carries our marker for this name and split
    and which holds only the files that marker lists, or a folder of `subgraph_N` folders each proven so.
    """
    if folder.is_symlink() or not folder.is_dir():
        return None
    marker = _marker(folder / "graph_net.json")
    if marker is None:
        entries = list(folder.iterdir())
        proven: list[dict] = []
        for entry in entries:
            found = owned_markers(entry, name, split) if _SUBGRAPH.fullmatch(entry.name) else None
            if found is None:
                return None
            proven += found
        return proven or None
    if marker.get("name") != name or marker.get("split") != split:
        return None
    listed = set(marker.get("files", ())) | {"graph_net.json"} | VALIDATOR_FILES
    for path in folder.rglob("*"):
        if path.is_symlink() or (path.is_file() and path.relative_to(folder).as_posix() not in listed):
            return None
    return [marker]


def is_complete(
    out_dir: Path,
    name: str,
    settings: Mapping[str, object],
    splits: Sequence[str] = SPLITS,
    layout: Layout = "graphnet",
) -> bool:
    """Every split of `name` is ours, written together (one run token), with these settings."""
    markers = []
    for split in splits:
        found = owned_markers(Path(out_dir) / sample_path(split, name, layout), name, split)
        if found is None:
            return False
        markers += found
    return len({m.get("run") for m in markers}) == 1 and all(m.get("settings") == settings for m in markers)


# --- staging and the swap -----------------------------------------------------------------------


# --- who owns a folder: a process, told from one that reused its pid --------------------------------


class Holder(TypedDict, total=False):
    """A process that owns a folder or a lock (a staging folder here; batch/lock.py's lock and scratch folders)."""

    pid: int
    host: str
    process_start: str | None
    """The process's start time in clock ticks since boot (Linux): a pid reused by another process is not it."""
    started: str
    command: str


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start(pid: int) -> str | None:
    fields = _proc_stat(pid)
    return fields[19] if fields else None


def holder_of(pid: int | None = None) -> Holder:
    """This process (or its child `pid`) as an owner record names it: pid, host and start time; for this
    process also when (UTC) and how it was started."""
    pid = os.getpid() if pid is None else pid
    holder: Holder = {"pid": pid, "host": socket.gethostname(), "process_start": process_start(pid)}
    if pid == os.getpid():
        holder["started"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        holder["command"] = shlex.join(sys.argv)
    return holder


def process_gone(holder: Holder) -> bool:
    """Whether the holder's process is provably gone: on this host, and its pid dead, a zombie, or reused.
    The one such check: batch/lock.py (locks, scratch folders) asks it too."""
    if holder.get("host") != socket.gethostname():
        return False
    pid = int(holder["pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # another user's process: alive
    fields = _proc_stat(pid)
    if fields is None:
        return not Path("/proc/self/stat").exists()  # no /proc here: os.kill's answer stands
    recorded = holder.get("process_start")
    return fields[0] in ("Z", "X") or (recorded is not None and fields[19] != recorded)


@contextmanager
def staging(out_dir: Path) -> Iterator[Path]:
    """A fresh folder inside `out_dir` (same file system, so renames are atomic), removed on the way out."""
    stage = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out_dir))
    try:
        (stage / STAGING_OWNER).write_text(json.dumps(holder_of()))
        yield stage
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def clean_stale_staging(out_dir: Path) -> list[Path]:
    """Remove staging folders that a killed run of ours left behind (its process on this host is gone)."""
    removed = []
    for stage in Path(out_dir).glob(STAGING_PREFIX + "*"):
        try:
            owner = json.loads((stage / STAGING_OWNER).read_text())
            holder = Holder(pid=int(owner["pid"]), host=str(owner["host"]), process_start=owner.get("process_start"))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue  # not provably ours
        if stage.is_symlink() or not process_gone(holder):
            continue
        shutil.rmtree(stage, ignore_errors=True)
        removed.append(stage)
    return removed


def check_target(out_dir: Path, split: str, name: str, layout: Layout = "graphnet") -> Path:
    """Where `split/name` goes under `out_dir`, or an OutputError if writing there could touch what is not ours."""
    out_dir = Path(out_dir)
    relative = sample_path(split, name, layout)
    target = out_dir / relative
    folder = out_dir
    for part in relative.split("/")[:-1]:
        folder = folder / part
        if folder.is_symlink():
            raise OutputError(
                f"{folder} is a symbolic link: bwd_widgets writes only inside {out_dir}; remove the link or choose "
                "another output folder."
            )
        if folder.exists() and not folder.is_dir():
            raise OutputError(f"{folder} is a file: move it away or choose another output folder.")
        if folder != out_dir / split and _holds_sample(folder):
            raise OutputError(
                f"{target} would be inside the sample {folder}: choose a name that is not inside another sample."
            )
    if (target.exists() or target.is_symlink()) and owned_markers(target, name, split) is None:
        raise OutputError(
            f"{target} holds files bwd_widgets did not write, so it was left alone: move it away or choose another "
            "output folder."
        )
    return target


def _holds_sample(folder: Path) -> bool:
    return (folder / "graph_net.json").exists() or any(folder.glob("subgraph_*/graph_net.json"))


def install(
    out_dir: Path, stage: Path, name: str, splits: Sequence[str], layout: Layout = "graphnet"
) -> dict[str, Path]:
    """Swap each split's sample from `stage` into `out_dir` (same relative path): all of them or none.

    Replaced outputs (ours only, checked first) move into the stage and go when the stage is removed.
    Any failure, an interrupt included, puts every folder back as it was.
    """
    out_dir = Path(out_dir)
    targets = {split: check_target(out_dir, split, name, layout) for split in splits}
    staged = {split: stage / sample_path(split, name, layout) for split in splits}
    for split in splits:
        if not staged[split].is_dir():
            raise OutputError(f"nothing was staged for {split}/{name}: the sample's files are incomplete.")
    undo = []
    try:
        for split, target in targets.items():
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists() or target.is_symlink():
                replaced = stage / "replaced" / split
                replaced.parent.mkdir(parents=True, exist_ok=True)
                target.rename(replaced)
                undo.append((replaced, target))
            staged[split].rename(target)
            undo.append((target, staged[split]))
    except BaseException:
        for moved, origin in reversed(undo):
            try:
                moved.rename(origin)
            except OSError:
                continue  # put back all that can be; the stage keeps the rest until it is removed
        raise
    return targets


# --- writing an extraction ------------------------------------------------------------------------


def write_extraction(
    extraction: Extracted,
    folder: Path,
    name: str,
    stamp: dict,
    layout: Layout = "graphnet",
    check: Callable[[Path], None] | None = None,
) -> None:
    """Write the `train_forward` and `train_backward` samples of `name` under `folder` (a stage), with our marker.

    Several compiled regions (graph breaks) go into `subgraph_N` folders, as GraphNet's extractor writes them.
    `check` runs on each sample folder before its `graph_net.json` is written.
    """
    for split in TRAIN_SPLITS:
        for partition in extraction.partitions:
            relative = Path(sample_path(split, name, layout))
            if len(extraction.partitions) > 1:
                relative = relative / f"subgraph_{partition.index}"
            if split == "train_forward":
                gm, code, real = partition.forward, partition.forward_code, partition.forward_inputs
            else:
                gm, code, real = partition.backward, partition.backward_code, partition.backward_inputs
            names, values = placeholder_values(gm, real)
            gm, rewritten = for_graphnet_tools(gm, values)
            if rewritten:
                code = graphnet_code(gm)
            originals = {f"primals_{i + 1}": source.name for i, source in enumerate(partition.inputs)}
            info = {
                "framework": "torch",
                "num_devices_required": 1,
                "num_nodes_required": 1,
                "dynamic": False,
                "model_name": f"{Path(name).name}_{split}",
            }
            marker = {"name": name, "split": split, **stamp}
            if rewritten:
                marker["rewritten_for_graphnet"] = rewritten
            write_sample(folder / relative, code, names, values, originals, info, marker, check)


def write_eval_copy(folder: Path, name: str, files: dict[str, bytes], stamp: dict) -> None:
    """`eval_forward/<name>` under `folder`: the input sample's files, our marker added to its `graph_net.json`."""
    target = folder / EVAL_SPLIT / name
    info: dict = {}
    for relative, data in files.items():
        if relative == "graph_net.json":
            try:
                info = json.loads(data)
            except ValueError:
                info = {}
            if not isinstance(info, dict):
                info = {}
            continue
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    target.mkdir(parents=True, exist_ok=True)
    marker = {"name": name, "split": EVAL_SPLIT, **stamp, "files": sorted(r for r in files if r != "graph_net.json")}
    (target / "graph_net.json").write_text(json.dumps({**info, MARKER: marker}, indent=4) + "\n")


def prepare_output(out_dir: str | os.PathLike) -> Path:
    """Create the output folder, or one OutputError naming why it cannot be written."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"the output folder {out_dir} is a file: name a folder.")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    except OSError as error:
        raise OutputError(f"cannot write to the output folder {out_dir}: {error.strerror or error}.") from None
    free = shutil.disk_usage(out_dir).free
    if free < MIN_FREE_BYTES:
        raise OutputError(
            f"the disk holding {out_dir} is full ({format_bytes(free)} free): free some space or choose another "
            "output folder."
        )
    return out_dir


def save_extraction(
    extraction: Extracted,
    out_dir: str | Path,
    name: str,
    layout: Layout = "graphnet",
    check: Callable[[Path], None] | None = None,
) -> dict[str, Path]:
    """Write the train_forward and train_backward samples of `name`, together or not at all.

    `name` must stay inside `out_dir`; an existing output is replaced only if bwd_widgets wrote it.
    """
    name = output_name(name)
    out_dir = prepare_output(out_dir)
    for split in TRAIN_SPLITS:
        check_target(out_dir, split, name, layout)
    with staging(out_dir) as stage:
        write_extraction(extraction, stage, name, new_stamp(settings_of(extraction)), layout, check)
        return install(out_dir, stage, name, TRAIN_SPLITS, layout)
