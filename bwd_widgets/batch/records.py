"""What crosses processes in a batch: the request a worker gets, the record it sends back, and their words.

The record is also a row of `summary.json`, so its keys are the summary's; a request and a record are
pickled between the client and a worker process (or a Dask worker), so they stay plain dicts, typed here.
"""

from __future__ import annotations

from typing import Literal, TypedDict, get_args

from ..core.kinds import DEFAULT_BACKEND as DEFAULT_BACKEND
from ..core.kinds import Backend, Mode
from ..graphnet.validate import Outcome as Outcome
from ..graphnet.validate import ValidationRecord
from ..graphnet.writer import Layout

Status = Literal["ok", "error", "crash", "timeout", "skipped"]
"""ok: written; error: the sample's fault, in one sentence; crash: its worker process died; timeout: it was
stopped; skipped: `resume` found its outputs complete with the same settings, made from the same input files."""
STATUSES: tuple[Status, ...] = get_args(Status)
FAILED: tuple[Status, ...] = ("error", "crash", "timeout")
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
FIGURES = ("graphs", "forward_nodes", "backward_nodes", "saved", "saved_activation_bytes", "saved_input_bytes")
"""The extraction's figures an `ok` record carries (keys of `BackwardExtraction.summary()`)."""


def backend_of(settings: Settings) -> Backend:
    """The backend that made (or makes) an output with these settings: an absent one is the old default."""
    return settings.get("backend", DEFAULT_BACKEND)


class _Settings(TypedDict):
    partitioner: str
    memory_budget: float | None
    mode: Mode
    torch: str


class Settings(_Settings, total=False):
    """What made an output; `resume` compares it with each output's marker."""

    validate: bool
    """Present (True) only when validating: outputs written before validation existed keep their settings."""
    backend: Backend
    """Present only for a backend other than `DEFAULT_BACKEND` (aot_eager): outputs written before `--backend`
    existed carry none, and were made by that default, so `resume` still finds them complete."""


class _Request(TypedDict):
    name: str
    folder_name: str
    display: str
    """The sample's folder as the user named it: errors say this, not the worker's scratch copy."""
    device: str
    settings: Settings
    stamp: dict
    """`graphnet_writer.new_stamp`: the run token every split of this write carries."""
    layout: Layout
    validate: bool
    files: dict[str, bytes]


class SampleRequest(_Request, total=False):
    """One sample for a worker: its files travel with it (no shared file system is assumed)."""

    error: str
    """Set by the client when the sample cannot be read: the worker returns it as an `error` record."""


class _Record(TypedDict):
    name: str
    status: Status


class SampleRecord(_Record, ValidationRecord, total=False):
    """One sample's outcome: a worker's answer, then (without `files`) a row of `summary.json`."""

    reason: str
    seconds: float
    settings: Settings
    graphs: int
    forward_nodes: int
    backward_nodes: int
    saved: int
    saved_activation_bytes: int
    saved_input_bytes: int
    notes: list[str]
    inputs_digest: str
    """sha256 of the sample's input files (paths and bytes) the outputs were made from: `resume` redoes a sample
    whose files no longer match it, or whose record has none."""
    files: dict[str, bytes]
    """The written outputs, from the worker to the client only."""
